"""Gang holds commit after the decision: only an admitted, non-dryRun, reserving request holds its gang's domain."""

from __future__ import annotations

import dataclasses

import pytest

from tests.policy.blocks.gang.gangs_builders import CONTRACT_GANG, H100, cluster, engine, kueue_member, node, rack_of, request  # noqa: E402

from policy.placement import GangRequest  # noqa: E402
from policy.subject.model import PodSet  # noqa: E402

from policy.placement.reservations import RESERVATION_ANNOTATION  # noqa: E402

# Rack r1 holds 16 free GPUs (the best fit for a 2 x 8 gang), rack r2 24.
NODES = (node("n1", "r1"), node("n2", "r1"), node("n3", "r2"), node("n4", "r2"), node("n5", "r2"))
QUOTAS = """
quota train { for namespace == "train" gpus 64 }
quota poor { for namespace == "poor" gpus 4 }
"""
NO_HUGE_NAMES = """
rule no-bad-names {
  for name == "bad-0"
  deny "bad name"
}
"""
WARN_ONLY = """
rule big-warn {
  mode warn
  for total_gpus > 4
  deny "big pod"
}
"""


@dataclasses.dataclass(frozen=True)
class Case:
    name: str
    namespace: str = "train"
    member: str = "m-0"
    extra: str = ""
    dry_run: bool = False
    reserve: bool = True
    mutate: bool = True
    want_allowed: bool = True
    want_held: dict = dataclasses.field(default_factory=dict)
    want_rack: str | None = None  # the rack the member's patch pins it to (None: no affinity patch)
    want_annotation: bool = False
    want_second_rack: str = "r1"  # where a second 2 x 8 gang goes afterwards


CASES = [
    Case("denied by quota holds nothing", namespace="poor", want_allowed=False),
    Case("denied by quota on the validating side", namespace="poor", mutate=False, want_allowed=False),
    Case("denied by an enforce rule holds nothing", member="bad-0", extra=NO_HUGE_NAMES, want_allowed=False),
    Case("allowed holds", want_held={"train/g": 2}, want_rack="r1", want_annotation=True, want_second_rack="r2"),
    Case("allowed on the validating side holds", mutate=False, want_held={"train/g": 2}, want_second_rack="r2"),
    Case("dryRun holds nothing", dry_run=True, want_rack="r1"),
    Case("offline (reserve=False) holds nothing", reserve=False, want_rack="r1"),
    Case("warn-mode denial is admitted and holds", extra=WARN_ONLY, want_held={"train/g": 2}, want_rack="r1",
         want_annotation=True, want_second_rack="r2"),
]


def _held(eng, snap) -> dict:
    return {rid: len(r.slots) for rid, r in eng.state_for(snap).planner().index.reservations.by_id.items()}


def _annotated(patch) -> bool:
    return any(RESERVATION_ANNOTATION.replace("/", "~1") in op["path"] or RESERVATION_ANNOTATION in repr(op.get("value"))
               for op in patch)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_gang_hold_commits_only_for_admitted_requests(case: Case):
    eng, snap = engine(CONTRACT_GANG + QUOTAS + case.extra), cluster(*NODES)
    member = kueue_member(case.member, "g", 8, 2, ns=case.namespace)
    d = eng.decide(request(member, dry_run=case.dry_run), snap, 0.0, mutate=case.mutate, reserve=case.reserve)
    assert d.allowed is case.want_allowed, d.reasons
    assert _held(eng, snap) == case.want_held
    assert rack_of(d.patch) == ([case.want_rack] if case.want_rack else None)
    assert _annotated(d.patch) is case.want_annotation
    assert d.placement is not None and d.placement.value == "r1"  # where it goes (or would go)
    assert (d.placement.reservation is not None) is bool(case.want_held)
    second = eng.decide(request(kueue_member("o-0", "other", 8, 2)), snap, 1.0)
    assert second.allowed and second.placement.value == case.want_second_rack


def test_a_denied_member_of_a_placed_gang_does_not_extend_its_hold():
    eng, snap = engine(CONTRACT_GANG + QUOTAS + NO_HUGE_NAMES), cluster(*NODES)
    assert eng.decide(request(kueue_member("m-0", "g", 8, 2)), snap, 0.0, mutate=True).allowed
    resv = eng.state_for(snap).planner().index.reservations.by_id["train/g"]
    assert resv.expires_at == 300.0
    d = eng.decide(request(kueue_member("bad-0", "g", 8, 2)), snap, 200.0, mutate=True)
    assert not d.allowed and rack_of(d.patch) is None
    assert resv.expires_at == 300.0  # a denied member does not keep its gang alive
    ok = eng.decide(request(kueue_member("m-1", "g", 8, 2)), snap, 250.0, mutate=True)
    assert ok.allowed and rack_of(ok.patch) == ["r1"] and resv.expires_at == 550.0


def _checked(eng, snap, obj, now: float):
    """A Context after every block ran, before the engine settles it (what a worker thread holds mid-decision)."""
    from policy.context import Context
    from policy.subject.normalize import normalize

    w = eng.enrich(normalize(request(obj), snap))
    ctx = Context(w, snap, now, True, state=eng.state_for(snap))
    eng._by_namespace.get(w.namespace, eng._unkeyed)(ctx)
    return ctx


@pytest.mark.parametrize(
    "taker, want_rack, want_codes",
    [
        (None, "r1", ()),  # nothing happened in between: the checked domain is held
        ((2, 8, "rack"), "r2", ()),  # another gang took r1 meanwhile: asked again, pinned and held in r2
        ((5, 8, "block"), None, ("GangUnplaceable",)),  # the whole fabric went meanwhile: reported, nothing held or pinned
    ],
)
def test_settle_asks_again_when_the_index_changed_since_the_check(taker, want_rack, want_codes):
    from policy.engine import combine
    from policy.blocks.gang import settle

    eng, snap = engine(CONTRACT_GANG + QUOTAS), cluster(*NODES)
    ctx = _checked(eng, snap, kueue_member("m-0", "g", 8, 2), 0.0)
    assert ctx.gang is not None and ctx.gang.result.domain == "r1"
    planner = eng.state_for(snap).planner()
    if taker is not None:  # a concurrent decision holds capacity between this one's check and settle
        count, gpus, level = taker
        other = GangRequest((PodSet("o", count, gpus * 1000, gpu_product=H100),), topology="fabric", required=level)
        assert planner.plan("train/other", other, 0.0).fits
    settle(ctx, allowed=True, hold=True)
    d = combine(ctx)
    assert tuple(r.code for r in d.reasons) == want_codes
    assert rack_of(d.patch) == ([want_rack] if want_rack else None)
    assert ("train/g" in _held(eng, snap)) is (want_rack is not None)
    assert (d.placement.value if d.placement else None) == want_rack
