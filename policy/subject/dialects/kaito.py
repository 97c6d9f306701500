"""KAITO Workspace (`kaito.sh/v1alpha1`, `v1beta1`) as the pod sets its controller will run.

A Workspace has no pod template for a preset: KAITO sizes each pod to the GPUs of one node
of `resource.instanceType` (or, without one, of the nodes `resource.labelSelector` picks),
so the demand is read from the cluster state's Nodes. When no node tells, the GPUs per
pod are not known: an `UnknownInstanceType` problem names the type (or the selector),
never a silent zero. Field names as in kaito-project/kaito api/v1beta1/workspace_types.go
(v0.12.0); docs/dialects.md has the table.
"""

from __future__ import annotations

from dataclasses import dataclass
from collections.abc import Mapping

from policy.subject.model import Problem

from . import shape
from .common import EMPTY, MALFORMED, UNKNOWN_VALUE, Bad, whole_count
from .gpu_whole import MIG_PREFIX
from .product import PRODUCT_LABEL

INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
UNKNOWN_TYPE = "UnknownInstanceType"
GPU = "nvidia.com/gpu"  # the only device resource KAITO asks for (besides MIG slices)
# Labels KAITO keeps for its own nodes and ignores in a selector (api/v1beta1/labels.go reservedSelectorLabelKeys).
RESERVED_LABELS = frozenset({
    "kaito.sh/workspace", "kaito.sh/ragengine", "kaito.sh/workspacenamespace", "kaito.sh/ragenginenamespace",
    "karpenter.kaito.sh/workspace-name", "karpenter.kaito.sh/workspace-namespace",
    "karpenter.kaito.sh/inferenceset", "karpenter.kaito.sh/inferenceset-namespace",
})


@dataclass(frozen=True, slots=True)
class WorkspaceSet:
    """One pod set of a Workspace: `count` pods shaped like `pod`; `spec_path` is None when the object holds no template."""

    name: str
    count: int
    pod: Mapping
    spec_path: tuple[str, ...] | None
    where: str  # where a demand problem of the set points in the object


def _count(value, default: int, path: str, problems: list, least: int = 0) -> int:
    if value is None:
        return default
    if type(value) is int and value >= least:
        return value
    problems.append(Problem(MALFORMED, f"{path}: {value!r} is not a whole number >= {least}"))
    return default


def _text(value, path: str, problems: list) -> str:
    if value is None or type(value) is str:
        return value or ""
    problems.append(shape.wrong(path, "a string", value))
    return ""


def selector_labels(resource: Mapping, problems: list) -> dict[str, str]:
    """`resource.labelSelector.matchLabels` without KAITO's reserved keys (KAITO pins its pods to these labels)."""
    sel = shape.mapping(resource.get("labelSelector"), "resource.labelSelector", problems)
    labels = shape.string_map(sel.get("matchLabels"), "resource.labelSelector.matchLabels", problems)
    return {k: v for k, v in labels.items() if k not in RESERVED_LABELS}


def node_gpus(node: Mapping) -> int:
    """Whole GPUs a Node offers: `status.allocatable[nvidia.com/gpu]`, else its capacity; 0 when unreadable."""
    status = node.get("status") if type(node.get("status")) is dict else EMPTY
    for key in ("allocatable", "capacity"):
        res = status.get(key)
        if type(res) is dict and res.get(GPU) is not None:
            try:
                return whole_count(res[GPU], GPU)
            except (Bad, ValueError):
                return 0
    return 0


def node_shape(snapshot, instance_type: str, labels: Mapping[str, str]) -> tuple[int, str | None]:
    """(GPUs per node, common product) of the nodes of `instance_type` (else of the nodes matching `labels`); (0, None) when none tells.

    The largest count wins when nodes disagree: the pod asks for a whole node's GPUs.
    """
    gpus, products = 0, set()
    for node in snapshot.nodes() if snapshot is not None else ():
        meta = node.get("metadata") if type(node.get("metadata")) is dict else EMPTY
        node_labels = meta.get("labels") if type(meta.get("labels")) is dict else EMPTY
        if instance_type:
            if node_labels.get(INSTANCE_TYPE_LABEL) != instance_type:
                continue
        elif any(node_labels.get(k) != v for k, v in labels.items()):
            continue
        n = node_gpus(node)
        if n > 0:
            gpus = max(gpus, n)
            products.add(node_labels.get(PRODUCT_LABEL) if type(node_labels.get(PRODUCT_LABEL)) is str else None)
    product = next(iter(products)) if len(products) == 1 else None
    return gpus, product


def _per_node(resource: Mapping, instance_type: str, labels: dict, what: str, snapshot, problems: list,
              partition: bool = True) -> tuple[dict, dict]:
    """(container resources, node selector) of one pod: a partition's slice or GPUs, else one node's GPUs."""
    selector = dict(labels)
    part = shape.mapping(resource.get("partition"), "resource.partition", problems) if partition else EMPTY
    mode = _text(part.get("mode"), "resource.partition.mode", problems) if part else ""
    if mode == "mig":
        profile = _text(part.get("profile"), "resource.partition.profile", problems)
        if profile:
            return {MIG_PREFIX + profile: "1"}, selector  # one slice; the MIG reader sizes it
        problems.append(Problem(MALFORMED, "resource.partition.profile: required for mode mig (the MIG profile, e.g. 1g.10gb)"))
    elif mode == "accelerator":
        n = _count(part.get("count"), 0, "resource.partition.count", problems, least=1)
        if n:
            return {GPU: str(n)}, selector
        if part.get("count") is None:
            problems.append(Problem(MALFORMED, "resource.partition.count: required for mode accelerator (whole GPUs per pod)"))
    elif mode:
        problems.append(Problem(UNKNOWN_VALUE, f"resource.partition.mode: {mode!r} is not mig or accelerator; a whole node's GPUs are counted"))
    gpus, product = node_shape(snapshot, instance_type, labels)
    if not gpus:
        if instance_type:
            field_, whom = f"resource.instanceType {instance_type}", f"labelled {INSTANCE_TYPE_LABEL}={instance_type}"
        else:
            shown = ",".join(f"{k}={v}" for k, v in sorted(labels.items())) or "{}"
            field_, whom = f"resource.labelSelector {shown}", "matching it"
        # Said first, as an admission warning keeps 120 characters: what is unknown, then why.
        problems.append(Problem(UNKNOWN_TYPE, f"{field_}: GPUs per node unknown, {what} not counted (no node in the cluster "
                                              f"state {whom} reports {GPU}; KAITO's pods are judged when created)"))
        return {}, selector
    if product and PRODUCT_LABEL not in selector:
        selector[PRODUCT_LABEL] = product
    return {GPU: str(gpus)}, selector


def _pod(ns: str | None, resources: dict, selector: dict, name: str) -> dict:
    container = {"name": name, "resources": {"limits": resources}} if resources else {"name": name}
    spec: dict = {"containers": [container]}
    if selector:
        spec["nodeSelector"] = selector
    return {"kind": "Pod", "metadata": {"namespace": ns} if ns else {}, "spec": spec}


def _template_pod(template, ns: str | None, labels: dict, problems: list) -> dict:
    """The user's pod template, pinned to the selector's labels as KAITO pins it (a template's own selector wins)."""
    t = shape.mapping(template, "inference.template", problems)
    meta = dict(shape.mapping(t.get("metadata"), "inference.template.metadata", problems))
    spec = dict(shape.mapping(t.get("spec"), "inference.template.spec", problems))
    if ns and "namespace" not in meta:
        meta["namespace"] = ns
    if labels:
        own = spec.get("nodeSelector")
        spec["nodeSelector"] = {**labels, **own} if type(own) is dict else own if own is not None else dict(labels)
    return {"kind": "Pod", "metadata": meta, "spec": spec}


def read_workspace(obj: Mapping, ns: str | None, snapshot, problems: list) -> list[WorkspaceSet]:
    """The pod sets of a Workspace: `inference` (count pods, or the controller's `status.targetNodeCount`) and `tuning` (one pod)."""
    resource = shape.mapping(obj.get("resource"), "resource", problems)
    count = _count(resource.get("count"), 1, "resource.count", problems)  # deprecated in v1beta1, defaulted to 1
    instance_type = _text(resource.get("instanceType"), "resource.instanceType", problems)
    labels = selector_labels(resource, problems)
    status = obj.get("status") if type(obj.get("status")) is dict else EMPTY
    target = status.get("targetNodeCount")
    out: list[WorkspaceSet] = []
    inference = obj.get("inference")
    if inference is not None:
        inference = shape.mapping(inference, "inference", problems)
        if inference.get("template") is not None:  # a custom pod template: count replicas of it, as KAITO's StatefulSet runs
            pod = _template_pod(inference["template"], ns, labels, problems)
            out.append(WorkspaceSet("inference", count, pod, ("inference", "template", "spec"), "inference.template.spec"))
        elif inference.get("preset") is not None:
            shape.mapping(inference.get("preset"), "inference.preset", problems)
            # The controller may size a preset from the model (its estimate lands in status.targetNodeCount, then stays).
            nodes = target if type(target) is int and target > 0 else count
            what = f"{nodes} inference pod{'s' if nodes != 1 else ''}"
            res, selector = _per_node(resource, instance_type, labels, what, snapshot, problems)
            out.append(WorkspaceSet("inference", nodes, _pod(ns, res, selector, "inference"), None, "resource"))
    tuning = obj.get("tuning")
    if tuning is not None:
        shape.mapping(tuning, "tuning", problems)
        # A tuning Job is one pod asking for one node's GPUs (KAITO reads them from the instance type, no partition).
        what = "tuning pod"
        res, selector = _per_node(resource, instance_type, labels, what, snapshot, problems, partition=False)
        out.append(WorkspaceSet("tuning", 1, _pod(ns, res, selector, "tuning"), None, "resource"))
    return out
