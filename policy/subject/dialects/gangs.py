"""Gang dialects: group objects (coscheduling, Volcano, KAI, upstream Workload/PodGroup, Kueue Workload) and pod references."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from policy.subject.model import PodSet, Problem

from . import shape
from .common import BAD_OBJECT, EMPTY, MALFORMED, whole_count

# apiVersion group -> dialect family of a `PodGroup`
PODGROUP_FAMILIES = {
    "scheduling.x-k8s.io": "coscheduling",
    "scheduling.sigs.k8s.io": "coscheduling",  # scheduler-plugins before v0.28
    "scheduling.volcano.sh": "volcano",
    "scheduling.run.ai": "kai",
    "scheduling.k8s.io": "podgroup",  # upstream v1alpha2+ (1.36)
}
WORKLOAD_FAMILIES = {"scheduling.k8s.io": "workload", "kueue.x-k8s.io": "kueue"}
# Upstream CompositePodGroup (scheduling.k8s.io v1alpha3, 1.37 development): a group of child groups, made from a
# Workload's compositePodGroupTemplates; its pods are its children's, so it states no pod count of its own.
COMPOSITE_FAMILIES = {"scheduling.k8s.io": "composite"}

# Pod-side references: label/annotation -> family of the group object it names.
COSCHEDULING_LABEL = "scheduling.x-k8s.io/pod-group"
COSCHEDULING_LEGACY_LABEL = "pod-group.scheduling.sigs.k8s.io"  # scheduler-plugins before v0.28
VOLCANO_ANNOTATION = "scheduling.k8s.io/group-name"
VOLCANO_ANNOTATION_ALT = "scheduling.volcano.sh/group-name"  # Volcano's own key; the scheduler reads either
KAI_KEY = "pod-group-name"
KUEUE_GROUP_LABEL = "kueue.x-k8s.io/pod-group-name"
KUEUE_TOTAL_ANNOTATION = "kueue.x-k8s.io/pod-group-total-count"


@dataclass(frozen=True, slots=True)
class GroupInfo:
    """A gang object read into dialect-free terms: its minimum, topology request and pod sets."""

    family: str  # coscheduling | volcano | kai | podgroup | workload | kueue
    kind: str
    namespace: str
    name: str
    min_members: int | None = None
    topology_required: str | None = None
    topology_preferred: str | None = None
    pod_sets: tuple[PodSet, ...] = ()
    min_gpus: int | None = None  # milli-GPU the minimum group holds: spec.minResources, or Kueue pod sets' demand
    problems: tuple[Problem, ...] = ()
    obj: Mapping | None = field(default=None, compare=False, repr=False)
    min_groups: int | None = None  # a CompositePodGroup's gang.minGroupCount: child groups, not pods
    parent: str | None = None  # upstream PodGroup / CompositePodGroup: spec.parentCompositePodGroupName


def group_family(api_version: str, kind: str) -> str | None:
    """The gang family of an object, or None when it is not a group object."""
    group = api_version.split("/", 1)[0] if "/" in api_version else ""
    if kind == "PodGroup":
        return PODGROUP_FAMILIES.get(group)
    if kind == "Workload":
        return WORKLOAD_FAMILIES.get(group)
    if kind == "CompositePodGroup":
        return COMPOSITE_FAMILIES.get(group)
    return None


def _count(value, path: str, problems: list, minimum: int = 1) -> int | None:
    """A whole member count, or None plus a problem."""
    if value is None:
        return None
    if type(value) is int and value >= minimum:
        return value
    if isinstance(value, str) and value.isascii() and value.isdigit() and int(value) >= minimum:
        return int(value)
    problems.append(Problem(MALFORMED, f"{path}: {value!r} is not a whole number >= {minimum}"))
    return None


def _gang_min(policy, path: str, problems: list) -> int | None:
    """`gang.minCount` of an upstream scheduling policy (None for `basic`)."""
    gang = shape.mapping(policy, path, problems).get("gang")
    if gang is None:
        return None
    return _count(shape.mapping(gang, f"{path}.gang", problems).get("minCount"), f"{path}.gang.minCount", problems)


def _topology_key(constraints, path: str, problems: list) -> str | None:
    """`schedulingConstraints.topology[0].key` (one constraint allowed as of 1.36)."""
    topo = shape.mapping(constraints, path, problems).get("topology")
    for i, t in enumerate(shape.items(topo, f"{path}.topology", problems)):
        return _text(t.get("key"), f"{path}.topology[{i}].key", problems)
    return None


def _text(value, path: str, problems: list) -> str | None:
    """A string field (a topology level or label key); anything else is a problem."""
    if value is None or type(value) is str:
        return value or None
    problems.append(shape.wrong(path, "a string", value))
    return None


def _min_gpus(spec: Mapping, problems: list) -> int | None:
    """Milli-GPU of `spec.minResources` (coscheduling, Volcano), when it names a GPU resource."""
    res = spec.get("minResources")
    if type(res) is not dict:
        shape.mapping(res, "spec.minResources", problems)
        return None
    total = None
    for key in res:
        if not shape.valid_resource_name(key):
            problems.append(shape.bad_resource_name(key, f"spec.minResources[{key}]"))
    for key in ("nvidia.com/gpu", "amd.com/gpu"):
        if key in res:
            try:
                total = (total or 0) + whole_count(res[key], f"spec.minResources[{key}]") * 1000
            except ValueError as exc:
                problems.append(Problem(MALFORMED, str(exc)))
    return total


# v1beta1 (1.37): a tree of CompositePodGroupTemplates at most this deep (WorkloadMaxTreeDepth).
WORKLOAD_MAX_DEPTH = 4


def _upstream_workload(spec: Mapping, pod_sets: list, problems: list) -> tuple[int | None, str | None]:
    """(minimum, topology key) of an upstream Workload; its pod group templates are appended to `pod_sets`.

    v1alpha1 (1.35): `spec.podGroups[].policy`; v1alpha2 (1.36) and v1beta1 (1.37):
    `spec.podGroupTemplates[].schedulingPolicy`; v1beta1 may instead nest them in
    `spec.compositePodGroupTemplates` (exactly one of the two is set).
    """
    key = "podGroups" if "podGroups" in spec and not spec.get("podGroupTemplates") else "podGroupTemplates"
    flat, composite = spec.get(key), spec.get("compositePodGroupTemplates")
    if flat and composite:  # the API server refuses both; read both rather than drop one (fail closed)
        problems.append(Problem(BAD_OBJECT, f"spec: exactly one of {key} and compositePodGroupTemplates may be set, both are"))
    minima: list[int] = []
    required = _templates(flat, f"spec.{key}", "", pod_sets, minima, problems)
    required = _composites(composite, "spec.compositePodGroupTemplates", "", 1, pod_sets, minima, problems) or required
    return sum(minima) or None, required


def _templates(groups, path: str, prefix: str, pod_sets: list, minima: list, problems: list) -> str | None:
    """Each PodGroupTemplate's gang minimum (0 for `basic`) into `minima`, its pod set into `pod_sets`; the first topology key."""
    required = None
    for i, g in enumerate(shape.items(groups, path, problems)):
        at = f"{path}[{i}]"
        name = "policy" if "policy" in g and "schedulingPolicy" not in g else "schedulingPolicy"  # v1alpha1 named it `policy`
        n = _gang_min(g.get(name), f"{at}.{name}", problems) or 0
        pod_sets.append(PodSet(prefix + str(g.get("name") or i), n, 0))
        minima.append(n)
        required = required or _topology_key(g.get("schedulingConstraints"), f"{at}.schedulingConstraints", problems)
    return required


def _composites(groups, path: str, prefix: str, depth: int, pod_sets: list, minima: list, problems: list) -> str | None:
    """Each CompositePodGroupTemplate's minimum into `minima` (v1beta1): a gang composite needs its `minGroupCount` children that need the fewest pods; a basic one all of them, as a flat list of templates is summed."""
    if groups is not None and depth > WORKLOAD_MAX_DEPTH:
        problems.append(Problem(BAD_OBJECT, f"{path}: composite pod group templates nest deeper than {WORKLOAD_MAX_DEPTH} levels"))
        return None
    required = None
    for i, c in enumerate(shape.items(groups, path, problems)):
        at = f"{path}[{i}]"
        name = f"{prefix}{c.get('name') or i}/"  # leaf sets are named by their path: names are unique per list only
        children: list[int] = []
        req = _topology_key(c.get("schedulingConstraints"), f"{at}.schedulingConstraints", problems)
        inner = _templates(c.get("podGroupTemplates"), f"{at}.podGroupTemplates", name, pod_sets, children, problems)
        inner = _composites(c.get("compositePodGroupTemplates"), f"{at}.compositePodGroupTemplates", name, depth + 1,
                            pod_sets, children, problems) or inner
        req = req or inner  # the composite's own domain holds all its pods: it wins over a child's
        gang = shape.mapping(c.get("schedulingPolicy"), f"{at}.schedulingPolicy", problems).get("gang")
        k = None
        if gang is not None:
            k = _count(shape.mapping(gang, f"{at}.schedulingPolicy.gang", problems).get("minGroupCount"),
                       f"{at}.schedulingPolicy.gang.minGroupCount", problems)
        minima.append(sum(sorted(children)[:k]) if k is not None else sum(children))
        required = required or req
    return required


def read_group(obj: Mapping, family: str, pod_demand=None) -> GroupInfo:
    """A group object of `family` as a GroupInfo; bad fields become problems, never exceptions."""
    problems: list[Problem] = []
    meta = obj.get("metadata") if type(obj.get("metadata")) is dict else EMPTY  # reported by normalization
    spec = shape.mapping(obj.get("spec"), "spec", problems)
    ns = meta.get("namespace") or "default"
    name = meta.get("name") or ""
    kind = obj.get("kind") or ""
    minimum = required = preferred = None
    pod_sets: list[PodSet] = []
    min_gpus = min_groups = parent = None
    if family in ("coscheduling", "volcano", "kai"):
        minimum = _count(spec.get("minMember"), "spec.minMember", problems)
        min_gpus = _min_gpus(spec, problems)
        if family == "kai":
            tc = shape.mapping(spec.get("topologyConstraint"), "spec.topologyConstraint", problems)
            required = _text(tc.get("requiredTopologyLevel"), "spec.topologyConstraint.requiredTopologyLevel", problems)
            preferred = _text(tc.get("preferredTopologyLevel"), "spec.topologyConstraint.preferredTopologyLevel", problems)
            for i, sg in enumerate(shape.items(spec.get("subGroups"), "spec.subGroups", problems)):
                n = _count(sg.get("minMember"), f"spec.subGroups[{i}].minMember", problems)
                pod_sets.append(PodSet(str(sg.get("name") or i), n or 0, 0))
        elif family == "volcano":
            for task, n in shape.mapping(spec.get("minTaskMember"), "spec.minTaskMember", problems).items():
                c = _count(n, f"spec.minTaskMember[{task}]", problems, 0)
                pod_sets.append(PodSet(str(task), c or 0, 0))
    elif family == "podgroup":
        minimum = _gang_min(spec.get("schedulingPolicy"), "spec.schedulingPolicy", problems)
        required = _topology_key(spec.get("schedulingConstraints"), "spec.schedulingConstraints", problems)
        parent = _text(spec.get("parentCompositePodGroupName"), "spec.parentCompositePodGroupName", problems)
    elif family == "composite":
        min_groups = _composite_policy(spec.get("schedulingPolicy"), "spec.schedulingPolicy", problems)
        required = _topology_key(spec.get("schedulingConstraints"), "spec.schedulingConstraints", problems)
        parent = _text(spec.get("parentCompositePodGroupName"), "spec.parentCompositePodGroupName", problems)
    elif family == "workload":
        minimum, required = _upstream_workload(spec, pod_sets, problems)
    elif family == "kueue":
        total = 0
        min_gpus = 0
        for i, ps in enumerate(shape.items(spec.get("podSets"), "spec.podSets", problems)):
            path = f"spec.podSets[{i}]"
            count = _count(ps.get("count", 1), f"{path}.count", problems, 0) or 0
            least = _count(ps.get("minCount"), f"{path}.minCount", problems, 0)
            gpus = fraction = memory = product = None
            tmpl = shape.mapping(ps.get("template"), f"{path}.template", problems) or None
            if pod_demand is not None and tmpl is not None:
                d = pod_demand({"metadata": tmpl.get("metadata") or {"namespace": ns}, "spec": tmpl.get("spec") or {}})
                gpus, fraction, memory, product = d.gpus, d.fraction, d.gpu_memory, d.gpu_product
            pod_sets.append(PodSet(str(ps.get("name") or i), count, gpus or 0, fraction, memory, product, least))
            total += least if least is not None else count
            min_gpus += (least if least is not None else count) * (gpus or 0)
            tr = shape.mapping(ps.get("topologyRequest"), f"{path}.topologyRequest", problems)
            required = required or _text(tr.get("required"), f"{path}.topologyRequest.required", problems)
            preferred = preferred or _text(tr.get("preferred"), f"{path}.topologyRequest.preferred", problems)
        minimum = total or None
    return GroupInfo(family, kind, ns, name, minimum, required, preferred, tuple(pod_sets), min_gpus, tuple(problems), obj, min_groups, parent)


def _composite_policy(policy, path: str, problems: list) -> int | None:
    """`gang.minGroupCount` of a CompositePodGroup's scheduling policy (None for `basic`); exactly one of the two must be set."""
    pol = shape.mapping(policy, path, problems)
    gang, basic = pol.get("gang"), pol.get("basic")
    if (gang is None) == (basic is None):
        problems.append(Problem(BAD_OBJECT, f"{path}: exactly one of basic and gang must be set, {'both are' if gang is not None else 'neither is'}"))
    if gang is None:
        return None
    return _count(shape.mapping(gang, f"{path}.gang", problems).get("minGroupCount"), f"{path}.gang.minGroupCount", problems)


def pod_group_ref(labels: Mapping, annotations: Mapping, spec: Mapping) -> tuple[str, str, str | None] | None:
    """(family, group name, pod group within a Workload or None) a pod points at, or None."""
    if "schedulingGroup" in spec:
        sg = spec["schedulingGroup"]
        if type(sg) is dict and sg.get("podGroupName"):
            return "podgroup", sg["podGroupName"], None
    if "workloadRef" in spec:
        ref = spec["workloadRef"]
        if type(ref) is dict and ref.get("name"):
            return "workload", ref["name"], ref.get("podGroup")
    if labels:
        group = labels.get(COSCHEDULING_LABEL) or labels.get(COSCHEDULING_LEGACY_LABEL)
        if group:
            return "coscheduling", group, None
    if annotations:
        group = annotations.get(VOLCANO_ANNOTATION) or annotations.get(VOLCANO_ANNOTATION_ALT)
        if group:
            return "volcano", group, None
    kai = (annotations.get(KAI_KEY) if annotations else None) or (labels.get(KAI_KEY) if labels else None)
    if kai:
        return "kai", kai, None
    if labels and labels.get(KUEUE_GROUP_LABEL):
        return "kueue-pod-group", labels[KUEUE_GROUP_LABEL], None
    return None
