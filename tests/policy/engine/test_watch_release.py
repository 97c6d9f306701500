"""A scale down the webhook never saw (it failed open, or was down): the watch shows the held workload smaller and its dropped demand is released, once, capped by the hold."""

from __future__ import annotations

import copy
from dataclasses import dataclass

import pytest

from lang import compile_policies
from policy.cluster.snapshot import ClusterSnapshot
from policy.engine import Engine

from tests.policy.engine.test_hold_release import assert_held, dep, engine, review
from tests.policy.engine.test_workloads_decide import member

GIB = 2**30


def gen(obj, generation, **spec):
    """`obj` as the API server stores it after a spec change: the new generation, the new spec fields."""
    out = copy.deepcopy(obj)
    out["metadata"]["generation"] = generation
    out["spec"].update(spec)
    return out


def d(replicas, generation, uid="uid-1"):
    return gen(dep(replicas, uid), generation, replicas=replicas)


@dataclass
class Case:
    name: str
    steps: list  # ("watch", event, builder) | ("review", builder) | ("pod", i)
    want_held: int  # milli-GPU left in the Deployment's hold (admitted at 4 x 1 H100)
    want_memory: int | None = None
    want_fits: bool | None = None  # whether another workload's 1-GPU pod fits afterwards


CASES = [
    Case("the watch shows 4 -> 1 the webhook never saw: 3 released", [("watch", "ADDED", lambda: d(4, 1)), ("watch", "MODIFIED", lambda: d(1, 2))],
         1000, 80 * GIB, want_fits=True),
    Case("first listed already smaller (the watch reconnected after the scale): released", [("watch", "ADDED", lambda: d(2, 2))], 2000, 2 * 80 * GIB),
    Case("the same change seen twice (a relist) releases once", [("watch", "ADDED", lambda: d(4, 1)), ("watch", "MODIFIED", lambda: d(2, 2)),
                                                                 ("watch", "MODIFIED", lambda: d(2, 2))], 2000),
    Case("a scale down the webhook judged, then its watch event: released once", [("review", lambda: review(d(2, 2), "UPDATE", d(4, 1))),
                                                                                 ("watch", "ADDED", lambda: d(2, 2))], 2000, want_fits=True),
    Case("a status update (same generation) releases nothing", [("watch", "ADDED", lambda: d(4, 1)),
                                                                ("watch", "MODIFIED", lambda: {**d(4, 1), "status": {"replicas": 4, "readyReplicas": 1}})],
         4000, want_fits=False),
    Case("never more than the hold holds: 3 pods took theirs, 4 -> 2 releases the 1 left", [("pod", 0), ("pod", 1), ("pod", 2),
                                                                                              ("watch", "ADDED", lambda: d(4, 1)), ("watch", "MODIFIED", lambda: d(2, 2))], 0),
    Case("a scale up the webhook missed holds nothing more", [("watch", "ADDED", lambda: d(4, 1)), ("watch", "MODIFIED", lambda: d(6, 2))], 4000),
    Case("...and a later watched scale down is measured from what the hold was sized to", [("watch", "ADDED", lambda: d(4, 1)), ("watch", "MODIFIED", lambda: d(6, 2)),
                                                                                          ("watch", "MODIFIED", lambda: d(3, 3))], 3000),
    Case("an older object of that name scaled down does not release the new one's hold", [("watch", "ADDED", lambda: d(1, 5, uid="uid-0"))], 4000, want_fits=False),
    Case("the watch shows it scaled to 0: all released", [("watch", "ADDED", lambda: d(4, 1)), ("watch", "MODIFIED", lambda: d(0, 2))], 0, 0, want_fits=True),
]


def run(case):
    e, snap = engine(), ClusterSnapshot.from_objects([])
    assert e.decide(review(dep(4)), snap, 0.0).allowed
    for step in case.steps:
        if step[0] == "watch":
            snap.apply(step[1], step[2]())
        elif step[0] == "review":
            assert e.decide(step[1](), snap, 1.0).allowed
        else:
            assert e.decide(review(member(step[1])), snap, 1.0).allowed
    return e, snap


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_watch_release(case):
    e, snap = run(case)
    assert_held(e, snap, case)
    quota = e.state_for(snap).quota
    assert quota.used[0] == sum(h[1] for _, hs in snap.reservations.holds.values() for h in hs)  # usage is the holds, never released twice


JOB_POLICY = 'quota a { for namespace == "team-a"  gpus 8 }\n'


def job(parallelism, generation, suspend=False):
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "train", "namespace": "team-a", "uid": "j1", "generation": generation},
            "spec": {"parallelism": parallelism, "completions": 8, "suspend": suspend, "template": {"spec": {"restartPolicy": "Never", "containers": [
                {"name": "m", "image": "t:1", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}}}


@pytest.mark.parametrize("later, want", [(job(2, 2), 2000), (job(4, 2, suspend=True), 0), (job(4, 1), 4000)],
                         ids=["parallelism 4 -> 2 releases 2", "suspended by the watch (Kueue preempted it): all released", "unchanged: nothing"])
def test_a_job_resized_behind_the_webhooks_back(later, want):
    ps, _ = compile_policies([("j.policy", JOB_POLICY)])
    e, snap = Engine(ps), ClusterSnapshot.from_objects([])
    assert e.decide(review(job(4, 1)), snap, 0.0).allowed
    snap.apply("ADDED", job(4, 1))
    snap.apply("MODIFIED", later)
    h = snap.reservations.holds.get("wl:team-a/Job/train")
    assert (sum(x[1] for x in h[1]) if h else 0) == want
    assert e.state_for(snap).quota.used == [want]
