"""Workload objects (Job, JobSet, LeaderWorkerSet, PyTorchJob, TrainJob, RayCluster/RayJob/RayService, Deployment, StatefulSet, ReplicaSet, KAITO Workspace) as pod templates.

Each kind is read into `Template`s: a named pod set of `count` pods (replicas × pods per
replica), its own minimum, the pod template (or, for a TrainJob, the per-node resources)
and the path of the template's pod spec inside the object (for patches). Counts are read
exactly as the controllers default them (docs/kinds.md has a section per kind). The
kinds of issue 28 (CronJob, Volcano, Kubeflow MPI/TF/Paddle/XGBoost/JAX, KServe, KAITO
InferenceSet, AppWrapper) are read in workloads_batch/_kubeflow/_serving.py and registered
at the end of this module, the one table of kinds, readers and resources.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from policy.subject.model import Problem

from .common import BAD_OBJECT, UNKNOWN_VALUE
from .kaito import read_workspace
from .trainer import find_runtime, runtime_jobs, with_node_resources
from .workload_parts import Template, _count, _job_pods, _list, _map, _object, _pod

JOBSET_EXCLUSIVE = "alpha.jobset.sigs.k8s.io/exclusive-topology"
LWS_EXCLUSIVE = "leaderworkerset.sigs.k8s.io/exclusive-topology"

# (API group, kind) -> reader name; the group is the apiVersion before "/" ("" for the core/apps group-less form).
KINDS: dict[tuple[str, str], str] = {
    ("batch", "Job"): "job",
    ("jobset.x-k8s.io", "JobSet"): "jobset",
    ("leaderworkerset.x-k8s.io", "LeaderWorkerSet"): "lws",
    ("kubeflow.org", "PyTorchJob"): "pytorchjob",
    ("trainer.kubeflow.org", "TrainJob"): "trainjob",
    ("ray.io", "RayCluster"): "raycluster",
    ("ray.io", "RayJob"): "rayjob",
    ("ray.io", "RayService"): "rayservice",
    ("apps", "Deployment"): "replicas",
    ("apps", "StatefulSet"): "replicas",
    ("apps", "ReplicaSet"): "replicas",
    ("kaito.sh", "Workspace"): "workspace",
}
WORKLOAD_KIND_NAMES = frozenset(kind for _, kind in KINDS)
# Kinds whose pods must start together: judged as one gang of their pod sets.
GANG_KINDS = frozenset({"JobSet", "LeaderWorkerSet", "PyTorchJob", "TrainJob", "RayCluster", "RayJob"})
# kind -> (resource, API group, versions) that `allot compile` registers.
RESOURCES: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "Job": ("jobs", "batch", ("v1",)),
    "JobSet": ("jobsets", "jobset.x-k8s.io", ("v1alpha2",)),
    "LeaderWorkerSet": ("leaderworkersets", "leaderworkerset.x-k8s.io", ("v1",)),
    "PyTorchJob": ("pytorchjobs", "kubeflow.org", ("v1",)),
    "TrainJob": ("trainjobs", "trainer.kubeflow.org", ("v1alpha1",)),
    "RayCluster": ("rayclusters", "ray.io", ("v1",)),
    "RayJob": ("rayjobs", "ray.io", ("v1",)),
    "RayService": ("rayservices", "ray.io", ("v1",)),
    "Deployment": ("deployments", "apps", ("v1",)),
    "StatefulSet": ("statefulsets", "apps", ("v1",)),
    "ReplicaSet": ("replicasets", "apps", ("v1",)),
    "Workspace": ("workspaces", "kaito.sh", ("v1beta1", "v1alpha1")),  # the watch lists the first: v1beta1, KAITO's storage version
}


@dataclass(frozen=True, slots=True)
class Read:
    """A workload object read into templates, its suspension and its exclusive-topology key."""

    templates: tuple[Template, ...]
    suspended: bool
    exclusive: str | None
    problems: tuple[Problem, ...]


def workload_reader(api_version, kind: str) -> str | None:
    """The reader of a workload object's kind, or None when it is not a workload kind Allot reads."""
    if kind not in WORKLOAD_KIND_NAMES or type(api_version) is not str:
        return None
    group = api_version.split("/", 1)[0] if "/" in api_version else ""
    return KINDS.get((group, kind))


def _job(obj: Mapping, spec: Mapping, ns, problems: list) -> tuple[list[Template], bool]:
    n = _job_pods(spec, "spec", problems)
    # completionMode (NonIndexed | Indexed) changes how pods are named, not how many run at once.
    return [Template("job", n, None, _pod(spec.get("template"), ns, "spec.template", problems), ("spec", "template", "spec"))], spec.get("suspend") is True


def _jobset(obj: Mapping, spec: Mapping, ns, problems: list) -> tuple[list[Template], bool]:
    out = []
    for i, rj in enumerate(_list(spec.get("replicatedJobs"), "spec.replicatedJobs", problems)):
        path = f"spec.replicatedJobs[{i}]"
        rj = _object(rj, path, problems)
        replicas = _count(rj.get("replicas"), 1, f"{path}.replicas", problems)
        jt = _object(rj.get("template"), f"{path}.template", problems)
        jspec = _object(jt.get("spec"), f"{path}.template.spec", problems)
        per_job = _job_pods(jspec, f"{path}.template.spec", problems)
        name = rj.get("name") if type(rj.get("name")) is str else str(i)
        tpl = _pod(jspec.get("template"), ns, f"{path}.template.spec.template", problems)
        out.append(Template(name, replicas * per_job, None, tpl, ("spec", "replicatedJobs", str(i), "template", "spec", "template", "spec")))
    return out, spec.get("suspend") is True


def _lws(obj: Mapping, spec: Mapping, ns, problems: list) -> tuple[list[Template], bool]:
    """`replicas` groups of `size` pods; each group is its own gang (LWS makes one PodGroup per group), so a set's minimum is one group's."""
    replicas = _count(spec.get("replicas"), 1, "spec.replicas", problems)
    lwt = _object(spec.get("leaderWorkerTemplate"), "spec.leaderWorkerTemplate", problems)
    size = _count(lwt.get("size"), 1, "spec.leaderWorkerTemplate.size", problems)
    worker = ("spec", "leaderWorkerTemplate", "workerTemplate", "spec")
    groups = 1 if replicas else 0  # the pods that must start together: one group's
    if "leaderTemplate" in lwt and lwt.get("leaderTemplate") is not None:
        leader = Template("leader", replicas if size else 0, groups if size else 0, _pod(lwt.get("leaderTemplate"), ns, "spec.leaderWorkerTemplate.leaderTemplate", problems), ("spec", "leaderWorkerTemplate", "leaderTemplate", "spec"))
        workers = Template("worker", replicas * max(0, size - 1), groups * max(0, size - 1), _pod(lwt.get("workerTemplate"), ns, "spec.leaderWorkerTemplate.workerTemplate", problems), worker)
        return [leader, workers], False
    # No leader template: the leader runs the worker template too.
    return [Template("worker", replicas * size, groups * size, _pod(lwt.get("workerTemplate"), ns, "spec.leaderWorkerTemplate.workerTemplate", problems), worker)], False


def _pytorchjob(obj: Mapping, spec: Mapping, ns, problems: list) -> tuple[list[Template], bool]:
    """A set per replica type; an elastic job (`elasticPolicy.minReplicas`) starts with that many workers, as KAI and Kueue gang it."""
    elastic = _object(spec.get("elasticPolicy"), "spec.elasticPolicy", problems)
    least = elastic.get("minReplicas")
    least = _count(least, 0, "spec.elasticPolicy.minReplicas", problems) if least is not None else None
    out = []
    for role, rs in _object(spec.get("pytorchReplicaSpecs"), "spec.pytorchReplicaSpecs", problems).items():
        rs = _object(rs, f"spec.pytorchReplicaSpecs.{role}", problems)
        n = _count(rs.get("replicas"), 1, f"spec.pytorchReplicaSpecs.{role}.replicas", problems)
        minimum = min(least, n) if least is not None and role == "Worker" else None
        out.append(Template(str(role), n, minimum, _pod(rs.get("template"), ns, f"spec.pytorchReplicaSpecs.{role}.template", problems), ("spec", "pytorchReplicaSpecs", str(role), "template", "spec")))
    return out, _map(spec.get("runPolicy")).get("suspend") is True


def _trainjob(obj: Mapping, spec: Mapping, ns, problems: list, snapshot=None) -> tuple[list[Template], bool]:
    """A TrainJob's pods: its runtime's replicated jobs when the state holds the runtime, else its nodes' resources alone."""
    trainer = _object(spec.get("trainer"), "spec.trainer", problems)
    nodes = trainer.get("numNodes")
    nodes = _count(nodes, 1, "spec.trainer.numNodes", problems) if nodes is not None else None
    resources = trainer.get("resourcesPerNode")
    _object(resources, "spec.trainer.resourcesPerNode", problems)
    suspended = spec.get("suspend") is True
    runtime, what = find_runtime(spec, ns, snapshot)
    if runtime is not None:
        out = []
        for name, pods, minimum, tpl, is_trainer in runtime_jobs(runtime, nodes):
            pod = _pod(tpl, ns)
            if is_trainer:
                pod["spec"] = with_node_resources(pod["spec"], resources)
            where = f"{what} replicatedJob {name}" + (" with spec.trainer.resourcesPerNode" if is_trainer and type(resources) is dict else "")
            out.append(Template(name, pods, minimum, pod, None, where))
        return out, suspended
    # The pod template lives in the runtime (not in the object): the node's resources are all it says.
    pod = {"kind": "Pod", "metadata": {"namespace": ns} if ns else {},
           "spec": {"containers": [{"name": "node", "resources": resources}] if type(resources) is dict else []}}
    return [Template("node", 1 if nodes is None else nodes, None, pod, None)], suspended


def _ray_groups(cspec: Mapping, prefix: tuple[str, ...], ns, problems: list) -> list[Template]:
    where = ".".join(prefix)
    hg = _object(cspec.get("headGroupSpec"), f"{where}.headGroupSpec", problems)
    head = Template("head", 1, None, _pod(hg.get("template"), ns, f"{where}.headGroupSpec.template", problems), (*prefix, "headGroupSpec", "template", "spec"))
    out = [head]
    for i, g in enumerate(_list(cspec.get("workerGroupSpecs"), f"{where}.workerGroupSpecs", problems)):
        path = f"{where}.workerGroupSpecs[{i}]"
        g = _object(g, path, problems)
        replicas = _count(g.get("replicas"), 1, f"{path}.replicas", problems)
        hosts = _count(g.get("numOfHosts"), 1, f"{path}.numOfHosts", problems) or 1
        least = g.get("minReplicas")
        minimum = _count(least, 0, f"{path}.minReplicas", problems) * hosts if least is not None else None
        if g.get("suspend") is True:
            replicas, minimum = 0, None
        name = g.get("groupName") if type(g.get("groupName")) is str else f"workers-{i}"
        out.append(Template(name, replicas * hosts, minimum, _pod(g.get("template"), ns, f"{path}.template", problems), (*prefix, "workerGroupSpecs", str(i), "template", "spec")))
    return out


def _raycluster(obj: Mapping, spec: Mapping, ns, problems: list) -> tuple[list[Template], bool]:
    return _ray_groups(spec, ("spec",), ns, problems), spec.get("suspend") is True


# KubeRay's submitter: K8sJobMode (the default) runs `ray job submit` in a Job of one pod (KubeRay's default one
# asks 500m CPU and 200Mi, limited to 1 CPU and 1Gi, no GPU); HTTPMode submits from the operator, InteractiveMode
# waits for the user, SidecarMode runs it as a container of the head pod: no pod of their own.
SUBMITTER_MODES = {"K8sJobMode": True, "HTTPMode": False, "InteractiveMode": False, "SidecarMode": False}
DEFAULT_SUBMITTER = {"containers": [{"name": "ray-job-submitter", "resources": {
    "requests": {"cpu": "500m", "memory": "200Mi"}, "limits": {"cpu": "1", "memory": "1Gi"}}}]}


def _submitter(spec: Mapping, ns, problems: list) -> list[Template]:
    """The RayJob's submitter pod, started once its cluster is ready (so no part of the gang's minimum)."""
    mode = spec.get("submissionMode")
    mode = "K8sJobMode" if mode is None else mode
    if type(mode) is not str or mode not in SUBMITTER_MODES:
        problems.append(Problem(UNKNOWN_VALUE, f"spec.submissionMode: {mode!r} is not one of {', '.join(SUBMITTER_MODES)}; its submitter pod is counted"))
    elif not SUBMITTER_MODES[mode]:
        return []
    tpl = spec.get("submitterPodTemplate")
    if tpl is not None:
        return [Template("submitter", 1, 0, _pod(tpl, ns, "spec.submitterPodTemplate", problems), ("spec", "submitterPodTemplate", "spec"))]
    pod = {"kind": "Pod", "metadata": {"namespace": ns} if ns else {}, "spec": DEFAULT_SUBMITTER}
    return [Template("submitter", 1, 0, pod, None, "spec.submissionMode")]


def _rayjob(obj: Mapping, spec: Mapping, ns, problems: list) -> tuple[list[Template], bool]:
    cspec = spec.get("rayClusterSpec")
    if cspec is not None and type(cspec) is not dict:
        problems.append(Problem(BAD_OBJECT, f"spec.rayClusterSpec: expected an object, got {type(cspec).__name__}"))
    submitter = _submitter(spec, ns, problems)
    if type(cspec) is not dict:  # a RayJob on an existing cluster (clusterSelector) runs only its submitter
        return submitter, spec.get("suspend") is True
    return [*_ray_groups(cspec, ("spec", "rayClusterSpec"), ns, problems), *submitter], spec.get("suspend") is True


def _rayservice(obj: Mapping, spec: Mapping, ns, problems: list) -> tuple[list[Template], bool]:
    """A RayService runs one RayCluster of `spec.rayClusterConfig` (KubeRay); a second only while it upgrades (not counted)."""
    cspec = _object(spec.get("rayClusterConfig"), "spec.rayClusterConfig", problems)
    if not cspec:
        return [], False
    return _ray_groups(cspec, ("spec", "rayClusterConfig"), ns, problems), False


def _replicas(obj: Mapping, spec: Mapping, ns, problems: list) -> tuple[list[Template], bool]:
    n = _count(spec.get("replicas"), 1, "spec.replicas", problems)
    return [Template("replicas", n, None, _pod(spec.get("template"), ns, "spec.template", problems), ("spec", "template", "spec"))], False


_READERS = {
    "job": _job, "jobset": _jobset, "lws": _lws, "pytorchjob": _pytorchjob,
    "raycluster": _raycluster, "rayjob": _rayjob, "rayservice": _rayservice, "replicas": _replicas,
}


def read_workload(obj: Mapping, reader: str, snapshot=None, namespace: str | None = None) -> Read:
    """A workload object's templates; bad counts become problems (and the controller's default), never exceptions.

    `snapshot` sizes the kinds whose pods take a node's GPUs (a KAITO Workspace); None: not known.
    `namespace` is the namespace the object is judged in (the request's); its pods' claims are looked up there.
    """
    meta = _map(obj.get("metadata"))
    problems: list[Problem] = []
    ns = namespace or (meta.get("namespace") if type(meta.get("namespace")) is str else None)
    if reader == "workspace":  # no `spec`: resource / inference / tuning at the top
        sets = read_workspace(obj, ns, snapshot, problems)
        templates = [Template(s.name, s.count, None, s.pod, s.spec_path, s.where) for s in sets]
        return Read(tuple(templates), False, None, tuple(problems))
    if reader == "inferenceset":  # Workspaces of a template: sized from the cluster's nodes, as a Workspace is
        return Read(tuple(read_inference_set(obj, ns, snapshot, problems)), False, None, tuple(problems))
    spec = _object(obj.get("spec"), "spec", problems)
    if reader == "trainjob":  # its pods are its runtime's, found in the state
        templates, suspended = _trainjob(obj, spec, ns, problems, snapshot)
    else:
        templates, suspended = _READERS[reader](obj, spec, ns, problems)
    annotations = _map(meta.get("annotations"))
    exclusive = annotations.get(JOBSET_EXCLUSIVE) if reader == "jobset" else annotations.get(LWS_EXCLUSIVE) if reader == "lws" else None
    if reader == "jobset" and not exclusive:  # the annotation may sit on one replicated job's Job template
        for rj in spec.get("replicatedJobs") or ():
            found = _map(_map(_map(rj).get("template")).get("metadata")).get("annotations")
            if type(found) is dict and type(found.get(JOBSET_EXCLUSIVE)) is str:
                exclusive = found[JOBSET_EXCLUSIVE]
                break
    return Read(tuple(templates), suspended, exclusive if type(exclusive) is str and exclusive else None, tuple(problems))


# Kinds of issue 28, read in their own modules (on the helpers of workload_parts.py) and registered
# here: one table of kinds, readers and resources for normalization, `allot compile` and the watch.
from . import workloads_batch, workloads_kubeflow, workloads_serving
from .workloads_serving import read_inference_set

workloads_batch.REGISTRY.update(kinds=KINDS, readers=_READERS)  # an AppWrapper reads its components by their kind

for _family in (workloads_batch, workloads_kubeflow, workloads_serving):
    KINDS.update(_family.KINDS)
    _READERS.update(_family.READERS)
    RESOURCES.update(_family.RESOURCES)
WORKLOAD_KIND_NAMES = frozenset(kind for _, kind in KINDS)
# Readers whose objects are one gang whatever their kind's name (Volcano's `Job` is not batch/v1's).
GANG_READERS = workloads_batch.GANG_READERS | workloads_kubeflow.GANG_READERS | workloads_serving.GANG_READERS
