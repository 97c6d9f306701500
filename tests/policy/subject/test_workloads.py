"""Workload objects (Job, JobSet, LWS, PyTorchJob, TrainJob, Ray, Deployment, StatefulSet, ReplicaSet) normalized from real object shapes."""

import copy
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from policy.admission import wrap_manifest
from policy.subject.normalize import normalize
from policy.subject.workloads import runs_demand, starts_whole
from tests.policy.builders import node, snapshot

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "workloads"
OBJECTS = {o["kind"]: o for f in sorted(FIXTURES.glob("*.yaml")) for o in yaml.safe_load_all(f.read_text()) if o}
H100 = "NVIDIA-H100-80GB-HBM3"


def subject(obj, operation="CREATE", old=None, cluster=None):
    req = wrap_manifest(obj, user="alice", groups=["dev"], operation=operation)["request"]
    if old is not None:
        req["oldObject"] = old
    return normalize(req, cluster if cluster is not None else snapshot(node("n1")))


@dataclass
class Case:
    kind: str
    want_sets: list  # (name, count, milli-GPU per pod, min_count)
    want_total: int
    want_gang: str | None
    want_min: int | None
    want_required: str | None = None
    want_preferred: str | None = None
    want_suspended: bool = False
    want_fraction: int | None = None
    want_product: str | None = None


CASES = [
    Case("Job", [("job", 4, 2000, None)], 8000, None, None, want_product=H100),
    Case("JobSet", [("driver", 1, 0, None), ("workers", 4, 8000, None)], 32000, "llama-pretrain", 5,
         "topology.acme.io/rack", "topology.acme.io/block", want_suspended=True, want_product=H100),
    Case("PyTorchJob", [("Master", 1, 1000, None), ("Worker", 3, 1000, None)], 4000, "resnet-ddp", 4),
    Case("TrainJob", [("node", 2, 4000, None)], 8000, "qwen-sft", 2),
    # each of the 2 groups (1 leader + 1 worker) is its own gang: the minimum is one group
    Case("LeaderWorkerSet", [("leader", 2, 8000, 1), ("worker", 2, 8000, 1)], 32000, "vllm-405b", 2, "topology.acme.io/rack"),
    Case("Deployment", [("replicas", 3, 250, None)], 750, None, None, want_fraction=250),
    Case("StatefulSet", [("replicas", 2, 143, None)], 286, None, None, want_fraction=143),  # MIG 1g of 7, rounded up as for a pod
    Case("ReplicaSet", [("replicas", 2, 1000, None)], 2000, None, None),
    Case("RayCluster", [("head", 1, 0, None), ("gpu", 6, 4000, 4)], 24000, "rl-cluster", 5),
    Case("RayJob", [("head", 1, 0, None), ("small", 2, 1000, 1), ("submitter", 1, 0, 0)], 2000, "eval-run", 2, want_suspended=True),
]


@pytest.mark.parametrize("c", CASES, ids=lambda c: c.kind)
def test_workload_pod_sets_from_templates(c):
    w = subject(OBJECTS[c.kind])
    got = [(ps.name, ps.count, ps.gpus, ps.min_count) for ps in w.pod_sets]
    assert (w.kind, got, w.total_gpus, w.gang, w.min_members) == (c.kind, c.want_sets, c.want_total, c.want_gang, c.want_min)
    assert (w.topology_required, w.topology_preferred, w.suspended) == (c.want_required, c.want_preferred, c.want_suspended)
    assert (w.fraction, w.problems) == (c.want_fraction, ())
    if c.want_product:
        assert w.gpu_product == c.want_product
    assert w.pods == sum(n for _, n, _, _ in c.want_sets)


@pytest.mark.parametrize("kind", ["StatefulSet", "Deployment", "Job"])
def test_a_template_reads_as_a_pod_created_from_it_would(kind):
    obj = OBJECTS[kind]
    tpl = obj["spec"]["template"]
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {**tpl["metadata"], "name": "p", "namespace": obj["metadata"]["namespace"]}, "spec": tpl["spec"]}
    p = subject(pod)
    ps = subject(obj).pod_sets[0]
    assert (ps.gpus, ps.fraction, ps.gpu_memory, ps.gpu_product) == (p.gpus, p.fraction, p.gpu_memory, p.gpu_product)


def test_job_runs_at_most_the_completions_left():
    job = copy.deepcopy(OBJECTS["Job"])
    job["spec"].update(parallelism=8, completions=3)
    assert subject(job).pod_sets[0].count == 3


def test_malformed_count_is_a_located_problem_not_an_exception():
    js = copy.deepcopy(OBJECTS["JobSet"])
    js["spec"]["replicatedJobs"][1]["replicas"] = "two"
    w = subject(js)
    assert [p.code for p in w.problems] == ["MalformedQuantity"]
    assert "spec.replicatedJobs[1].replicas" in w.problems[0].message


def test_template_demand_problem_names_the_pod_set():
    d = copy.deepcopy(OBJECTS["Deployment"])
    d["spec"]["template"]["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": "lots"}}
    w = subject(d)
    assert w.problems and w.problems[0].message.startswith("pod set replicas (spec.template.spec): ")


def test_privileged_template_marks_the_workload():
    job = copy.deepcopy(OBJECTS["Job"])
    job["spec"]["template"]["spec"]["containers"][0]["securityContext"] = {"privileged": True}
    assert (subject(job).privileged, subject(OBJECTS["Job"]).privileged) == (True, False)


def test_template_priority_class_is_the_workloads():
    w = subject(OBJECTS["JobSet"])
    assert w.priority_class == "training"


def test_scale_up_adds_only_the_new_replicas():
    old = OBJECTS["Deployment"]
    new = copy.deepcopy(old)
    new["spec"]["replicas"] = 5
    w = subject(new, "UPDATE", old=old)
    assert (w.added_gpus, runs_demand(w), starts_whole(w)) == (500, True, False)


def test_scale_down_adds_nothing():
    old = OBJECTS["Deployment"]
    new = copy.deepcopy(old)
    new["spec"]["replicas"] = 1
    w = subject(new, "UPDATE", old=old)
    assert (w.added_gpus, runs_demand(w)) == (0, False)


def test_resume_starts_the_whole_workload():
    old = OBJECTS["JobSet"]
    new = copy.deepcopy(old)
    new["spec"]["suspend"] = False
    w = subject(new, "UPDATE", old=old)
    assert (w.added_gpus, runs_demand(w), starts_whole(w)) == (32000, True, True)
    assert (runs_demand(subject(old)), starts_whole(subject(old))) == (False, False)


def test_template_paths_point_at_pod_specs():
    w = subject(OBJECTS["JobSet"])
    obj = OBJECTS["JobSet"]
    for path in w.template_paths:
        node_ = obj
        for part in path:
            node_ = node_[int(part)] if isinstance(node_, list) else node_[part]
        assert "containers" in node_


@pytest.mark.parametrize("kind, path, value, want_where", [
    ("Deployment", ("spec", "template"), 5, "spec.template: expected an object, got int"),
    ("JobSet", ("spec", "replicatedJobs"), "abc", "spec.replicatedJobs: expected a list, got str"),
    ("JobSet", ("spec", "replicatedJobs", 1, "template", "spec"), [], "spec.replicatedJobs[1].template.spec: expected an object"),
    ("RayCluster", ("spec", "workerGroupSpecs", 0), True, "spec.workerGroupSpecs[0]: expected an object, got bool"),
    ("PyTorchJob", ("spec", "pytorchReplicaSpecs", "Worker", "template"), "x", "spec.pytorchReplicaSpecs.Worker.template: expected an object"),
    ("TrainJob", ("spec", "trainer", "resourcesPerNode"), [1], "spec.trainer.resourcesPerNode: expected an object, got list"),
])
def test_a_structure_of_the_wrong_type_is_a_located_problem(kind, path, value, want_where):
    obj = copy.deepcopy(OBJECTS[kind])
    at = obj
    for step in path[:-1]:
        at = at[step]
    at[path[-1]] = value
    w = subject(obj)
    assert [p.code for p in w.problems] == ["MalformedObject"] and want_where in w.problems[0].message, w.problems


def test_a_generated_name_keeps_the_gang():
    js = copy.deepcopy(OBJECTS["JobSet"])
    del js["metadata"]["name"]
    js["metadata"]["generateName"] = "llama-pretrain-"
    w = subject(js)
    assert w.name is None and w.gang.startswith("llama-pretrain-<") and w.min_members == 5


def test_two_generated_names_are_two_gangs():
    a, b = copy.deepcopy(OBJECTS["JobSet"]), copy.deepcopy(OBJECTS["JobSet"])
    for js in (a, b):
        del js["metadata"]["name"]
        js["metadata"]["generateName"] = "llama-pretrain-"
    b["metadata"]["labels"] = {"run": "2"}  # another object: another request uid
    assert subject(a).gang != subject(b).gang


def test_a_leaderworkerset_without_leader_template_gangs_one_group():
    lws = copy.deepcopy(OBJECTS["LeaderWorkerSet"])
    del lws["spec"]["leaderWorkerTemplate"]["leaderTemplate"]
    lws["spec"]["replicas"], lws["spec"]["leaderWorkerTemplate"]["size"] = 3, 4
    w = subject(lws)
    assert ([(ps.count, ps.min_count) for ps in w.pod_sets], w.pods, w.min_members) == ([(12, 4)], 12, 4)


def test_volcano_names_the_gang_scheduler_of_a_leaderworkerset():
    from policy.subject.expression import express

    lws = copy.deepcopy(OBJECTS["LeaderWorkerSet"])
    for t in ("leaderTemplate", "workerTemplate"):
        lws["spec"]["leaderWorkerTemplate"][t]["spec"]["schedulerName"] = "volcano"
    assert express(subject(lws)).gang_scheduler == "volcano"


@pytest.mark.parametrize("least, want", [(1, 2), (5, 4), (None, 4)])  # Master 1 + min(minReplicas, 3 workers)
def test_an_elastic_pytorchjob_gangs_its_minimum_workers(least, want):
    job = copy.deepcopy(OBJECTS["PyTorchJob"])
    if least is not None:
        job["spec"]["elasticPolicy"] = {"rdzvBackend": "c10d", "minReplicas": least, "maxReplicas": 3}
    w = subject(job)
    assert (w.pods, w.min_members) == (4, want)


def test_an_elastic_minimum_of_the_wrong_type_is_a_located_problem():
    job = copy.deepcopy(OBJECTS["PyTorchJob"])
    job["spec"]["elasticPolicy"] = {"minReplicas": "one"}
    assert any("spec.elasticPolicy.minReplicas" in p.message for p in subject(job).problems)


def _rayjob(**spec):
    job = copy.deepcopy(OBJECTS["RayJob"])
    job["spec"].update(spec)
    return job


GPU_SUBMITTER = {"spec": {"restartPolicy": "Never", "containers": [
    {"name": "submit", "image": "rayproject/ray:2.40.0", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}


@pytest.mark.parametrize("spec, want_pods, want_total", [
    ({}, 4, 2000),  # K8sJobMode, the default: KubeRay's own submitter pod (no GPU)
    ({"submissionMode": "K8sJobMode", "submitterPodTemplate": GPU_SUBMITTER}, 4, 3000),
    ({"submissionMode": "HTTPMode"}, 3, 2000),
    ({"submissionMode": "InteractiveMode"}, 3, 2000),
    ({"submissionMode": "SidecarMode"}, 3, 2000),  # a container of the head pod
])
def test_a_rayjob_counts_its_submitter_pod(spec, want_pods, want_total):
    w = subject(_rayjob(**spec))
    assert (w.pods, w.total_gpus, w.min_members) == (want_pods, want_total, 2)


def test_a_rayjob_on_an_existing_cluster_is_its_submitter_alone():
    job = _rayjob()
    del job["spec"]["rayClusterSpec"]
    job["spec"]["clusterSelector"] = {"ray.io/cluster": "shared"}
    w = subject(job)
    assert (w.pods, w.total_gpus, w.gang) == (1, 0, None)


def test_an_unknown_submission_mode_counts_the_submitter_and_says_so():
    w = subject(_rayjob(submissionMode="Batch"))
    assert w.pods == 4 and "UnknownGpuDialectValue" in {p.code for p in w.problems}


def _runtime(kind="ClusterTrainingRuntime", name="torch-distributed", node_gpus="1", num_nodes=1, namespace=None):
    def job(step, gpus=None):
        c = {"name": "node" if step == "trainer" else step, "image": f"registry.example/{step}:1"}
        if gpus:
            c["resources"] = {"limits": {"nvidia.com/gpu": gpus}}
        return {"name": "node" if step == "trainer" else step,
                "template": {"metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": step}},
                             "spec": {"template": {"spec": {"containers": [c]}}}}}
    meta = {"name": name} if namespace is None else {"name": name, "namespace": namespace}
    return {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": kind, "metadata": meta,
            "spec": {"mlPolicy": {"numNodes": num_nodes, "torch": {"numProcPerNode": "auto"}},
                     "template": {"spec": {"replicatedJobs": [job("dataset-initializer"), job("model-initializer"), job("trainer", node_gpus)]}}}}


def _trainjob(**trainer):
    job = copy.deepcopy(OBJECTS["TrainJob"])
    job["spec"]["trainer"] = {"image": "ghcr.io/acme/sft:0.9", **trainer}
    return job


@pytest.mark.parametrize("obj, runtime, want_sets, want_total", [
    pytest.param(_trainjob(numNodes=2, resourcesPerNode={"limits": {"nvidia.com/gpu": "4"}}), _runtime(),
                 [("dataset-initializer", 1, 0, 0), ("model-initializer", 1, 0, 0), ("node", 2, 4000, None)], 8000, id="resourcesPerNode wins"),
    pytest.param(_trainjob(), _runtime(node_gpus="2", num_nodes=3),
                 [("dataset-initializer", 1, 0, 0), ("model-initializer", 1, 0, 0), ("node", 3, 2000, None)], 6000, id="the runtime's nodes and GPUs"),
])
def test_a_trainjob_counts_its_runtimes_pods(obj, runtime, want_sets, want_total):
    w = subject(obj, cluster=snapshot(node("n1"), runtime))
    got = [(ps.name, ps.count, ps.gpus, ps.min_count) for ps in w.pod_sets]
    assert (got, w.total_gpus, w.pods, w.min_members) == (want_sets, want_total, sum(s[1] for s in want_sets), want_sets[-1][1])


def test_a_trainjob_finds_its_namespaced_training_runtime():
    obj = _trainjob(numNodes=2)
    obj["spec"]["runtimeRef"] = {"apiGroup": "trainer.kubeflow.org", "kind": "TrainingRuntime", "name": "team-torch"}
    elsewhere = _runtime("TrainingRuntime", "team-torch", "8", namespace="team-b")
    here = _runtime("TrainingRuntime", "team-torch", "2", namespace="team-a")
    assert subject(obj, cluster=snapshot(node("n1"), elsewhere)).total_gpus == 0  # not its namespace's: node resources alone
    assert subject(obj, cluster=snapshot(node("n1"), elsewhere, here)).total_gpus == 4000


def test_a_trainjobs_initializers_do_not_repeat_the_nodes_gpu_asks():
    from policy.subject.expression import express

    obj = _trainjob(numNodes=2, resourcesPerNode={"requests": {"nvidia.com/gpu": "4"}})  # unlimited: one mismatch per node template
    w = express(subject(obj, cluster=snapshot(node("n1"), _runtime())))
    assert (len(w.pod_sets), w.gpu_limit_mismatches) == (3, 1)
