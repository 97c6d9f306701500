"""The hold lifecycle of an admitted workload: scale down, the `scale` sub-resource, DELETE, the watch, finished pods release it at once, never twice."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

import pytest

from lang import compile_policies
from policy.admission import wrap_manifest
from policy.cluster.snapshot import ClusterSnapshot
from policy.engine import Engine

from tests.policy.engine.test_workloads_decide import deployment, member

POLICY = '''
gpu h100 { product "NVIDIA-H100-80GB-HBM3" memory 80Gi }
quota serving { for namespace == "serving"  gpus 4  gpus 4 of h100  gpu_memory 320Gi }
rule no-big {
  for namespace == "serving"
  when total_gpus > 100
  deny "too big"
}
'''
KEY = "wl:serving/Deployment/rerank"
GIB = 2**30


def engine():
    ps, diags = compile_policies([("h.policy", POLICY)])
    assert not [d for d in diags if d.severity == "error"], diags
    return Engine(ps)


def dep(replicas, uid="uid-1"):
    d = deployment(replicas)
    d["metadata"]["uid"] = uid
    return d


def review(obj, operation="CREATE", old=None, dry_run=False):
    req = wrap_manifest(obj if obj is not None else old, user="alice", groups=["dev"], operation=operation)["request"]
    req["object"] = obj if operation != "DELETE" else None
    req["oldObject"] = old
    req["dryRun"] = dry_run
    return req


def scale(replicas, old_replicas):
    meta = {"name": "rerank", "namespace": "serving"}
    return {
        "uid": f"s-{replicas}", "kind": {"group": "autoscaling", "version": "v1", "kind": "Scale"},
        "resource": {"group": "apps", "version": "v1", "resource": "deployments"}, "subResource": "scale",
        "name": "rerank", "namespace": "serving", "operation": "UPDATE", "userInfo": {"username": "alice", "groups": ["dev"]},
        "object": {"apiVersion": "autoscaling/v1", "kind": "Scale", "metadata": meta, "spec": {"replicas": replicas}},
        "oldObject": {"apiVersion": "autoscaling/v1", "kind": "Scale", "metadata": meta, "spec": {"replicas": old_replicas}},
    }


def held(snap):
    """milli-GPU still held for the Deployment (0 when released)."""
    h = snap.reservations.holds.get(KEY)
    return sum(x[1] for x in h[1] if x[0] == "quota serving") if h else 0


def memory_held(snap):
    h = snap.reservations.holds.get(KEY)
    return sum(x[2] for x in h[1] if x[0] == "quota serving") if h else 0


@dataclass
class Case:
    name: str
    steps: list  # ("review", request-builder) | ("pod", i) | ("watch", event, object) | ("scale_live", replicas)
    want_held: int  # milli-GPU left in the Deployment's hold
    want_memory: int | None = None
    want_allowed: list = field(default_factory=list)  # decisions of the "review" steps, in order
    want_fits: bool | None = None  # whether a 1-GPU pod of another workload fits afterwards


def _running(i):
    p = member(i)
    p["spec"]["nodeName"] = "n1"
    p["status"] = {"phase": "Running"}
    return p


CASES = [
    Case("admitted: the hold is the whole Deployment", [], 4000, 4 * 80 * GIB, want_fits=False),
    Case("scale down by UPDATE releases what it drops", [("review", lambda: review(dep(1), "UPDATE", dep(4)))],
         1000, 80 * GIB, [True], want_fits=True),
    Case("scale down to 0 releases all of it", [("review", lambda: review(dep(0), "UPDATE", dep(4)))], 0, want_allowed=[True], want_fits=True),
    Case("the same scale down twice releases once", [("review", lambda: review(dep(2), "UPDATE", dep(4))),
                                                     ("review", lambda: review(dep(2), "UPDATE", dep(4)))],
         2000, 2 * 80 * GIB, [True, True]),
    Case("a scale down never releases more than the hold holds: 3 pods took theirs, 4 -> 2 drops 2, 1 is left to drop",
         [("pod", 0), ("pod", 1), ("pod", 2), ("review", lambda: review(dep(2), "UPDATE", dep(4)))], 0, want_allowed=[True, True, True, True]),
    Case("a dryRun scale down releases nothing", [("review", lambda: review(dep(1), "UPDATE", dep(4), dry_run=True))], 4000, want_allowed=[True]),
    Case("scale up then down: back to the first size", [("review", lambda: review(dep(4), "UPDATE", dep(4))),
                                                       ("review", lambda: review(dep(3), "UPDATE", dep(4)))],
         3000, 3 * 80 * GIB, [True, True]),
    Case("the scale sub-resource releases against the live Deployment", [("scale_live", 4), ("review", lambda: scale(1, 4))],
         1000, 80 * GIB, [True], want_fits=True),
    Case("a scale sub-resource up is held beside the rest", [("scale_live", 2), ("review", lambda: review(dep(2), "UPDATE", dep(4))),
                                                             ("review", lambda: scale(3, 2))],
         3000, want_allowed=[True, True]),
    Case("DELETE releases the whole hold", [("review", lambda: review(None, "DELETE", dep(4)))], 0, want_allowed=[True], want_fits=True),
    Case("a second DELETE releases nothing more", [("review", lambda: review(None, "DELETE", dep(4))),
                                                   ("review", lambda: review(None, "DELETE", dep(4)))], 0, want_allowed=[True, True]),
    Case("a DELETE of an older object of that name does not release the new one's hold",
         [("review", lambda: review(None, "DELETE", dep(4, uid="uid-0")))], 4000, want_allowed=[True]),
    Case("a denying rule does not refuse a workload DELETE", [("review", lambda: review(None, "DELETE", dep(200)))], 0, want_allowed=[True]),
    Case("the watch: the Deployment gone from the snapshot", [("watch", "ADDED", lambda: dep(4)), ("watch", "DELETED", lambda: dep(4))],
         0, want_fits=True),
    Case("the watch: a DELETE then the watch's DELETED release once", [("review", lambda: review(None, "DELETE", dep(4))),
                                                                      ("watch", "ADDED", lambda: dep(4)), ("watch", "DELETED", lambda: dep(4))],
         0, want_allowed=[True]),
    Case("the watch: an old object's late DELETED leaves the new one's hold", [("watch", "ADDED", lambda: dep(4, uid="uid-0")),
                                                                                ("watch", "DELETED", lambda: dep(4, uid="uid-0"))], 4000),
    Case("the watch: a Deployment being deleted (foreground) releases", [("watch", "ADDED", lambda: {**dep(4), "metadata": {**dep(4)["metadata"], "deletionTimestamp": "2026-12-01T10:00:00Z"}})], 0),
    Case("pods take their share; running pods are counted once", [("pod", 0), ("pod", 1), ("watch", "ADDED", lambda: _running(0)),
                                                                  ("watch", "ADDED", lambda: _running(1))],
         2000, want_allowed=[True, True], want_fits=False),
]


def run(case):
    e, snap = engine(), ClusterSnapshot.from_objects([])
    assert e.decide(review(dep(4)), snap, 0.0).allowed  # 4 x 1 H100: the whole quota, held
    allowed = []
    for step in case.steps:
        if step[0] == "review":
            allowed.append(e.decide(step[1](), snap, 1.0).allowed)
        elif step[0] == "pod":
            allowed.append(e.decide(review(member(step[1])), snap, 1.0).allowed)
        elif step[0] == "scale_live":
            d = dep(step[1])
            snap.apply("MODIFIED" if snap.objects("Deployment") else "ADDED", d)
        else:
            snap.apply(step[1], step[2]())
    return e, snap, allowed


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_release(case):
    e, snap, allowed = run(case)
    assert allowed == case.want_allowed
    assert_held(e, snap, case)


def assert_held(e, snap, case) -> None:
    """The table's `want_held`, `want_memory` and `want_fits` (a stranger's pod fits beside the hold) for `snap`."""
    assert held(snap) == case.want_held
    if case.want_memory is not None:
        assert memory_held(snap) == case.want_memory
    if case.want_fits is not None:
        stranger = member(9, owner="other-1234", hash_="1234")
        assert e.decide(review(stranger), snap, 2.0, reserve=False).allowed is case.want_fits


def test_a_released_hold_is_never_released_twice_into_usage():
    """Usage never goes below what live pods and holds add up to: a double release would make it negative."""
    e, snap = engine(), ClusterSnapshot.from_objects([])
    assert e.decide(review(dep(4)), snap, 0.0).allowed
    for _ in range(3):
        e.decide(review(None, "DELETE", dep(4)), snap, 1.0)
        snap.apply("ADDED", dep(4))
        snap.apply("DELETED", dep(4))
    quota = e.state_for(snap).quota
    assert quota.used == [0] and quota.memory == [0] and quota.models == [{"h100": 0}]


def test_a_finished_pod_releases_its_own_hold_at_once():
    e, snap = engine(), ClusterSnapshot.from_objects([])
    assert e.decide(review(dep(4)), snap, 0.0).allowed
    assert e.decide(review(member(0)), snap, 1.0).allowed
    assert "serving/rerank-7c9f8-0" in snap.reservations.holds
    done = copy.deepcopy(member(0))
    done["status"] = {"phase": "Succeeded"}  # first seen finished: it never charges
    snap.apply("ADDED", done)
    assert "serving/rerank-7c9f8-0" not in snap.reservations.holds
    assert e.state_for(snap).quota.used == [3000]  # the other 3 pods' share is still held


def test_a_finished_job_releases_what_its_pods_did_not_take():
    ps, _ = compile_policies([("j.policy", 'quota a { for namespace == "team-a"  gpus 8 }\n')])
    e, snap = Engine(ps), ClusterSnapshot.from_objects([])
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "train", "namespace": "team-a", "uid": "j1"},
           "spec": {"parallelism": 4, "completions": 4, "template": {"spec": {"restartPolicy": "Never", "containers": [
               {"name": "m", "resources": {"limits": {"nvidia.com/gpu": "2"}}}]}}}}
    assert e.decide(review(job), snap, 0.0).allowed
    assert snap.reservations.holds["wl:team-a/Job/train"][1][0][1] == 8000
    failed = {**job, "status": {"conditions": [{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}]}}
    snap.apply("ADDED", failed)
    assert "wl:team-a/Job/train" not in snap.reservations.holds
    assert e.state_for(snap).quota.used == [0]


def test_a_workload_older_than_allot_has_its_running_pods_counted_once_when_scaled():
    """Created before Allot started: 2 pods run (charged as live pods), no hold. A scale to 4 holds the 2 it adds, no more."""
    e = engine()
    snap = ClusterSnapshot.from_objects([dep(2), _running(0), _running(1)])
    d = e.decide(scale(4, 2), snap, 0.0)
    assert d.allowed, d.reasons
    assert held(snap) == 2000 and e.state_for(snap).quota.used == [4000]  # 2 running + 2 held: the quota, once
    stranger = member(9, owner="other-1234", hash_="1234")
    assert not e.decide(review(stranger), snap, 1.0, reserve=False).allowed
    for i in (2, 3):  # the two new pods take the held share; nothing is counted twice
        assert e.decide(review(member(i)), snap, 1.0).allowed
    assert held(snap) == 0 and e.state_for(snap).quota.used == [4000]
    assert not e.decide(scale(5, 4), snap, 2.0, reserve=False).allowed  # one more replica is over
