"""The dialects fixture: every dialect's live pod normalizes to the documented fields."""

import pathlib
from dataclasses import dataclass

import pytest

from policy.cluster.snapshot import ClusterSnapshot, is_live
from policy.subject.normalize import normalize_object

FIXTURE = pathlib.Path(__file__).resolve().parents[2] / "fixtures" / "cluster" / "dialects.yaml"
SNAP = ClusterSnapshot.from_text(FIXTURE.read_text())
MI = 2**20


@dataclass
class Case:
    pod: str
    want_gpus: int
    want_fraction: int | None = None
    want_memory: int | None = None
    want_gang: str | None = None
    want_min: int | None = None
    want_required: str | None = None


CASES = [
    Case("cosched-0", 1000, want_gang="cosched-pg", want_min=2),
    Case("volcano-0", 1000, want_gang="volcano-pg", want_min=3),
    Case("kai-0", 500, 500, want_gang="kai-pg", want_min=4, want_required="topology.acme.io/rack"),
    Case("kueue-0", 1000, want_gang="kq", want_min=2),
    Case("upstream-0", 1000, want_gang="upstream-pg", want_min=2, want_required="topology.acme.io/block"),
    Case("workload-0", 1000, want_gang="upstream-wl/workers", want_min=8),
    Case("beta-0", 2000, want_gang="beta-wl-slice-a-0", want_min=4, want_required="topology.acme.io/rack"),  # 1.37 v1beta1 PodGroup
    Case("hami-0", 300, 300, 6000 * MI),  # 6000 of 23034 MiB is 261 milli; cores 30% is larger
    Case("mig-0", 143, 143, 10 * 2**30),
    Case("dra-shared-0", 250, 250, 20389 * MI),
    Case("dra-two-0", 2000),
    Case("done-0", 8000),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.pod)
def test_every_dialect_in_the_fixture(case):
    w = normalize_object(SNAP.pod("ml", case.pod), SNAP)
    assert (w.gpus, w.fraction, w.gpu_memory, w.gang, w.min_members, w.topology_required, w.problems) == (
        case.want_gpus, case.want_fraction, case.want_memory, case.want_gang, case.want_min, case.want_required, ())


def test_fixture_group_objects_and_liveness():
    assert {g.family for g in SNAP.groups()} == {"coscheduling", "volcano", "kai", "podgroup", "workload", "kueue"}
    assert SNAP.group("ml", "kueue-wl").min_gpus == 8000
    beta = SNAP.group("ml", "beta-wl", "workload")  # v1beta1 composite gang: any one of its two groups of 4 may start
    assert (beta.min_members, beta.topology_required, [(ps.name, ps.count) for ps in beta.pod_sets]) == (
        4, "topology.acme.io/block", [("replicas/slice-a", 4), ("replicas/slice-b", 4)])
    assert not is_live(SNAP.pod("ml", "done-0"))
