"""The subject of a workload object (Job, JobSet, LWS, PyTorchJob, TrainJob, Ray, Deployment, ...): its pod sets read from its templates.

Every template is read by the pod demand readers (`policy/subject/demand.py`), so a
template asks for GPUs in any dialect a pod may use. The subject stands for the whole
workload: `pods` and `total_gpus` are summed over its sets; the per-pod fields are those
of its largest GPU template (`gpus`) or, where sets differ, left for the blocks to read
per set (`fraction`, see policy/blocks/fraction.py); escalation flags are any template's.
"""

from __future__ import annotations

from typing import Mapping

from policy.subject.demand import read_demand
from policy.subject.dialects.common import BAD_OBJECT, EMPTY, ceil_div
from policy.subject.dialects.security import escalations
from policy.subject.dialects.topology import pod_topology
from policy.subject.dialects.workloads import GANG_KINDS, GANG_READERS, RESOURCES as WORKLOAD_RESOURCES, WORKLOAD_KIND_NAMES, read_workload, workload_reader
from policy.subject.model import PodSet, Problem, Workload, make_podset, make_workload

__all__ = ["HELD_KINDS", "WORKLOAD_TTL", "controlled_child", "ends_hold", "hold_key", "object_uid", "owner_hold_in", "owner_keys", "GANG_KINDS", "WORKLOAD_KIND_NAMES", "is_workload", "workload_memory", "runs_demand", "starts_whole", "workload_reader", "workload_subject"]


def is_workload(w) -> bool:
    """Whether the subject is a workload object (its controller creates the pods)."""
    return w.kind in WORKLOAD_KIND_NAMES


def runs_demand(w) -> bool:
    """Whether this request starts GPUs now: a CREATE not suspended, or an UPDATE that adds GPUs or resumes."""
    if w.suspended:
        return False
    return w.operation == "CREATE" or bool(w.added_gpus)


def starts_whole(w) -> bool:
    """Whether this request starts the whole workload: a CREATE not suspended, or the UPDATE that resumes it (gang, placement)."""
    if w.suspended:
        return False
    return w.operation == "CREATE" or (w.operation == "UPDATE" and w.added_gpus is not None and w.added_gpus == w.total_gpus > 0)


def workload_memory(w, model_by_product: dict, model_memory: dict) -> int | None:
    """GPU memory per pod of a workload, so `gpu_memory × pods` is its sets' memory (a set's own, else its model's × share), rounded up."""
    total = 0
    for ps in w.pod_sets:
        if not ps.count or not ps.gpus:
            continue
        per = ps.gpu_memory
        if per is None:
            model = model_by_product.get(ps.gpu_product) if ps.gpu_product is not None else w.gpu_model
            memory = model_memory.get(model) if model is not None else None
            if memory is None:
                return None  # a set of unknown memory: the workload's memory is unknown, as a pod's would be
            per = memory * (ps.fraction if ps.fraction is not None else ps.gpus) // 1000
        total += ps.count * per
    return ceil_div(total, w.pods) if total and w.pods else None


def _dotted(path: tuple[str, ...] | None) -> str:
    if path is None:
        return "spec.trainer.resourcesPerNode"
    out = ""
    for p in path:
        out += f"[{p}]" if p.isdigit() else ("." + p if out else p)
    return out


def _sets(obj: Mapping, reader: str, snapshot, problems: list | None, namespace: str | None = None):
    """(pod sets, the object read) of a workload object judged in `namespace`."""
    read = read_workload(obj, reader, snapshot, namespace)
    if problems is not None:
        problems.extend(read.problems)
    sets: list[PodSet] = []
    for t in read.templates:
        ps, found = read_demand(t.pod, snapshot)
        if found and problems is not None:
            where = t.where or _dotted(t.spec_path)
            problems.extend(Problem(p.code, f"pod set {t.name} ({where}): {p.message}") for p in found)
        sets.append(make_podset(t.name, t.count, ps.gpus, ps.fraction, ps.gpu_memory, ps.gpu_product, t.minimum))
    return sets, read


def _total(sets) -> int:
    return sum(ps.count * ps.gpus for ps in sets)


# Charge once (docs/workloads.md): kinds whose admission holds their GPUs, because their pods can be found again.
HELD_KINDS = frozenset({"Job", "JobSet", "LeaderWorkerSet", "PyTorchJob", "TrainJob", "RayCluster", "RayJob",
                        "Deployment", "StatefulSet", "ReplicaSet", "RayService", "Workspace"})
WORKLOAD_TTL = 120.0  # seconds a workload's remaining hold waits for its pods (then it expires)
# Labels the controllers put on every pod they make: label -> the workload kinds it may name, in the order looked up.
# A TrainJob's pods are its JobSet's (Kubeflow Trainer names the JobSet after the TrainJob), so the JobSet label
# names a TrainJob too.
OWNER_LABELS = (
    ("jobset.sigs.k8s.io/jobset-name", ("JobSet", "TrainJob")),
    ("leaderworkerset.sigs.k8s.io/name", ("LeaderWorkerSet",)),
    ("training.kubeflow.org/job-name", ("PyTorchJob",)),
    ("kaito.sh/workspace", ("Workspace",)),  # KAITO's StatefulSet / Job pods (their owner is the StatefulSet or Job)
)
LWS_LABEL = "leaderworkerset.sigs.k8s.io/name"
KUBEFLOW_OPERATOR, PYTORCH_OPERATOR = "training.kubeflow.org/operator-name", "pytorchjob-controller"
# KubeRay names a RayJob's RayCluster `<rayjob>-<5 random>` (older releases `<rayjob>-raycluster-<5 random>`),
# a RayService's `<rayservice>-raycluster-<5 random>`, and its pods carry only the cluster's name
# (`ray.io/cluster`, the RayCluster owner reference).
RAY_SUFFIX_LEN, RAY_OLD_INFIX = 5, "-raycluster"
RAY_PARENTS = ("RayJob", "RayService")  # the kinds whose controller makes a RayCluster of such a name


def hold_key(namespace: str | None, kind: str, name: str) -> str:
    """The reservation id of an admitted workload's hold: `wl:namespace/Kind/name`."""
    return f"wl:{namespace or 'default'}/{kind}/{name}"


def _controller_refs(obj) -> list:
    meta = _map(_map(obj).get("metadata"))
    refs = meta.get("ownerReferences")
    if type(refs) is not list:
        return []
    return [r for r in refs if type(r) is dict and r.get("controller") is True and type(r.get("kind")) is str and type(r.get("name")) is str]


def ray_job_names(cluster: str) -> tuple[str, ...]:
    """The RayJob names a RayCluster of name `cluster` may have been made for (KubeRay's naming, newest first)."""
    job, dash, tail = cluster.rpartition("-")
    if not dash or not job or len(tail) != RAY_SUFFIX_LEN:
        return ()
    if job.endswith(RAY_OLD_INFIX) and len(job) > len(RAY_OLD_INFIX):
        return (job, job[: -len(RAY_OLD_INFIX)])
    return (job,)


def owner_keys(w) -> tuple[str, ...]:
    """Every hold key Pod `w` may take from, in the order `owner_hold_in` looks them up (controller reference, then labels)."""
    ns, labels, out = w.namespace, w.labels, []
    for ref in _controller_refs(w.obj):
        kind, name = ref["kind"], ref["name"]
        if kind == "ReplicaSet":
            h = labels.get("pod-template-hash") if labels else None
            if type(h) is str and h and name.endswith("-" + h) and len(name) > len(h) + 1:  # a Deployment's ReplicaSet is `deployment-hash`
                out.append(hold_key(ns, "Deployment", name[: -len(h) - 1]))
        if kind in HELD_KINDS:
            out.append(hold_key(ns, kind, name))
        if kind == "RayCluster":
            out.extend(hold_key(ns, parent, job) for job in ray_job_names(name) for parent in RAY_PARENTS)
    if labels:
        for label, kinds in OWNER_LABELS:
            name = labels.get(label)
            if kinds[0] == "PyTorchJob" and labels.get(KUBEFLOW_OPERATOR, PYTORCH_OPERATOR) != PYTORCH_OPERATOR:
                continue  # an MPIJob's or TFJob's pod carries the same job-name label
            if type(name) is str and name:
                out.extend(hold_key(ns, kind, name) for kind in kinds)
    return tuple(out)


# Controller reference -> the hold keys it may name, in lookup order: a pure function of (namespace, kind, name,
# pod-template-hash), so an entry is never stale whatever holds come and go (each key is still looked up in the
# holds on every call). The keys come out with their hash cached, so a member pod builds no string per request.
_REF_KEYS: dict[tuple, tuple[str, ...]] = {}
REF_KEYS_CAP = 4096  # distinct controllers remembered; past it the memo starts over (names are the cluster's, not bounded)


def ref_hold_keys(ns: str, kind, name, h) -> tuple[str, ...]:
    """The hold keys a pod's controller reference (`kind`, `name`; `h` its pod-template-hash label) may name, in lookup order."""
    out = []
    if kind == "ReplicaSet" and h:  # an empty hash names no Deployment (as owner_keys reads it)
        deployment, _, tail = name.rpartition("-")  # a Deployment's ReplicaSet is `deployment-<pod-template-hash>`
        if tail == h and deployment:
            out.append(f"wl:{ns}/Deployment/{deployment}")
    if kind in HELD_KINDS:
        out.append(f"wl:{ns}/{kind}/{name}")
        if kind == "RayCluster":
            out.extend(f"wl:{ns}/{parent}/{job}" for job in ray_job_names(name) for parent in RAY_PARENTS)
    return tuple(out)


def _remember_ref(memo_key: tuple) -> tuple[str, ...]:
    ns, kind, name, h = memo_key
    keys = ref_hold_keys(ns, kind, name, h)
    if type(kind) is str and type(name) is str:  # 1 == True as dict keys: only strings are remembered
        if len(_REF_KEYS) >= REF_KEYS_CAP:
            _REF_KEYS.clear()
        _REF_KEYS[memo_key] = keys
    return keys


def owner_hold_in(w, holds) -> str | None:
    """The first of `owner_keys(w)` that is a key of `holds`, found without building them all (the member pod's hot path).

    Runs on every pod while any workload holds quota, so the common member (one
    controller reference, as the API server writes it) costs one memo hit and one dict
    hit per candidate key: plain subscripts inside a `try` (free in CPython 3.11 when
    nothing raises); an object of another shape raises there and is looked up field by field instead.
    """
    try:
        refs = w.obj["metadata"].get("ownerReferences")
        if refs:
            for ref in refs:
                if ref.get("controller") is True:
                    kind = ref["kind"]
                    memo_key = (w.namespace, kind, ref["name"], w.labels.get("pod-template-hash") if kind == "ReplicaSet" else None)
                    try:
                        keys = _REF_KEYS[memo_key]
                    except KeyError:
                        keys = _remember_ref(memo_key)
                    for key in keys:
                        if key in holds:
                            return key
        labels = w.labels
        if labels:  # inline, not a call: a plain pod (no owner) runs this on every request while any workload holds
            for label, kinds in OWNER_LABELS:
                if label in labels:
                    name = labels[label]
                    if kinds[0] == "PyTorchJob" and labels.get(KUBEFLOW_OPERATOR, PYTORCH_OPERATOR) != PYTORCH_OPERATOR:
                        continue  # an MPIJob's or TFJob's pod carries the same job-name label
                    for kind in kinds:
                        key = f"wl:{w.namespace}/{kind}/{name}"
                        if key in holds:
                            return key
        return None
    except (KeyError, TypeError, AttributeError):
        return _owner_hold_careful(w, holds)


def _owner_hold_careful(w, holds) -> str | None:
    """`owner_hold_in` for any shape: every field checked before use (a malformed reference is skipped, never raised)."""
    for key in owner_keys(w):
        if key in holds:
            return key
    return None


# A held workload that will start no more pods: its remaining hold is released (status.conditions types, per kind).
FINISHED_CONDITIONS = {"Job": ("Complete", "Failed"), "JobSet": ("Completed", "Failed"), "PyTorchJob": ("Succeeded", "Failed"),
                       "TrainJob": ("Complete", "Failed")}
# A RayJob says it is done in `status.jobDeploymentStatus` (KubeRay), not in conditions.
FINISHED_STATUS = {"RayJob": ("jobDeploymentStatus", ("Complete", "Failed"))}


def ends_hold(obj) -> bool:
    """Whether live workload object `obj` will make no more pods: being deleted, or finished by its status."""
    meta = _map(_map(obj).get("metadata"))
    if meta.get("deletionTimestamp"):
        return True
    kind = _map(obj).get("kind")
    status = _map(_map(obj).get("status"))
    if kind in FINISHED_STATUS:
        field, done = FINISHED_STATUS[kind]
        return status.get(field) in done
    ends = FINISHED_CONDITIONS.get(kind)
    if ends is None:
        return False
    conditions = status.get("conditions")
    if type(conditions) is not list:
        return False
    return any(type(c) is dict and c.get("type") in ends and c.get("status") == "True" for c in conditions)


def object_uid(obj) -> str | None:
    """`metadata.uid` of an object, when it is a string (the API server sets it before validating admission)."""
    uid = _map(_map(obj).get("metadata")).get("uid")
    return uid if type(uid) is str and uid else None


def controlled_child(w) -> bool:
    """A workload object made by another one's controller (a Deployment's ReplicaSet, a JobSet's Job, an LWS's StatefulSets): its parent's decision holds its GPUs."""
    if w.labels and LWS_LABEL in w.labels:
        return True
    return any(r["kind"] in HELD_KINDS or r["kind"] == "Pod" for r in _controller_refs(w.obj))


# `scale` sub-resources of the workload kinds that serve one: resource -> kind.
SCALABLE = {"deployments": "Deployment", "statefulsets": "StatefulSet", "replicasets": "ReplicaSet", "leaderworkersets": "LeaderWorkerSet"}
NOT_IN_STATE = "WorkloadNotInClusterState"


def scale_subject(request: Mapping, snapshot, r: tuple, problems: list) -> Workload | None:
    """The subject of a `scale` UPDATE (an autoscaling/v1 Scale): the live workload with the new replicas, judged as its UPDATE.

    None when the live object is not in the cluster state (a `--cluster` file without it, or
    the watch has not listed it yet): the caller reports `WorkloadNotInClusterState`, a warning, never a silent allow.
    """
    kind = SCALABLE[r[6]]
    obj = request.get("object")
    replicas = _map(_map(obj).get("spec")).get("replicas")
    ns, name = r[2] or "default", r[1]
    live = None
    if snapshot is not None and name:
        _, group, versions = WORKLOAD_RESOURCES[kind]
        for v in versions:  # the versions Allot reads, as the watch files them
            live = snapshot.other(f"{group}/{v}", kind, ns, name)
            if live is not None:
                break
        else:  # a cluster file may hold another served version
            live = next((o for o in snapshot.objects(kind) if _map(o.get("metadata")).get("name") == name
                         and (_map(o.get("metadata")).get("namespace") or "default") == ns), None)
    if live is None or type(replicas) is not int:
        return None
    reader = workload_reader(live.get("apiVersion"), kind)
    if reader is None:
        return None
    new = {**live, "spec": {**_map(live.get("spec")), "replicas": replicas}}
    return workload_subject(new, reader, kind, snapshot, (*r[:10], live), problems)


def _map(v) -> Mapping:
    return v if type(v) is dict else EMPTY


def _string_map(meta: Mapping, key: str, problems: list) -> Mapping:
    """metadata.labels / annotations as a map; another JSON type is a located problem (never a crash later)."""
    value = meta.get(key)
    if value is None or type(value) is dict:
        return value or EMPTY
    problems.append(Problem(BAD_OBJECT, f"metadata.{key}: expected an object, got {type(value).__name__}"))
    return EMPTY


def gang_name(name, meta: Mapping, uid) -> str:
    """A gang workload's gang identity: its name, else a stand-in for the name the API server will generate.

    A `generateName` object has no name offline (lint, eval) nor at the admission of its
    CREATE (`request.name` is empty, the name is made after the mutating webhooks); its
    gang rules must apply all the same, so the name never changes a decision. The stand-in
    carries the request's uid, so two objects of one `generateName` are not taken for one gang.
    """
    if type(name) is str and name:
        return name
    prefix = meta.get("generateName")
    prefix = prefix if type(prefix) is str else ""
    return f"{prefix}<{uid[:8]}>" if type(uid) is str and uid else f"{prefix}<generated>"


def workload_subject(obj: dict, reader: str, kind: str, snapshot, r: tuple, problems: list) -> Workload:
    """The subject of a workload object; `r` = normalize's request tuple (operation, name, namespace, ...)."""
    meta = obj.get("metadata") if type(obj.get("metadata")) is dict else EMPTY
    ns = r[2] or meta.get("namespace") or "default"
    sets, read = _sets(obj, reader, snapshot, problems, ns)
    pods = sum(ps.count for ps in sets)
    total = _total(sets)
    asking = [ps for ps in sets if ps.gpus and ps.count]
    gpus = max((ps.gpus for ps in asking), default=0)
    largest = next((ps for ps in asking if ps.gpus == gpus), None)
    fractions = {ps.fraction for ps in asking if ps.fraction is not None}
    fraction = largest.fraction if largest is not None and largest.fraction is not None else (min(fractions) if fractions else None)
    # Per pod over ALL pods (GPU-less ones too), so quota's `gpu_memory × pods` is the sets' sum; the engine
    # completes it from the models when a template asks no memory (`workload_memory`).
    memory = None
    if asking and all(ps.gpu_memory for ps in asking):
        memory = ceil_div(sum(ps.count * ps.gpu_memory for ps in asking), pods)
    products = {ps.gpu_product for ps in asking if ps.gpu_product}
    product = products.pop() if len(products) == 1 else None
    privileged = host_path = host_network = False
    required = preferred = pc = None
    for t in read.templates:
        spec = t.pod["spec"]
        p, h, n = escalations(spec)
        privileged, host_path, host_network = privileged or p, host_path or h, host_network or n
        ann = t.pod["metadata"].get("annotations")
        if type(ann) is dict and ann:
            req, pref = pod_topology(ann)
            required, preferred = required or req, preferred or pref
        if pc is None and type(spec.get("priorityClassName")) is str and spec["priorityClassName"]:
            pc = spec["priorityClassName"]
    required = read.exclusive or required
    priority = None
    if pc and snapshot is not None:
        cls = snapshot.priority_class(pc)
        if cls is not None and type(cls.get("value")) is int:
            priority = cls["value"]
    gang = minimum = None
    if (kind in GANG_KINDS or reader in GANG_READERS) and pods:
        minimum = sum(ps.min_count if ps.min_count is not None else ps.count for ps in sets) or None
        gang = gang_name(r[1], meta, r[8]) if minimum is not None else None
    added = None
    old = r[10]
    if r[0] == "UPDATE" and type(old) is dict:
        old_sets, old_read = _sets(old, reader, snapshot, None, ns)
        if old_read.suspended and not read.suspended:
            added = total  # Kueue's admission: the whole workload starts now
        else:
            added = max(0, total - _total(old_sets)) if not read.suspended else 0
    w = make_workload(
        kind, r[0], r[1], ns, snapshot.namespace_labels(ns) if snapshot is not None else EMPTY,
        _string_map(meta, "labels", problems), _string_map(meta, "annotations", problems), r[3], r[4], r[5], priority, pc,
        pods, gpus, total, fraction, memory, product, None,
        gang, minimum, required, preferred, False, privileged, host_path, host_network,
        r[6], r[7], r[8], r[9], tuple(sets), tuple(problems) if problems else (), obj, r[10],
        read.suspended, added, tuple(t.spec_path for t in read.templates),
    )
    return w
