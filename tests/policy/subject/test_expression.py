"""The workload-expression fields (controller, gpu_pods, gang_scheduler, gpu_memory_requested, memory_share, gpu_limit_mismatches).

Over real object shapes, for Pods in every GPU dialect, workload objects (the fixtures of
tests/fixtures/workloads, as `kubectl get -o yaml` prints them) and group objects.
"""

import copy
from dataclasses import dataclass

import pytest

from policy.subject.expression import express, reads_expression
from policy.subject.normalize import normalize as _normalize
from tests.policy.builders import claim, container, device_request, meta, node, pod, podgroup, request, snapshot
from tests.policy.subject.test_workloads import OBJECTS

MI, GI = 2**20, 2**30
H100_MIB = 81559  # the builders' node: nvidia.com/gpu.memory


def normalize(req, snap):
    """Normalization as the engine does it for a set that reads the expression fields."""
    return express(_normalize(req, snap))


def cluster(*objs):
    return snapshot(node("h1"), podgroup("pg", minMember=2), *objs)


@dataclass
class Case:
    name: str
    obj: dict
    want_controller: str | None = None
    want_gpu_pods: int = 0
    want_scheduler: str | None = None
    want_requested: int | None = None
    want_memory_share: bool = False
    want_mismatches: int = 0
    objects: tuple = ()


def affinity(*exprs, terms=None):
    terms = terms if terms is not None else [{"matchExpressions": list(exprs)}]
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}}


def mem_expr(op, *values):
    return {"key": "nvidia.com/gpu.memory", "operator": op, "values": list(values)}


def owned(kind, name, labels=None, **kw):
    p = pod("w-0", labels=labels, **kw)
    p["metadata"]["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": kind, "name": name, "uid": "u1",
                                         "controller": True, "blockOwnerDeletion": True}]
    return p


def hami(**res):
    return pod(containers=[container(limits=res)])


POD_CASES = [
    Case("a CPU pod", pod()),
    Case("one whole GPU, nothing stated", pod(gpus="1"), want_gpu_pods=1),
    Case("nodeSelector on the GFD memory label: an exact size × devices", pod(gpus="2", nodeSelector={"nvidia.com/gpu.memory": "81559"}),
         want_gpu_pods=1, want_requested=2 * H100_MIB * MI),
    Case("affinity Gt: more than N MiB", pod(gpus="1", affinity=affinity(mem_expr("Gt", "40000"))), want_gpu_pods=1, want_requested=40001 * MI),
    Case("affinity In: the smallest size", pod(gpus="1", affinity=affinity(mem_expr("In", "81559", "46068"))), want_gpu_pods=1, want_requested=46068 * MI),
    Case("affinity: a term without a floor is an alternative without one", pod(gpus="1", affinity=affinity(terms=[
        {"matchExpressions": [mem_expr("Gt", "40000")]},
        {"matchExpressions": [{"key": "nvidia.com/gpu.product", "operator": "In", "values": ["NVIDIA-L4"]}]}])), want_gpu_pods=1),
    Case("affinity Lt is a ceiling, not a floor", pod(gpus="1", affinity=affinity(mem_expr("Lt", "40000"))), want_gpu_pods=1),
    Case("HAMi gpumem: memory requested, a memory share", hami(**{"nvidia.com/gpu": "1", "nvidia.com/gpumem": "20000"}),
         want_gpu_pods=1, want_requested=20000 * MI, want_memory_share=True),
    Case("HAMi gpucores alone: a compute-only share", hami(**{"nvidia.com/gpu": "1", "nvidia.com/gpucores": "30"}), want_gpu_pods=1),
    Case("HAMi gpucores + gpumem-percentage: a memory share, no amount", hami(**{"nvidia.com/gpu": "1", "nvidia.com/gpucores": "30",
         "nvidia.com/gpumem-percentage": "25"}), want_gpu_pods=1, want_memory_share=True),
    Case("KAI gpu-fraction: a share of the device's memory", pod(annotations={"gpu-fraction": "0.5"}), want_gpu_pods=1, want_memory_share=True),
    Case("KAI gpu-memory: memory requested", pod(annotations={"gpu-memory": "8000"}), want_gpu_pods=1, want_requested=8000 * MI,
         want_memory_share=True),
    Case("MIG profile: its memory is stated", pod(containers=[container(limits={"nvidia.com/mig-1g.10gb": "1"})]),
         want_gpu_pods=1, want_requested=10 * GI, want_memory_share=True),
    Case("DRA capacity memory", pod(resourceClaims=[{"name": "gpu", "resourceClaimName": "c"}]), want_gpu_pods=1,
         want_requested=20389 * MI, want_memory_share=True, objects=(claim("c", requests=[device_request(memory="20389Mi")]),)),
    Case("DRA whole device", pod(resourceClaims=[{"name": "gpu", "resourceClaimName": "c"}]), want_gpu_pods=1,
         objects=(claim("c", requests=[device_request()]),)),
    Case("GPU request without a limit", pod(containers=[container(requests={"nvidia.com/gpu": "1"})]), want_gpu_pods=1, want_mismatches=1),
    Case("GPU limit 2, request 1", pod(containers=[container(limits={"nvidia.com/gpu": "2"}, requests={"nvidia.com/gpu": "1"})]),
         want_gpu_pods=1, want_mismatches=1),
    Case("equal request and limit ('1' and 1)", pod(containers=[container(limits={"nvidia.com/gpu": 1}, requests={"nvidia.com/gpu": "1"})]),
         want_gpu_pods=1),
    Case("HAMi gpumem request differs from its limit, an init container too", pod(
        containers=[container(limits={"nvidia.com/gpu": "1", "nvidia.com/gpumem": "8000"}, requests={"nvidia.com/gpu": "1", "nvidia.com/gpumem": "4000"})],
        init_containers=[container("init", requests={"nvidia.com/gpu": "1"})]),
        want_gpu_pods=1, want_requested=4000 * MI, want_memory_share=True, want_mismatches=2),  # the request is the demand read
    Case("CPU request without limit is not a GPU mismatch", pod(containers=[container(requests={"cpu": "1"})])),
    Case("a Deployment's pod (ReplicaSet deployment-hash)", owned("ReplicaSet", "vllm-5d8f", labels={"pod-template-hash": "5d8f"}, gpus="1"),
         want_controller="Deployment", want_gpu_pods=1),
    Case("a bare ReplicaSet's pod", owned("ReplicaSet", "rs", gpus="1"), want_controller="ReplicaSet", want_gpu_pods=1),
    Case("a JobSet's pod: the JobSet label wins over its Job owner", owned("Job", "ls-workers-0", labels={"jobset.sigs.k8s.io/jobset-name": "ls"},
         gpus="8"), want_controller="JobSet", want_gpu_pods=1),
    Case("a PyTorchJob's pod", pod(labels={"training.kubeflow.org/job-name": "ddp", "training.kubeflow.org/operator-name": "pytorchjob-controller"},
         gpus="1"), want_controller="PyTorchJob", want_gpu_pods=1),
    Case("an MPIJob's pod is not a PyTorchJob's", owned("MPIJob", "m", labels={"training.kubeflow.org/job-name": "m",
         "training.kubeflow.org/operator-name": "mpijob-controller"}, gpus="1"), want_controller="MPIJob", want_gpu_pods=1),
    Case("coscheduling member", pod(labels={"scheduling.x-k8s.io/pod-group": "pg"}, gpus="1"), want_gpu_pods=1, want_scheduler="coscheduling"),
    Case("Kueue plain pod group", pod(labels={"kueue.x-k8s.io/pod-group-name": "g"}, annotations={"kueue.x-k8s.io/pod-group-total-count": "2"},
         gpus="1"), want_gpu_pods=1, want_scheduler="kueue"),
    Case("Kueue queue alone admits one pod: no gang", pod(labels={"kueue.x-k8s.io/queue-name": "q"}, gpus="1"), want_gpu_pods=1),
    Case("upstream schedulingGroup", pod(gpus="1", schedulingGroup={"podGroupName": "pg"}), want_gpu_pods=1, want_scheduler="upstream"),
]


@pytest.mark.parametrize("c", POD_CASES, ids=lambda c: c.name)
def test_pod_expression_fields(c):
    w = normalize(request(c.obj), cluster(*c.objects))
    got = (w.controller, w.gpu_pods, w.gang_scheduler, w.gpu_memory_requested, w.memory_share, w.gpu_limit_mismatches)
    assert got == (c.want_controller, c.want_gpu_pods, c.want_scheduler, c.want_requested, c.want_memory_share, c.want_mismatches)


def edit(kind, fn):
    obj = copy.deepcopy(OBJECTS[kind])
    fn(obj)
    return obj


def _label(obj, key, value):
    obj["metadata"].setdefault("labels", {})[key] = value


def _jobset_template(obj):
    return obj["spec"]["replicatedJobs"][1]["template"]["spec"]["template"]


def _deploy_spec(obj):
    return obj["spec"]["template"]["spec"]


WORKLOAD_CASES = [
    Case("Job of 4 GPU pods, no queue", OBJECTS["Job"], "Job", 4),
    Case("Job with a Kueue queue: admitted whole", edit("Job", lambda o: _label(o, "kueue.x-k8s.io/queue-name", "q")), "Job", 4, "kueue"),
    Case("JobSet: its GPU pods only (the driver asks none), queued", OBJECTS["JobSet"], "JobSet", 4, "kueue"),
    Case("JobSet without a queue: no gang scheduler", edit("JobSet", lambda o: o["metadata"].pop("labels")), "JobSet", 4),
    Case("JobSet with a coscheduling template label", edit("JobSet", lambda o: (o["metadata"].pop("labels"), _jobset_template(o)["metadata"].setdefault(
        "labels", {}).update({"scheduling.x-k8s.io/pod-group": "pg"}))), "JobSet", 4, "coscheduling"),
    Case("PyTorchJob under the KAI scheduler (its pod grouper gangs it)", edit("PyTorchJob", lambda o: [
        rs["template"]["spec"].update(schedulerName="kai-scheduler") for rs in o["spec"]["pytorchReplicaSpecs"].values()]), "PyTorchJob", 4, "kai"),
    Case("a Job under the KAI scheduler is not ganged by it", edit("Job", lambda o: o["spec"]["template"]["spec"].update(schedulerName="kai-scheduler")),
         "Job", 4),
    Case("LeaderWorkerSet", OBJECTS["LeaderWorkerSet"], "LeaderWorkerSet", 4),
    Case("Deployment with a queue: Kueue admits its pods one by one", edit("Deployment", lambda o: _label(o, "kueue.x-k8s.io/queue-name", "q")),
         "Deployment", 3, None, None, True),
    Case("StatefulSet of MIG slices: memory stated", OBJECTS["StatefulSet"], "StatefulSet", 2, None, 10 * GI, True),
    Case("Deployment of HAMi compute-only shares", edit("Deployment", lambda o: (_deploy_spec(o).update(containers=[container(
        limits={"nvidia.com/gpu": "1", "nvidia.com/gpucores": "25"})]), o["metadata"].get("annotations", {}).clear(),
        o["spec"]["template"]["metadata"].get("annotations", {}).clear())), "Deployment", 3),
    Case("Job template with a request and no limit", edit("Job", lambda o: o["spec"]["template"]["spec"]["containers"][0].update(
        resources={"requests": {"nvidia.com/gpu": "2"}})), "Job", 4, want_mismatches=1),
    Case("Job template with a memory floor by affinity", edit("Job", lambda o: o["spec"]["template"]["spec"].update(
        affinity=affinity(mem_expr("Gt", "40000")))), "Job", 4, want_requested=2 * 40001 * MI),
    Case("RayCluster: GPU workers only", OBJECTS["RayCluster"], "RayCluster", 6),
    Case("TrainJob: resources per node", OBJECTS["TrainJob"], "TrainJob", 2),
]


@pytest.mark.parametrize("c", WORKLOAD_CASES, ids=lambda c: c.name)
def test_workload_expression_fields(c):
    w = normalize(request(c.obj, kind=c.obj["kind"], resource=c.obj["kind"].lower() + "s"), cluster())
    assert not [p for p in w.problems if p.code != "MalformedResourceRequests"], w.problems
    got = (w.controller, w.gpu_pods, w.gang_scheduler, w.gpu_memory_requested, w.memory_share, w.gpu_limit_mismatches)
    assert got == (c.want_controller, c.want_gpu_pods, c.want_scheduler, c.want_requested, c.want_memory_share, c.want_mismatches)


@pytest.mark.parametrize("api, family", [
    ("scheduling.x-k8s.io/v1alpha1", "coscheduling"), ("scheduling.volcano.sh/v1beta1", "volcano"),
    ("scheduling.run.ai/v2alpha2", "kai"), ("scheduling.k8s.io/v1alpha2", "upstream"),
])
def test_group_objects_are_scheduled_together_by_their_family(api, family):
    spec = {"minMember": 2, "minResources": {"nvidia.com/gpu": "16"}} if family != "upstream" else {
        "schedulingPolicy": {"gang": {"minCount": 2}}}
    w = normalize(request(podgroup("g", api=api, **spec)), snapshot(node("h1")))
    assert (w.gang_scheduler, w.controller, w.gpu_pods) == (family, None, 2 if family != "upstream" else 0)


def test_a_pod_of_unknown_shape_states_nothing():
    bad = {"apiVersion": "v1", "kind": "Pod", "metadata": meta("p", "team-a"), "spec": {"containers": "x"}}
    w = normalize(request(bad), cluster())
    assert (w.gpu_pods, w.gpu_limit_mismatches, w.memory_share, w.controller) == (0, 0, False, None)
    assert w.problems


def _owner(kind, name):
    return lambda o: o["metadata"].update(ownerReferences=[{"apiVersion": "apps/v1", "kind": kind, "name": name, "uid": "u",
                                                            "controller": True}])


@pytest.mark.parametrize("kind, fn, want", [
    ("ReplicaSet", lambda o: (o["metadata"].setdefault("labels", {}).update({"pod-template-hash": "7c9"}),
                              _owner("Deployment", "embed")(o)), "Deployment"),
    ("Job", lambda o: o["metadata"].setdefault("labels", {}).update({"jobset.sigs.k8s.io/jobset-name": "ls"}), "JobSet"),
    ("StatefulSet", lambda o: o["metadata"].setdefault("labels", {}).update({"leaderworkerset.sigs.k8s.io/name": "vllm"}), "LeaderWorkerSet"),
    ("Job", _owner("CronJob", "nightly"), "CronJob"),
    ("Job", lambda o: None, "Job"),
])
def test_a_workload_made_by_another_names_its_maker(kind, fn, want):
    obj = edit(kind, fn)
    w = normalize(request(obj, kind=kind, resource=kind.lower() + "s"), cluster())
    assert w.controller == want


def test_normalization_alone_leaves_the_fields_at_their_defaults():
    w = _normalize(request(pod(containers=[container(requests={"nvidia.com/gpu": "1"})])), cluster())
    assert (w.gpu_pods, w.gpu_limit_mismatches) == (0, 0) and express(w).gpu_pods == 1 and w.gpu_limit_mismatches == 1


def test_a_trainjob_counts_its_per_node_resources():
    obj = edit("TrainJob", lambda o: o["spec"]["trainer"]["resourcesPerNode"].update(requests={"nvidia.com/gpu": "2"}))
    w = normalize(request(obj, kind="TrainJob", resource="trainjobs"), cluster())
    assert w.gpu_limit_mismatches == 1


@pytest.mark.parametrize("src, want", [
    ('rule r {\n  when gpu_pods > 1\n  deny "x"\n}', True),
    ('rule r {\n  deny "{controller}"\n}', True),
    ('rule r {\n  when gpus > 1\n  set labels["k"] = gang_scheduler\n}', True),
    ('gang g {\n  for has(gang_scheduler)\n}', True),
    ('rule r {\n  when gpus > 1 and labels["gpu_pods"] == "x"\n  deny "gpu_pods"\n}', False),
])
def test_the_engine_reads_them_only_for_sets_that_ask(src, want):
    import lang
    ps, diags = lang.compile_policies([("t.policy", src)])
    assert not [d for d in diags if d.severity == "error"]
    assert reads_expression(ps) is want
