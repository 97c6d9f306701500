"""What a workload *says* about its GPUs, beyond what it asks: the subject fields of the workload-expression rules.

`controller`, `gpu_pods`, `gang_scheduler`, `gpu_memory_requested`, `memory_share` and
`gpu_limit_mismatches` (docs/language.md, "The subject"). They tell a stated need from
an implied one: a pod pinned to H100 is *implied* 80Gi, a pod asking HAMi `gpumem`
*requested* it; a JobSet is judged as a gang, but only a queue or a scheduler's pod
group makes its pods start together. Readers are pure and never raise on odd shapes
(a wrong type reads as "not stated"; the demand readers already report it).

They cost a few microseconds a request, so normalization leaves them at their defaults
and the engine fills them (`express`) only for a policy set that reads one of them
(`reads_expression`): the admission budget of every other set is untouched.
"""

from __future__ import annotations

from typing import Mapping

from lang import ir
from policy.subject.dialects.common import EMPTY, MIB, quantity
from policy.subject.dialects.gangs import group_family, pod_group_ref
from policy.subject.dialects.hami import GPUCORES, GPUMEM, GPUMEM_PCT
from policy.subject.dialects.product import MEMORY_LABEL
from policy.subject.dialects.workloads import GANG_KINDS
from policy.subject.model import Workload

FIELDS = ("controller", "gpu_pods", "gang_scheduler", "gpu_memory_requested", "memory_share", "gpu_limit_mismatches")
_SETATTR = object.__setattr__  # the subject was just built for this request: filled in place, as the engine's own fields

_GPU_PREFIXES = ("nvidia.com/", "amd.com/")
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
KAI_SCHEDULER = "kai-scheduler"
VOLCANO_SCHEDULER = "volcano"
# A pod-group reference's family -> the `gang_scheduler` value (upstream Workload and PodGroup are one API).
SCHEDULERS = {
    "coscheduling": "coscheduling", "volcano": "volcano", "kai": "kai", "kueue-pod-group": "kueue",
    "kueue": "kueue", "podgroup": "upstream", "workload": "upstream",
}
# Labels controllers put on the pods they make: label -> the controller kind (checked in order: the top-most first).
CONTROLLER_LABELS = (
    ("jobset.sigs.k8s.io/jobset-name", "JobSet"),
    ("leaderworkerset.sigs.k8s.io/name", "LeaderWorkerSet"),
    ("ray.io/cluster", "RayCluster"),
)
KUBEFLOW_JOB_LABEL, KUBEFLOW_OPERATOR = "training.kubeflow.org/job-name", "training.kubeflow.org/operator-name"
# Kinds whose pods Kueue admits one by one (its pod integration), so a queue label makes no gang of them.
_PODWISE_KUEUE = frozenset({"Deployment", "ReplicaSet"})


def _map(v) -> Mapping:
    return v if type(v) is dict else EMPTY


def _list(v) -> list:
    return v if type(v) is list else []


def limit_mismatches(spec: Mapping) -> int:
    """GPU resource entries (`nvidia.com/*`, `amd.com/*`) of all containers whose request is unlimited or differs from its limit."""
    n = 0
    for key in ("containers", "initContainers"):
        for c in _list(spec.get(key)):
            res = _map(_map(c).get("resources"))
            requests = res.get("requests")
            if type(requests) is not dict or not requests:
                continue  # limits alone imply equal requests (API defaulting)
            limits = _map(res.get("limits"))
            for name, value in requests.items():
                if type(name) is str and name.startswith(_GPU_PREFIXES):
                    if name not in limits or _differ(value, limits[name]):
                        n += 1
    return n


def _differ(a, b) -> bool:
    if a == b:
        return False
    try:
        return quantity(a) != quantity(b)
    except ValueError:
        return True  # an unreadable side cannot be shown equal (the demand readers name the value)


def compute_only(spec: Mapping) -> bool:
    """Whether some container shares a GPU by HAMi cores alone (`gpucores` without `gpumem` or `gpumem-percentage`)."""
    for key in ("containers", "initContainers"):
        for c in _list(spec.get(key)):
            res = _map(_map(c).get("resources"))
            for table in (_map(res.get("limits")), _map(res.get("requests"))):
                if GPUCORES in table and GPUMEM not in table and GPUMEM_PCT not in table:
                    return True
    return False


def node_memory_floor(spec: Mapping) -> int | None:
    """Bytes per device the pod requires of its node's GPUs: `nvidia.com/gpu.memory` (MiB) in nodeSelector or required affinity.

    nodeSelector names an exact size; a required node affinity term `In` its smallest
    value, `Gt N` N+1 MiB (expressions of one term all hold: the largest floor; terms
    are alternatives: the smallest, and a term with no floor means none).
    """
    floors = []
    exact = _mib(_map(spec.get("nodeSelector")).get(MEMORY_LABEL))
    if exact is not None:
        floors.append(exact)
    node = _map(_map(spec.get("affinity")).get("nodeAffinity"))
    terms = _list(_map(node.get("requiredDuringSchedulingIgnoredDuringExecution")).get("nodeSelectorTerms"))
    best = None
    for term in terms:
        floor = None
        for e in _list(_map(term).get("matchExpressions")):
            e = _map(e)
            if e.get("key") != MEMORY_LABEL:
                continue
            values = [m for m in (_mib(v) for v in _list(e.get("values"))) if m is not None]
            if not values:
                continue
            f = min(values) if e.get("operator") == "In" else max(values) + MIB if e.get("operator") == "Gt" else None
            if f is not None:
                floor = f if floor is None else max(floor, f)
        if floor is None:
            best = None
            break
        best = floor if best is None else min(best, floor)
    if best is not None:
        floors.append(best)
    return max(floors) if floors else None


def _mib(v) -> int | None:
    if type(v) is str and v.isascii() and v.isdigit():
        return int(v) * MIB
    return None


def requested_memory(podset, spec: Mapping) -> int | None:
    """GPU memory per pod the pod states: its share's own memory, else its node floor × its whole devices."""
    if podset.gpu_memory is not None:
        return podset.gpu_memory
    if podset.fraction is None and podset.gpus and podset.gpus % 1000 == 0:
        floor = node_memory_floor(spec)
        if floor is not None:
            return floor * (podset.gpus // 1000)
    return None


def pod_controller(labels: Mapping, meta: Mapping) -> str | None:
    """The workload kind that made a Pod: controller labels (top-most first), else its controlling ownerReference."""
    if labels:
        for label, kind in CONTROLLER_LABELS:
            if labels.get(label):
                return kind
        if labels.get(KUBEFLOW_JOB_LABEL) and labels.get(KUBEFLOW_OPERATOR, "pytorchjob-controller") == "pytorchjob-controller":
            return "PyTorchJob"
    for ref in _list(meta.get("ownerReferences")):
        ref = _map(ref)
        if ref.get("controller") is True and type(ref.get("kind")) is str:
            kind = ref["kind"]
            h = labels.get("pod-template-hash") if labels else None
            if kind == "ReplicaSet" and type(h) is str and h and str(ref.get("name", "")).endswith("-" + h):
                return "Deployment"  # a Deployment's ReplicaSet is named `deployment-hash`
            return kind
    return None


def pod_fields(podset, meta: Mapping, spec: Mapping, labels: Mapping, ref) -> dict:
    """The expression fields of a Pod, by name."""
    shared = podset.fraction is not None
    return {
        "controller": pod_controller(labels, meta),
        "gpu_pods": 1 if podset.gpus else 0,
        "gang_scheduler": SCHEDULERS.get(ref[0]) if ref is not None else None,
        "gpu_memory_requested": requested_memory(podset, spec) if podset.gpus else None,
        "memory_share": shared and not compute_only(spec),
        "gpu_limit_mismatches": limit_mismatches(spec),
    }


def _template_scheduler(kind: str, meta: Mapping, spec: Mapping) -> str | None:
    ref = pod_group_ref(_map(meta.get("labels")), _map(meta.get("annotations")), spec)
    if ref is not None:
        return SCHEDULERS.get(ref[0])
    if spec.get("schedulerName") == KAI_SCHEDULER and kind in GANG_KINDS:
        return "kai"  # KAI's pod grouper makes one PodGroup of such a workload's pods
    if spec.get("schedulerName") == VOLCANO_SCHEDULER and kind == "LeaderWorkerSet":
        return "volcano"  # LWS makes one Volcano PodGroup per group for pods Volcano schedules
    return None


def _at(obj, path: tuple[str, ...]) -> Mapping:
    node = obj
    for part in path:
        if type(node) is list and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            node = _map(node).get(part)
    return _map(node)


def workload_fields(kind: str, meta: Mapping, templates, sets) -> dict:
    """The expression fields of a workload object; `templates` = (template metadata, pod spec) per pod set, in order.

    `controller` is the kind that made it (a Deployment's ReplicaSet, a JobSet's Job), else its own.
    """
    labels = _map(meta.get("labels"))
    gpu = [(spec, ps) for (_, spec), ps in zip(templates, sets) if ps.gpus and ps.count]
    scheduler = "kueue" if labels and labels.get(KUEUE_QUEUE_LABEL) and kind not in _PODWISE_KUEUE else None
    if scheduler is None:
        scheduler = next((s for s in (_template_scheduler(kind, m, spec) for m, spec in templates) if s), None)
    stated = [requested_memory(ps, spec) for spec, ps in gpu]
    sharing = [spec for spec, ps in gpu if ps.fraction is not None]
    return {
        "controller": pod_controller(labels, meta) or kind,
        "gpu_pods": sum(ps.count for _, ps in gpu),
        "gang_scheduler": scheduler,
        "gpu_memory_requested": min(stated) if stated and None not in stated else None,
        "memory_share": bool(sharing) and not any(compute_only(spec) for spec in sharing),
        "gpu_limit_mismatches": sum(limit_mismatches(spec) for _, spec in templates),
    }


def _no_template(obj: Mapping) -> tuple[Mapping, Mapping]:
    """A TrainJob's per-node resources (its pod template lives in the runtime) as a one-container pod spec."""
    res = _at(obj, ("spec", "trainer", "resourcesPerNode"))
    return EMPTY, {"containers": [{"resources": res}]} if res else EMPTY


def express(w: Workload) -> Workload:
    """Fill `w`'s expression fields in place from its object (a Pod, a workload object or a group object); `w` itself."""
    obj = w.obj
    if type(obj) is not dict:
        return w
    meta = _map(obj.get("metadata"))
    if w.kind == "Pod":
        if not w.pod_sets:
            return w
        spec = _map(obj.get("spec"))
        ref = pod_group_ref(w.labels, w.annotations, spec)
        values = pod_fields(w.pod_sets[0], meta, spec, w.labels, ref)
    elif w.template_paths:
        # A set with no template in the object (a TrainJob's, a RayJob's default submitter) is read from
        # `resourcesPerNode` only when it asks GPUs: a runtime's initializers must not repeat the nodes' asks.
        templates = [(_at(obj, p[:-1] + ("metadata",)), _at(obj, p)) if p else _no_template(obj) if ps.gpus else (EMPTY, EMPTY)
                     for p, ps in zip(w.template_paths, w.pod_sets)]
        values = workload_fields(w.kind, meta, templates, w.pod_sets)
    else:
        api = obj.get("apiVersion")
        family = group_family(api, w.kind) if type(api) is str else None
        if family is None:
            return w
        values = group_fields(family, w.pods, w.gpus)
    for name, value in values.items():
        _SETATTR(w, name, value)
    return w


def reads_expression(policy_set) -> bool:
    """Whether any block of a checked policy set reads an expression field (in a condition, a value or a message)."""
    wanted = frozenset(FIELDS)
    blocks = (*policy_set.quotas, *policy_set.fractions, *policy_set.gangs, *policy_set.agents, *policy_set.rules)
    return any(_reads(b, wanted) for b in blocks)


def _reads(node, wanted: frozenset) -> bool:
    if type(node) in (tuple, list):
        return any(_reads(n, wanted) for n in node)
    fields = getattr(type(node), "__dataclass_fields__", None)
    if fields is None:
        return False
    if isinstance(node, ir.Field):
        return node.name in wanted
    return any(_reads(getattr(node, f), wanted) for f in fields if f != "span")


def group_fields(family: str, pods: int, gpus: int) -> dict:
    """The expression fields of a group object (PodGroup, Workload): its family schedules its members together."""
    return {"gang_scheduler": SCHEDULERS.get(family), "gpu_pods": pods if gpus else 0}
