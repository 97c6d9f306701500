"""Gangs of several pod sets (problem 4 of issue 11): each set keeps its shape and minimum, all or nothing.

A Volcano PodGroup with `minTaskMember {master: 1, worker: 2}`: the master asks 1 GPU,
each worker 8. Volcano binds the right mix or nothing, so every member is judged as
the whole mix (1 + 8 + 8 = 17 GPUs), whichever arrives first, and the hold holds one
slot of each member's shape.
"""

from __future__ import annotations

import dataclasses

import pytest
from tests.policy.blocks.gang.gangs_builders import cluster, engine, member, node, podgroup, rack_of, request

from policy.placement import GangRequest
from policy.placement.query import set_counts
from policy.placement.reservations import RESERVATION_ANNOTATION
from policy.subject.model import PodSet

RACK_GANG = """
gang training {
  for labels["acme.io/workload"] == "training"
  require topology fabric.rack
  on unplaceable deny
}
"""
R1 = (node("a1", "r1"), node("a2", "r1"))  # 16 GPUs: holds 3 x 1 or 2 x 8, not 1 + 2 x 8
R2 = (node("b1", "r2"), node("b2", "r2"), node("b3", "r2"))  # 24 GPUs: holds the mix
TASKS = {"master": 1, "worker": 2}
SHAPES = {"master": 1, "worker": 8}


def _pod(task: str, i: int = 0, family: str = "volcano") -> dict:
    return member(f"job-{task}-{i}", "job", SHAPES[task], family=family, task=task)


@dataclasses.dataclass(frozen=True)
class Case:
    name: str
    order: tuple  # tasks in arrival order
    racks: tuple = (R1, R2)
    min_gpus: int | None = 17
    want_rack: str | None = "r2"  # every member's rack (None: every member denied)
    family: str = "volcano"


CASES = [
    Case("master first", ("master", "worker", "worker")),
    Case("workers first", ("worker", "worker", "master")),
    Case("worker, master, worker", ("worker", "master", "worker")),
    Case("no minResources: the shapes come from the members seen", ("worker", "master", "worker"), min_gpus=None),
    Case("no rack holds the mix: every member is denied, none holds GPUs", ("master", "worker", "worker"), racks=(R1,), want_rack=None),
    Case("no rack holds the mix, workers first", ("worker", "master", "worker"), racks=(R1,), want_rack=None),
    Case("KAI subGroups, master first", ("master", "worker", "worker"), family="kai"),
    Case("KAI subGroups, workers first, no minResources", ("worker", "worker", "master"), min_gpus=None, family="kai"),
    Case("KAI subGroups that no rack holds", ("worker", "master", "worker"), racks=(R1,), want_rack=None, family="kai"),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_volcano_tasks_are_all_or_nothing(case: Case):
    eng = engine(RACK_GANG)
    group = podgroup("job", 3, gpus=case.min_gpus, tasks=TASKS, family=case.family)
    snap = cluster(*(n for rack in case.racks for n in rack), group)
    seen: dict[str, int] = {}
    for t, task in enumerate(case.order):
        i = seen[task] = seen.get(task, -1) + 1
        d = eng.decide(request(_pod(task, i, case.family)), snap, float(t), mutate=True)
        assert d.allowed is (case.want_rack is not None), (task, d.reasons)
        assert rack_of(d.patch) == ([case.want_rack] if case.want_rack else None), task
        eng.decide(request(_pod(task, i, case.family)), snap, float(t))  # the validating side holds
    held = eng.state_for(snap).planner().index.reservations.by_id
    if case.want_rack is None:
        assert held == {}
    else:
        shapes = sorted(d.whole for _n, d in held["train/job"].slots.values())
        assert shapes == [1, 8, 8]


def test_the_hold_holds_each_sets_slots_until_its_member_binds():
    eng = engine(RACK_GANG)
    group = podgroup("job", 3, gpus=17, tasks=TASKS, family="volcano")
    snap = cluster(*R1, *R2, group)
    eng.decide(request(_pod("master")), snap, 0.0)
    index = eng.state_for(snap).planner().index
    resv = index.reservations.get("train/job")
    assert sorted(d.whole for _n, d in resv.slots.values()) == [1, 8, 8]
    node_of_master = next(n for n, d in resv.slots.values() if d.whole == 1)
    bound = _pod("master")
    bound["metadata"]["annotations"][RESERVATION_ANNOTATION] = "train/job"
    bound["metadata"]["uid"] = "uid-master"
    bound["spec"]["nodeName"] = node_of_master
    bound["status"] = {"phase": "Pending"}
    snap.apply("ADDED", bound)
    assert sorted(d.whole for _n, d in index.reservations.get("train/job").slots.values()) == [8, 8]  # the master took its own slot


@pytest.mark.parametrize(
    "sets, min_count, want_counts",
    [
        # Kueue podSets with their own minCount: each set trimmed to its own minimum.
        ((PodSet("driver", 1, 1000, min_count=1), PodSet("workers", 8, 8000, min_count=4)), 5, [1, 4]),
        # Listed in the other order: the same minimum per set.
        ((PodSet("workers", 8, 8000, min_count=4), PodSet("driver", 1, 1000, min_count=1)), 5, [4, 1]),
        # No per-set minimum: the gang's minimum from the least demanding pods, whatever the order.
        ((PodSet("big", 2, 8000), PodSet("small", 2, 1000)), 3, [1, 2]),
        ((PodSet("small", 2, 1000), PodSet("big", 2, 8000)), 3, [2, 1]),
        # More members than listed: the missing ones are shaped like the least demanding set.
        ((PodSet("big", 1, 8000), PodSet("small", 1, 1000)), 4, [1, 3]),
        # No gang minimum: every listed pod.
        ((PodSet("a", 2, 1000), PodSet("b", 3, 2000)), None, [2, 3]),
    ],
)
def test_minimums_are_per_set_and_do_not_depend_on_order(sets, min_count, want_counts):
    assert set_counts(GangRequest(sets, min_count=min_count)) == want_counts


def test_a_kueue_workload_of_two_pod_sets_is_placed_with_each_sets_minimum():
    """driver 1 x 1 GPU, workers 4 x 8 with minCount 2: 1 + 2 x 8 = 17 must fit now, so rack r2 (24), not r1 (16)."""
    eng = engine(RACK_GANG)
    def tmpl(g):
        return {"spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": str(g)}}}]}}

    wl = {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "Workload",
          "metadata": {"name": "wl", "namespace": "train", "labels": {"acme.io/workload": "training"}},
          "spec": {"queueName": "q", "podSets": [{"name": "driver", "count": 1, "template": tmpl(1)},
                                                 {"name": "workers", "count": 4, "minCount": 2, "template": tmpl(8)}]}}
    d = eng.decide(request(wl), cluster(*R1, *R2), 0.0)
    assert d.allowed and d.placement.value == "r2" and sum(d.placement.nodes.values()) == 3


def test_members_are_counted_once_per_pod_and_the_judged_pod_is_left_out():
    from policy.placement.members import Members

    m = Members(limit=2)
    w8, w1 = PodSet("w", 1, 8000), PodSet("m", 1, 1000)
    for name, s, shape in (("a", "worker", w8), ("a", "worker", w8), ("b", "worker", w8), ("c", "master", w1)):
        m.note("ns/g", name, s, shape)  # "a" twice: the mutating and the validating side judge the same pod
    assert sorted((s, n) for s, _p, n in m.of("ns/g")) == [("master", 1), ("worker", 2)]
    assert sorted((s, n) for s, _p, n in m.of("ns/g", exclude="a")) == [("master", 1), ("worker", 1)]
    m.note("ns/g", "c", "worker", w8)  # the same pod again with another set: moved, not added
    assert [(s, n) for s, _p, n in m.of("ns/g")] == [("worker", 3)]
    m.note("ns/h", "x", None, w1)
    m.note("ns/k", "y", None, w1)  # past `limit` gangs: the oldest is forgotten
    assert m.of("ns/g") == [] and m.of("ns/k") != []
