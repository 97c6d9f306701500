"""Workload objects decided at submission: quota for the whole workload, fraction per template, gang and topology, priority into templates, agents."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from lang import compile_policies
from policy.admission import wrap_manifest
from policy.cluster.snapshot import ClusterSnapshot
from policy.engine import Engine

REPO = Path(__file__).resolve().parents[3]
OBJECTS = {o["kind"]: o for f in sorted((REPO / "tests/fixtures/workloads").glob("*.yaml")) for o in yaml.safe_load_all(f.read_text()) if o}
CLUSTER = ClusterSnapshot.from_text((REPO / "policies/fixtures/cluster.yaml").read_text())

POLICY = '''
gpu h100 { product "NVIDIA-H100-80GB-HBM3" memory 80Gi }
topology fabric {
  block "topology.acme.io/block"
  rack  "topology.acme.io/rack"
  host  "kubernetes.io/hostname"
}
priority batch 100 default
priority training 200
quota team-a { for namespace == "team-a"  gpus 40 }  # the fixture cluster runs 16 in team-a
quota serving { for namespace == "serving"  gpus 2 }
fraction serving-slices { for namespace == "serving"  min 0.25  max 0.5 }
gang training { for namespace == "team-a" and kind != "Pod"  require topology fabric.rack  on unplaceable deny }
agents builders {
  identity user matches "system:serviceaccount:ci:*"
  allow create jobs when namespace == "team-a"
  deny when privileged "agents run unprivileged"
}
'''


@pytest.fixture(scope="module")
def engine():
    ps, diags = compile_policies([("w.policy", POLICY)])
    assert not [d for d in diags if d.severity == "error"], diags
    return Engine(ps)


def decide(engine, obj, *, user="alice", operation="CREATE", old=None, mutate=False, namespace=None):
    obj = copy.deepcopy(obj)
    if namespace:
        obj["metadata"]["namespace"] = namespace
    req = wrap_manifest(obj, user=user, groups=["dev"], operation=operation)["request"]
    if old is not None:
        req["oldObject"] = old
    return engine.decide(req, CLUSTER, 1000.0, mutate=mutate, reserve=False)


def codes(d):
    return sorted(r.code for r in d.reasons if r.mode == "enforce")


def test_quota_counts_the_whole_workload_and_says_the_arithmetic(engine):
    js = copy.deepcopy(OBJECTS["JobSet"])
    js["spec"]["suspend"] = False  # 16 in use + 4 workers x 8 GPUs = 48 > 40
    d = decide(engine, js)
    assert not d.allowed and "QuotaExceeded" in codes(d)
    msg = next(r.message for r in d.reasons if r.code == "QuotaExceeded")
    assert "32 requested" in msg and "4 workers pods x 8 GPU" in msg, msg


def test_a_suspended_workload_gets_no_quota_or_placement(engine):
    d = decide(engine, OBJECTS["JobSet"])  # suspend: true, as Kueue queues it
    assert d.allowed and "QuotaExceeded" not in codes(d) and d.placement is None


def test_resume_is_judged_whole(engine):
    old = OBJECTS["JobSet"]
    new = copy.deepcopy(old)
    new["spec"]["suspend"] = False
    d = decide(engine, new, operation="UPDATE", old=old)
    assert not d.allowed and "QuotaExceeded" in codes(d)


def test_a_gang_workload_is_placed_in_one_rack(engine):
    lws = copy.deepcopy(OBJECTS["LeaderWorkerSet"])
    lws["metadata"]["namespace"] = "team-a"
    lws["spec"]["replicas"] = 1  # 1 leader + 1 worker x 8 GPUs = 16, 16 + 16 <= 40, and rack r3 holds 16 free H100s
    for t in ("leaderTemplate", "workerTemplate"):
        lws["spec"]["leaderWorkerTemplate"][t]["spec"]["nodeSelector"] = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    d = decide(engine, lws)
    assert d.allowed, d.reasons
    # one rack holds both pods; nothing is held (the pods are not linked back to the workload yet)
    assert d.placement.level == "rack" and sum(d.placement.nodes.values()) == 2 and d.placement.reservation is None


def test_a_gang_workload_too_big_for_any_rack_is_denied(engine):
    lws = copy.deepcopy(OBJECTS["LeaderWorkerSet"])
    lws["metadata"]["namespace"] = "team-a"
    lws["spec"]["leaderWorkerTemplate"]["size"] = 3  # 2 replicas x 3 x 8 = 48 GPUs: over quota and over any rack
    d = decide(engine, lws)
    assert {"GangUnplaceable", "QuotaExceeded"} <= set(codes(d))


def test_a_deployment_is_no_gang(engine):
    d = decide(engine, OBJECTS["ReplicaSet"], namespace="team-a")
    assert d.allowed and d.placement is None and "gang training" not in d.blocks


def test_fraction_bounds_name_the_pod_set(engine):
    dep = copy.deepcopy(OBJECTS["Deployment"])
    dep["spec"]["template"]["metadata"]["annotations"]["gpu-fraction"] = "0.75"
    dep["spec"]["replicas"] = 1
    d = decide(engine, dep)
    msg = next(r.message for r in d.reasons if r.code == "FractionOutOfRange")
    assert "pod set replicas of Deployment embed (1 pods)" in msg and "> max 0.5" in msg


def test_fractional_replicas_under_quota(engine):
    d = decide(engine, OBJECTS["Deployment"])  # 3 x 0.25 = 0.75 <= 2
    assert d.allowed, d.reasons
    dep = copy.deepcopy(OBJECTS["Deployment"])
    dep["spec"]["replicas"] = 9  # 9 x 0.25 = 2.25 > 2
    assert codes(decide(engine, dep)) == ["QuotaExceeded"]


def test_scale_up_is_charged_the_added_replicas_only(engine):
    old = copy.deepcopy(OBJECTS["Deployment"])
    old["spec"]["replicas"] = 8
    new = copy.deepcopy(old)
    new["spec"]["replicas"] = 9  # adds 0.25 only: nothing of the old 8 is running in this snapshot, so it fits
    d = decide(engine, new, operation="UPDATE", old=old)
    assert d.allowed, d.reasons
    new["spec"]["replicas"] = 17  # adds 9 x 0.25 = 2.25 > 2
    assert codes(decide(engine, new, operation="UPDATE", old=old)) == ["QuotaExceeded"]


def test_priority_default_is_patched_into_every_template(engine):
    js = copy.deepcopy(OBJECTS["JobSet"])
    for rj in js["spec"]["replicatedJobs"]:
        rj["template"]["spec"]["template"]["spec"].pop("priorityClassName", None)
    d = decide(engine, js, mutate=True)
    paths = sorted(op["path"] for op in d.patch)
    assert paths == [f"/spec/replicatedJobs/{i}/template/spec/template/spec/priorityClassName" for i in (0, 1)]
    assert all(op["value"] == "batch" for op in d.patch)


AGENT = "system:serviceaccount:ci:builder"


def test_an_agent_may_create_an_unprivileged_job(engine):
    assert decide(engine, OBJECTS["Job"], user=AGENT).allowed


def test_an_agent_creating_a_privileged_job_is_judged_on_its_template(engine):
    job = copy.deepcopy(OBJECTS["Job"])
    job["spec"]["template"]["spec"]["containers"][0]["securityContext"] = {"privileged": True}
    assert codes(decide(engine, job, user=AGENT)) == ["AgentDenied"]


def test_an_agent_may_not_create_a_deployment(engine):
    assert codes(decide(engine, OBJECTS["ReplicaSet"], user=AGENT, namespace="team-a")) == ["AgentNotAllowed"]


def scale(replicas, name="embed", namespace="serving"):
    return {
        "uid": "u-scale", "kind": {"group": "autoscaling", "version": "v1", "kind": "Scale"},
        "resource": {"group": "apps", "version": "v1", "resource": "deployments"}, "subResource": "scale",
        "name": name, "namespace": namespace, "operation": "UPDATE",
        "userInfo": {"username": "alice", "groups": ["dev"]},
        "object": {"apiVersion": "autoscaling/v1", "kind": "Scale", "metadata": {"name": name, "namespace": namespace},
                   "spec": {"replicas": replicas}},
        "oldObject": {"apiVersion": "autoscaling/v1", "kind": "Scale", "metadata": {"name": name, "namespace": namespace},
                      "spec": {"replicas": 3}},
    }


def test_scale_subresource_is_judged_on_the_live_deployment(engine):
    snap = ClusterSnapshot.from_objects([OBJECTS["Deployment"]])  # 3 x 0.25 live
    assert engine.decide(scale(8), snap, 0.0, reserve=False).allowed  # adds 5 x 0.25 = 1.25 <= 2
    d = engine.decide(scale(12), snap, 0.0, reserve=False)  # adds 9 x 0.25 = 2.25 > 2
    assert codes(d) == ["QuotaExceeded"] and "added by this update of Deployment embed" in d.reasons[0].message


def test_scale_of_a_workload_not_in_the_cluster_state_warns(engine):
    d = engine.decide(scale(12, name="ghost"), CLUSTER, 0.0, reserve=False)
    assert d.allowed and [r.code for r in d.reasons] == ["WorkloadNotInClusterState"] and d.reasons[0].mode == "warn"


def test_gpu_memory_of_a_workload_sums_its_sets_not_its_cpu_pods(engine):
    from policy.subject.normalize import normalize

    js = copy.deepcopy(OBJECTS["JobSet"])  # a CPU driver + 4 workers x 8 H100 (80Gi each)
    w = engine.enrich(normalize(wrap_manifest(js, user="a", groups=[], operation="CREATE")["request"], CLUSTER))
    want = 4 * 8 * 80 * 2**30
    assert want <= w.gpu_memory * w.pods < want + w.pods  # rounded up per pod, never under


# ---- charge once ---------------------------------------------------------------------------

ONCE = '''
gpu h100 { product "NVIDIA-H100-80GB-HBM3" memory 80Gi }
quota serving { for namespace == "serving"  gpus 4  gpus 4 of h100  gpu_memory 320Gi }
'''


def once_engine():
    ps, diags = compile_policies([("once.policy", ONCE)])
    assert not [d for d in diags if d.severity == "error"], diags
    return Engine(ps)


def deployment(replicas):
    d = copy.deepcopy(OBJECTS["ReplicaSet"])  # 1 H100 per replica
    d["kind"], d["metadata"]["name"] = "Deployment", "rerank"
    d["spec"]["replicas"] = replicas
    d["spec"]["template"]["spec"]["nodeSelector"] = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    return d


def member(i, owner_kind="ReplicaSet", owner="rerank-7c9f8", hash_="7c9f8", labels=None):
    tpl = deployment(1)["spec"]["template"]
    meta = {"name": f"rerank-{hash_}-{i}", "namespace": "serving", "labels": {**tpl["metadata"]["labels"], "pod-template-hash": hash_, **(labels or {})},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": owner_kind, "name": owner, "uid": "u", "controller": True}]}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": copy.deepcopy(tpl["spec"])}


def admit(engine, snap, obj, now=0.0):
    req = wrap_manifest(obj, user="alice", groups=["dev"], operation="CREATE")["request"]
    return engine.decide(req, snap, now)  # validating side, reserving


def test_an_admitted_deployment_holds_its_gpus_and_its_pods_take_them_once():
    engine, snap = once_engine(), ClusterSnapshot.from_objects([])
    assert admit(engine, snap, deployment(4)).allowed  # 4 x 1 H100 = the whole quota, held
    holds = snap.reservations.totals()
    assert holds == {"quota serving": (4000, 4 * 80 * 2**30, {"h100": 4000})}
    for i in range(4):  # each pod of it takes its share from the hold: not counted twice
        d = admit(engine, snap, member(i))
        assert d.allowed, d.reasons
    assert sum(m for m, _, _ in snap.reservations.totals().values()) == 4000  # moved to the pods' own holds
    assert "wl:serving/Deployment/rerank" not in snap.reservations.holds
    # the quota is full: a fifth pod of it, or anyone else's, is charged in full
    assert codes(admit(engine, snap, member(4))) == ["QuotaExceeded", "QuotaMemoryExceeded", "QuotaModelExceeded"]


def test_another_workloads_pod_does_not_take_from_the_hold():
    engine, snap = once_engine(), ClusterSnapshot.from_objects([])
    assert admit(engine, snap, deployment(4)).allowed
    stranger = member(0, owner="other-1234", hash_="1234")
    assert "QuotaExceeded" in codes(admit(engine, snap, stranger))


def test_a_controllers_child_workload_is_not_charged_again():
    engine, snap = once_engine(), ClusterSnapshot.from_objects([])
    assert admit(engine, snap, deployment(4)).allowed
    rs = deployment(4)
    rs["kind"], rs["metadata"]["name"] = "ReplicaSet", "rerank-7c9f8"
    rs["metadata"]["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "rerank", "uid": "u", "controller": True}]
    d = admit(engine, snap, rs)
    assert d.allowed, d.reasons
    assert sum(m for m, _, _ in snap.reservations.totals().values()) == 4000  # still only the Deployment's hold


def test_a_jobset_pod_finds_its_hold_by_the_controller_label():
    ps, _ = compile_policies([("j.policy", 'quota a { for namespace == "team-a"  gpus 16 }\n')])
    engine, snap = Engine(ps), ClusterSnapshot.from_objects([])
    js = copy.deepcopy(OBJECTS["JobSet"])
    js["spec"]["suspend"] = False
    js["spec"]["replicatedJobs"][1]["replicas"] = 1  # 2 workers x 8 = 16: the whole quota
    assert admit(engine, snap, js).allowed
    tpl = js["spec"]["replicatedJobs"][1]["template"]["spec"]["template"]
    pod = {"apiVersion": "v1", "kind": "Pod", "spec": copy.deepcopy(tpl["spec"]),
           "metadata": {"name": "llama-pretrain-workers-0-0", "namespace": "team-a", "labels": {"jobset.sigs.k8s.io/jobset-name": "llama-pretrain"}}}
    d = admit(engine, snap, pod)
    assert d.allowed, d.reasons


def test_the_hold_expires_when_the_pods_never_come():
    engine, snap = once_engine(), ClusterSnapshot.from_objects([])
    assert admit(engine, snap, deployment(4), now=0.0).allowed
    late = member(0, owner="other-1234", hash_="1234")
    assert not admit(engine, snap, late, now=10.0).allowed
    assert admit(engine, snap, late, now=10_000.0).allowed  # the Deployment's hold expired


def test_a_suspended_or_dry_run_workload_holds_nothing():
    engine, snap = once_engine(), ClusterSnapshot.from_objects([])
    d = deployment(4)
    req = wrap_manifest(d, user="alice", groups=["dev"], operation="CREATE")["request"]
    req["dryRun"] = True
    assert engine.decide(req, snap, 0.0).allowed and snap.reservations.holds == {}


def test_a_generated_name_does_not_change_the_gang_decision(engine):
    named = copy.deepcopy(OBJECTS["JobSet"])
    named["spec"]["suspend"] = False  # 4 workers x 8 GPUs: no rack holds 32 free GPUs
    generated = copy.deepcopy(named)
    del generated["metadata"]["name"]
    generated["metadata"]["generateName"] = "llama-pretrain-"
    want = decide(engine, named, namespace="team-a")
    got = decide(engine, generated, namespace="team-a")
    assert "GangUnplaceable" in codes(want)
    assert codes(got) == codes(want)
