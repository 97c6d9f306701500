"""A gang workload's domain is held once it is admitted: a second gang cannot take it, its pods are pinned to it, and deleting, suspending or scaling it to zero lets go of it.

Rack r1 holds 16 free GPUs (the best fit for a 2 x 8 JobSet), rack r2 24. The gang block
selects workload objects only (`kind != "Pod"`), so a member pod is pinned because its
workload holds the domain, not because a block selected it.
"""

from __future__ import annotations

import copy
import dataclasses

import pytest

from tests.policy.blocks.gang.gangs_builders import H100, cluster, engine, node, rack_of

from policy.placement.reservations import RESERVATION_ANNOTATION

NODES = (node("n1", "r1"), node("n2", "r1"), node("n3", "r2"), node("n4", "r2"), node("n5", "r2"))
WORKLOAD_GANG = """
gang training {
  for kind != "Pod"
  require topology fabric.rack
  on unplaceable deny
}
"""
QUOTAS = """
quota train { for namespace == "train" gpus 64 }
quota poor { for namespace == "poor" gpus 8 }
"""
# A block that selects the pods too: a member must still join its workload's domain, not be planned alone.
POD_GANG = """
gang training {
  for namespace == "train"
  require topology fabric.rack
  on unplaceable deny
}
"""
KEY = "wl:train/JobSet/a"


def _gpu_spec(gpus: int) -> dict:
    return {"restartPolicy": "Never", "nodeSelector": {"nvidia.com/gpu.product": H100},
            "containers": [{"name": "t", "image": "trainer:1", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]}


def ref(api: str, kind: str, name: str, uid: str = "owner-uid") -> dict:
    return {"apiVersion": api, "kind": kind, "name": name, "uid": uid, "controller": True, "blockOwnerDeletion": True}


def jobset(name: str = "a", replicas: int = 2, gpus: int = 8, *, ns: str = "train", suspend: bool | None = None,
           uid: str = "js-uid-1", owner: dict | None = None, generation: int = 1) -> dict:
    """A JobSet of `replicas` one-pod Jobs of `gpus` H100s each."""
    meta = {"name": name, "namespace": ns, "uid": uid, "generation": generation}
    if owner is not None:
        meta["ownerReferences"] = [owner]
    spec: dict = {"replicatedJobs": [{"name": "workers", "replicas": replicas,
                                      "template": {"spec": {"parallelism": 1, "completions": 1, "template": {"spec": _gpu_spec(gpus)}}}}]}
    if suspend is not None:
        spec["suspend"] = suspend
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": meta, "spec": spec}


def trainjob(name: str = "t", nodes: int = 2, gpus: int = 8) -> dict:
    """A Kubeflow Trainer TrainJob of `nodes` nodes of `gpus` GPUs each."""
    return {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
            "metadata": {"name": name, "namespace": "train", "uid": "tj-uid-1"},
            "spec": {"runtimeRef": {"name": "torch-distributed"},
                     "trainer": {"numNodes": nodes, "resourcesPerNode": {"limits": {"nvidia.com/gpu": str(gpus)}}}}}


def js_pod(jobset_name: str = "a", i: int = 0, gpus: int = 8, ns: str = "train") -> dict:
    """A pod of a JobSet's Job, labelled and owned as the Job controller makes it."""
    job = f"{jobset_name}-workers-{i}"
    labels = {"jobset.sigs.k8s.io/jobset-name": jobset_name, "jobset.sigs.k8s.io/replicatedjob-name": "workers",
              "batch.kubernetes.io/job-name": job}
    spec = _gpu_spec(gpus) if gpus else {"restartPolicy": "Never", "containers": [{"name": "launcher", "image": "l:1"}]}
    return {"apiVersion": "v1", "kind": "Pod", "spec": spec,
            "metadata": {"name": f"{job}-0-x7k2p", "namespace": ns, "labels": labels, "ownerReferences": [ref("batch/v1", "Job", job)]}}


RESOURCES = {"Pod": ("", "v1", "pods"), "JobSet": ("jobset.x-k8s.io", "v1alpha2", "jobsets"),
             "TrainJob": ("trainer.kubeflow.org", "v1alpha1", "trainjobs"),
             "LeaderWorkerSet": ("leaderworkerset.x-k8s.io", "v1", "leaderworkersets")}


def review(obj: dict, operation: str = "CREATE", old: dict | None = None, dry_run: bool = False) -> dict:
    """An AdmissionReview v1 request for `obj` (DELETE: `obj` is the old object)."""
    group, version, resource = RESOURCES[obj["kind"]]
    m = obj["metadata"]
    gvk = {"group": group, "version": version, "kind": obj["kind"]}
    return {"uid": f"uid-{m['name']}-{operation}", "kind": gvk, "requestKind": gvk,
            "resource": {"group": group, "version": version, "resource": resource},
            "name": m["name"], "namespace": m["namespace"], "operation": operation,
            "userInfo": {"username": "alice", "groups": ["dev"]},
            "object": None if operation == "DELETE" else obj, "oldObject": obj if operation == "DELETE" else old, "dryRun": dry_run}


def admit(eng, snap, obj, now: float = 0.0, operation: str = "CREATE", old: dict | None = None):
    """Send a request as the API server does: /mutate, then /validate (where a workload holds)."""
    req = review(obj, operation, old)
    first = eng.decide(req, snap, now, mutate=True)
    return eng.decide(req, snap, now) if first.allowed else first


ADMIT_A = ("admit", lambda: jobset())


def in_rack(js: dict, rack: str) -> dict:
    """`js` with its template selecting nodes of `rack` (its pods could run nowhere else)."""
    for rj in js["spec"]["replicatedJobs"]:
        rj["template"]["spec"]["template"]["spec"]["nodeSelector"]["topology.acme.io/rack"] = rack
    return js


@dataclasses.dataclass(frozen=True)
class Case:
    name: str
    before: tuple = ()  # ("admit", builder[, operation, old builder])
    request: object = None  # builder of the decided request's object
    operation: str = "CREATE"
    old: object = None
    mutate: bool = False
    dry_run: bool = False
    reserve: bool = True
    policy: str = WORKLOAD_GANG
    want_allowed: bool = True
    want_codes: tuple = ()
    want_held: dict = dataclasses.field(default_factory=dict)  # reservation id -> held slots, after the request
    want_rack: str | None = None  # the rack the request's patch pins it to (None: no affinity patch)
    want_annotation: str | None = None  # the `allot.dev/reservation` the patch sets
    want_placed: str | None = None  # Decision.placement's rack
    want_second: str | None = "r1"  # where a second 2 x 8 JobSet goes afterwards (None: denied, no rack)


CASES = [
    Case("an admitted JobSet holds its rack: the next gang goes to the other one", request=lambda: jobset(),
         want_held={KEY: 2}, want_placed="r1", want_second="r2"),
    Case("the mutating side holds nothing (the validating side holds, after every mutation)", request=lambda: jobset(), mutate=True,
         want_placed="r1"),
    Case("dryRun holds nothing", request=lambda: jobset(), dry_run=True, want_placed="r1"),
    Case("offline (reserve=False) holds nothing", request=lambda: jobset(), reserve=False, want_placed="r1"),
    Case("denied by quota holds nothing", request=lambda: jobset(ns="poor"), want_allowed=False, want_codes=("QuotaExceeded",),
         want_placed="r1"),
    Case("a suspended JobSet (queued by Kueue) holds nothing", request=lambda: jobset(suspend=True)),
    Case("its resume (suspend: false, Kueue's admission) holds the rack", request=lambda: jobset(suspend=False),
         operation="UPDATE", old=lambda: jobset(suspend=True), want_held={KEY: 2}, want_placed="r1", want_second="r2"),
    Case("two held JobSets and an 8-GPU one fill both racks: the next is denied", before=(ADMIT_A, ("admit", lambda: jobset("b", uid="js-uid-b"))),
         request=lambda: jobset("c", 1, uid="js-uid-c"), want_held={KEY: 2, "wl:train/JobSet/b": 2, "wl:train/JobSet/c": 1},
         want_placed="r2", want_second=None),
    Case("a JobSet whose template selects rack r2 is held in r2, not in the best-fitting r1", request=lambda: in_rack(jobset(), "r2"),
         want_held={KEY: 2}, want_placed="r2", want_second="r1"),
    Case("...and one too big for what r2 has left is denied, though r1 is free", before=(("admit", lambda: in_rack(jobset(), "r2")),),
         request=lambda: in_rack(jobset("b", uid="js-uid-b"), "r2"), want_allowed=False, want_codes=("GangUnplaceable",),
         want_held={KEY: 2}, want_second="r1"),
    Case("a pod of the held JobSet is pinned to its rack on the mutating side, and named its reservation", before=(ADMIT_A,),
         request=lambda: js_pod(), mutate=True, want_held={KEY: 2}, want_rack="r1", want_annotation=KEY, want_placed="r1",
         want_second="r2"),
    Case("...on the validating side it joins the domain, unpatched", before=(ADMIT_A,), request=lambda: js_pod(),
         want_held={KEY: 2}, want_placed="r1", want_second="r2"),
    Case("...and also when a gang block selects the pod itself: it joins its JobSet's rack, not a rack of its own",
         before=(ADMIT_A,), request=lambda: js_pod(), mutate=True, policy=POD_GANG, want_held={KEY: 2}, want_rack="r1",
         want_annotation=KEY, want_placed="r1", want_second="r2"),
    Case("a CPU-only launcher pod of the held JobSet is no gang member: not pinned", before=(ADMIT_A,),
         request=lambda: js_pod(gpus=0), mutate=True, want_held={KEY: 2}, want_second="r2"),
    Case("a pod of a JobSet that holds nothing is not pinned", before=(ADMIT_A,), request=lambda: js_pod("other"), mutate=True,
         want_held={KEY: 2}, want_second="r2"),
    Case("the JobSet's DELETE lets go of its rack", before=(ADMIT_A,), request=lambda: jobset(), operation="DELETE",
         want_second="r1"),
    Case("a DELETE of an older JobSet of that name (another uid) keeps the new one's rack", before=(ADMIT_A,),
         request=lambda: jobset(uid="js-uid-0"), operation="DELETE", want_held={KEY: 2}, want_second="r2"),
    Case("suspending it (Kueue preempting) lets go of its rack", before=(ADMIT_A,), request=lambda: jobset(suspend=True),
         operation="UPDATE", old=lambda: jobset(), want_second="r1"),
    Case("a TrainJob holds its rack; the JobSet its controller makes joins it and holds none of its own",
         before=(("admit", lambda: trainjob()),), request=lambda: jobset("t", uid="js-t", owner=ref("trainer.kubeflow.org/v1alpha1", "TrainJob", "t", "tj-uid-1")),
         want_held={"wl:train/TrainJob/t": 2}, want_placed="r1", want_second="r2"),
    Case("...and a pod of that JobSet (its JobSet label names the TrainJob) is pinned to the TrainJob's rack",
         before=(("admit", lambda: trainjob()),), request=lambda: js_pod("t"), mutate=True,
         want_held={"wl:train/TrainJob/t": 2}, want_rack="r1", want_annotation="wl:train/TrainJob/t", want_placed="r1", want_second="r2"),
]


def _held(eng, snap) -> dict:
    return {rid: len(r.slots) for rid, r in eng.state_for(snap).planner().index.reservations.by_id.items()}


def _annotation(patch) -> str | None:
    for op in patch:
        if op["path"].endswith(RESERVATION_ANNOTATION.replace("/", "~1")):
            return op["value"]
        value = op.get("value")
        if isinstance(value, dict):
            found = value.get(RESERVATION_ANNOTATION) or (value.get("annotations") or {}).get(RESERVATION_ANNOTATION)
            if found:
                return found
    return None


def _run_before(eng, snap, steps) -> None:
    for i, step in enumerate(steps):
        _, build, *rest = step
        operation = rest[0] if rest else "CREATE"
        old = rest[1]() if len(rest) > 1 else None
        d = admit(eng, snap, build(), float(i), operation, old)
        assert d.allowed, (i, d.reasons)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_gang_workload_domains(case: Case):
    eng, snap = engine(case.policy + QUOTAS), cluster(*NODES)
    _run_before(eng, snap, case.before)
    old = case.old() if case.old is not None else None
    req = review(case.request(), case.operation, old, case.dry_run)
    d = eng.decide(req, snap, 10.0, mutate=case.mutate, reserve=case.reserve)
    assert d.allowed is case.want_allowed, d.reasons
    assert tuple(sorted(r.code for r in d.reasons if r.mode == "enforce")) == case.want_codes
    assert _held(eng, snap) == case.want_held
    assert rack_of(d.patch) == ([case.want_rack] if case.want_rack else None)
    assert _annotation(d.patch) == case.want_annotation
    assert (d.placement.value if d.placement is not None else None) == case.want_placed
    second = admit(eng, snap, jobset("second", uid="js-uid-2"), 20.0)
    if case.want_second is None:
        assert not second.allowed and [r.code for r in second.reasons if r.mode == "enforce"] == ["GangUnplaceable"]
    else:
        assert second.allowed and second.placement.value == case.want_second, second.reasons


def test_a_member_pod_pushes_the_domains_expiry_on_and_a_stalled_one_expires():
    eng, snap = engine(WORKLOAD_GANG + QUOTAS), cluster(*NODES)
    assert admit(eng, snap, jobset(), 0.0).allowed
    planner = eng.state_for(snap).planner()
    resv = planner.index.reservations.by_id[KEY]
    assert resv.expires_at == planner.ttl
    assert admit(eng, snap, js_pod(), 100.0).allowed
    assert resv.expires_at == 100.0 + planner.ttl  # a pod arrived: the workload is alive
    assert planner.recall(KEY, 100.0 + planner.ttl + 1) is None and KEY not in planner.workloads  # then it stalled
    assert _held(eng, snap) == {}
    late = eng.decide(review(js_pod(i=1)), snap, 500.0, mutate=True)
    assert late.allowed and rack_of(late.patch) is None  # nothing to join any more


def _watched(obj, generation, **spec):
    out = copy.deepcopy(obj)
    out["metadata"]["generation"] = generation
    out["spec"].update(spec)
    return out


@pytest.mark.parametrize("listed, event, build, want_released", [
    (jobset, "DELETED", jobset, True),
    # the watch still showed an older object of that name: its late DELETED is not this domain's
    (lambda: jobset(uid="js-uid-0"), "DELETED", lambda: jobset(uid="js-uid-0"), False),
    (jobset, "DELETED", lambda: jobset("b"), False),  # another JobSet
    (jobset, "MODIFIED", lambda: _watched(jobset(), 2, suspend=True), True),  # suspended by Kueue, a webhook that failed open
    (jobset, "MODIFIED", lambda: {**jobset(), "status": {"conditions": [{"type": "Completed", "status": "True"}]}}, True),  # finished
    (jobset, "MODIFIED", lambda: {**jobset(), "metadata": {**jobset()["metadata"], "deletionTimestamp": "2026-12-01T10:00:00Z"}}, True),
    (jobset, "MODIFIED", lambda: {**jobset(), "status": {"replicatedJobsStatus": [{"name": "workers", "active": 2}]}}, False),  # status only
    (jobset, "MODIFIED", lambda: _watched(jobset(), 2, replicatedJobs=[]), True),  # nothing left to run
])
def test_the_watch_releases_a_domain_the_webhook_never_saw_go(listed, event, build, want_released):
    eng, snap = engine(WORKLOAD_GANG + QUOTAS), cluster(*NODES)
    assert admit(eng, snap, jobset(), 0.0).allowed
    snap.apply("ADDED", listed())
    snap.apply("ADDED", jobset("b", 1, uid="js-uid-b"))  # listed, holding nothing
    snap.apply(event, build())
    assert (KEY not in _held(eng, snap)) is want_released
    second = admit(eng, snap, jobset("second", uid="js-uid-2"), 1.0)
    assert second.placement.value == ("r1" if want_released else "r2")


def test_a_ledger_copy_of_a_domain_released_here_is_not_held_again():
    eng, snap = engine(WORKLOAD_GANG + QUOTAS), cluster(*NODES)
    assert admit(eng, snap, jobset(), 0.0).allowed
    planner = eng.state_for(snap).planner()
    resv = copy.deepcopy(planner.index.reservations.by_id[KEY])
    result = planner.recall(KEY, 0.0)
    assert admit(eng, snap, jobset(), 1.0, "DELETE").allowed
    assert not planner.mirror(resv, result, 2.0)  # the shard still carries it until it expires
    assert _held(eng, snap) == {}
    assert admit(eng, snap, jobset(uid="js-uid-new"), 3.0).allowed  # a new JobSet of that name holds again
    assert _held(eng, snap) == {KEY: 2}


def test_a_reload_keeps_the_domain_and_its_pods_still_join_it():
    old, snap = engine(WORKLOAD_GANG + QUOTAS), cluster(*NODES)
    assert admit(old, snap, jobset(), 0.0).allowed
    new = engine(WORKLOAD_GANG + QUOTAS)
    assert KEY in new.adopt(old, snap, 1.0)
    d = new.decide(review(js_pod()), snap, 2.0, mutate=True)
    assert rack_of(d.patch) == ["r1"] and _annotation(d.patch) == KEY
    assert admit(new, snap, jobset(uid="js-uid-0"), 3.0, "DELETE").allowed  # another object's DELETE: kept
    assert KEY in new.state_for(snap).planner().workloads
    assert admit(new, snap, jobset(), 4.0, "DELETE").allowed
    assert _held(new, snap) == {}


def lws(name: str = "l", replicas: int = 2, gpus: int = 8) -> dict:
    """A LeaderWorkerSet of `replicas` groups of a leader and a worker, `gpus` H100s each."""
    tpl = {"spec": _gpu_spec(gpus) | {"restartPolicy": "Always"}}
    return {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
            "metadata": {"name": name, "namespace": "train", "uid": "lws-uid-1"},
            "spec": {"replicas": replicas, "leaderWorkerTemplate": {"size": 2, "leaderTemplate": tpl, "workerTemplate": tpl}}}


@pytest.mark.parametrize("replicas, want_held", [(1, {"wl:train/LeaderWorkerSet/l": 2}), (3, {})])
def test_a_leaderworkerset_of_several_groups_holds_no_one_domain_for_them_all(replicas, want_held):
    eng, snap = engine(WORKLOAD_GANG + QUOTAS), cluster(*NODES)
    d = admit(eng, snap, lws(replicas=replicas), 0.0)
    assert d.allowed and d.placement is not None, d.reasons  # each group (16 GPUs) fits a rack
    assert _held(eng, snap) == want_held
