"""Where in a manifest a decision's reason points: a field path per reason, and a help line per code.

A normalization problem names its field in its message (`spec.containers[0].resources…: …`,
for workload objects behind `pod set NAME (TEMPLATE PATH): `); a block's finding is mapped
by a small table from its code to the field a person would change. Paths are tuples of
keys (list indexes as digit strings, like policy/patch.py); the caller finds as much of the
path as the manifest has.
"""

from __future__ import annotations

import re
from typing import Mapping

# Findings whose truth depends on cluster state (usage, nodes, groups already created): without a
# cluster snapshot `lint` reports them as notes, never as violations (docs/lint.md).
CLUSTER_CODES = frozenset({
    "QuotaExceeded", "QuotaModelExceeded", "QuotaMemoryExceeded",
    "GangUnplaceable", "GangNotYetPlaceable", "PlacementNotEvaluated",
    "FractionSharersExceeded", "PerGpuNotEvaluated",
    "MissingGroup", "WorkloadNotInClusterState",
})

QUOTA_CODES = frozenset({"QuotaExceeded", "QuotaModelExceeded", "QuotaMemoryExceeded"})


def needs_cluster(code: str, data: Mapping) -> bool:
    """Does this finding, decided against an empty cluster, depend on state the snapshot would give?

    A quota exceeded with nothing in use (`used` 0) holds whatever else runs: usage only
    adds and borrowing only shrinks, so the object alone is over. Everything else in
    CLUSTER_CODES needs the nodes, the usage or the group objects.
    """
    if code in QUOTA_CODES:
        return data.get("used") != 0
    return code in CLUSTER_CODES


_RESOURCE_CODES = frozenset({
    "QuotaExceeded", "QuotaModelExceeded", "QuotaMemoryExceeded", "QuotaModelNotAllowed",
    "FractionOutOfRange", "FractionMemoryUnknown", "FractionMemoryBelowFloor", "FractionModelNotAllowed",
    "FractionSharersExceeded", "PerGpuNotEvaluated", "NoNodeHolds",
})
_PLACEMENT_CODES = frozenset({"GangUnplaceable", "GangNotYetPlaceable", "GangModelNotAllowed", "PlacementNotEvaluated"})
_SUBJECT_CODES = _RESOURCE_CODES | _PLACEMENT_CODES | {"UnknownPriorityClass", "GangMinMembersMissing"}

HELP: Mapping[str, str] = {
    "NoNodeHolds": "ask for at most the GPUs of one node per pod (more pods, fewer GPUs each), or pin a model whose nodes are larger",
    "QuotaExceeded": "ask for fewer GPUs or replicas, or run in a namespace whose quota has room",
    "QuotaModelExceeded": "ask for fewer GPUs of this model, or another model the quota allows",
    "QuotaMemoryExceeded": "ask for less GPU memory, or fewer replicas",
    "QuotaModelNotAllowed": "select a GPU model the quota lists (nodeSelector nvidia.com/gpu.product)",
    "FractionOutOfRange": "request a GPU share inside the fraction's bounds",
    "FractionMemoryUnknown": "state the GPU memory the share needs (a GPU memory request or a known model)",
    "FractionMemoryBelowFloor": "request at least the fraction's GPU memory floor",
    "FractionModelNotAllowed": "share a GPU model the fraction block lists",
    "GangMinMembersMissing": "declare the gang minimum (the group's minMember, or the kind's own field)",
    "GangUnplaceable": "ask for fewer GPUs per domain, or a wider topology level",
    "GangModelNotAllowed": "select a GPU model the gang block lists",
    "UnknownPriorityClass": "name a priority class the policy declares",
    "RuleWouldSet": "`allot lint --fix` writes this value; the mutating webhook would set it at admission",
    "MalformedQuantity": "write a Kubernetes quantity: a number with an optional unit (1, 500m, 80Gi)",
}

_TOKEN = re.compile(r"([^.\[\]]+)|\[([^\]]*)\]")
_POD_SET = re.compile(r"^pod set .*? \(([^()]*)\): ")


def parse_dotted(text: str) -> tuple[str, ...] | None:
    """`spec.containers[0].resources.limits[nvidia.com/gpu]` -> its keys; None when it is not a path."""
    if not text or text[0] == ".":
        return None
    out: list[str] = []
    pos = 0
    while pos < len(text):
        if text[pos] == ".":
            pos += 1
        m = _TOKEN.match(text, pos)
        if m is None:
            return None
        out.append(m.group(1) if m.group(1) is not None else m.group(2))
        pos = m.end()
    return tuple(out) or None


def problem_path(message: str) -> tuple[str, ...] | None:
    """The manifest path a normalization problem's message starts with (workload pod sets included)."""
    prefix: tuple[str, ...] = ()
    m = _POD_SET.match(message)
    if m is not None:
        spec = parse_dotted(m.group(1))
        if spec is None:
            return None
        prefix = spec[:-1] if spec[-1:] == ("spec",) else spec  # the template's pod: its own path starts at spec
        message = message[m.end():]
    head, sep, _ = message.partition(": ")
    if not sep or " " in head:
        return prefix or None
    path = parse_dotted(head)
    if path is None:
        return prefix or None
    if path[0] == "request" or path[0] == "object":
        return None
    return prefix + path


def _is_gpu_key(key: object) -> bool:
    return isinstance(key, str) and ("gpu" in key or key.startswith(("nvidia.com/", "amd.com/", "habana.ai/")))


def _gpu_container(spec: Mapping) -> int | None:
    containers = spec.get("containers")
    if not isinstance(containers, list):
        return None
    for i, c in enumerate(containers):
        res = c.get("resources") if isinstance(c, Mapping) else None
        if isinstance(res, Mapping) and any(
            isinstance(res.get(k), Mapping) and any(_is_gpu_key(r) for r in res[k]) for k in ("limits", "requests")
        ):
            return i
    return 0 if containers else None


def _lookup(obj: object, path: tuple[str, ...]) -> object:
    node = obj
    for part in path:
        if isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        elif isinstance(node, Mapping) and part in node:
            node = node[part]
        else:
            return None
    return node


def _pod_spec_path(w) -> tuple[str, ...]:
    """The pod spec a person edits: the first template asking for GPUs (a Pod's own spec)."""
    paths = [p for p in w.template_paths if p is not None]
    for ps, path in zip(w.pod_sets, w.template_paths):
        if path is not None and ps.gpus > 0:
            return tuple(path)
    return tuple(paths[0]) if paths else ("spec",)


def needs_subject(code: str, block: str) -> bool:
    """Does `reason_path` need the normalized Workload for this reason (its templates), or does the reason say enough?"""
    return block != "subject" and code in _SUBJECT_CODES


def reason_path(code: str, block: str, message: str, data: Mapping, w=None) -> tuple[str, ...] | None:
    """The manifest field behind one reason of workload `w` (its `obj`; None where `needs_subject` is false)."""
    if block == "subject":
        return problem_path(message)
    if code == "RuleWouldSet":
        path = data.get("path")
        return tuple(str(p) for p in path) if isinstance(path, (list, tuple)) else ("metadata",)
    if w is None or code not in _SUBJECT_CODES:
        return ("metadata",)
    obj = w.obj if w.obj is not None else {}
    spec_path = _pod_spec_path(w)
    if code in _RESOURCE_CODES:
        spec = _lookup(obj, spec_path)
        i = _gpu_container(spec) if isinstance(spec, Mapping) else None
        return spec_path + ("containers", str(i), "resources") if i is not None else spec_path
    if code in _PLACEMENT_CODES:
        spec = _lookup(obj, spec_path)
        for key in ("nodeSelector", "affinity"):
            if isinstance(spec, Mapping) and key in spec:
                return spec_path + (key,)
        return spec_path
    if code == "UnknownPriorityClass":  # the template that names the class, not only the first GPU one
        for path in w.template_paths:
            if path is not None and _lookup(obj, tuple(path) + ("priorityClassName",)) == data.get("class"):
                return tuple(path) + ("priorityClassName",)
        return spec_path + ("priorityClassName",)
    if code == "GangMinMembersMissing":
        return ("metadata", "annotations") if isinstance(_lookup(obj, ("metadata", "annotations")), Mapping) else ("metadata",)
    return ("metadata",)
