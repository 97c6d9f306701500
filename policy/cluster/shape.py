"""Shape checks for objects entering the snapshot: the fields its indexes read must have the API's types.

The API server guarantees these types, so a mismatch means a hand-written or corrupt
file (or a bug upstream); the snapshot refuses such an object with one located line
instead of raising a TypeError half-way through updating its indexes.
"""

from __future__ import annotations

from typing import Mapping

_STRING_MAPS = ("labels", "annotations")
_STR_ONLY = frozenset({str})


def _string_map(value, path: str) -> str | None:
    if not value:  # null, {} and other empty values read as absent everywhere (`x or EMPTY`)
        return None
    if type(value) is not dict:
        return f"{path} must be a map of strings, not {_type(value)}"
    for k, v in value.items():  # keys are not checked: nothing indexes them by type, and JSON's are strings
        if type(v) is not str:
            return f"{path}[{k!r}] must be a string, not {_type(v)}"
    return None


def _type(value) -> str:
    if value is None:
        return "null"
    if type(value) is bool:
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, Mapping):
        return "a map"
    return type(value).__name__


def _field(obj: Mapping, name: str, want: type, path: str) -> str | None:
    value = obj.get(name)
    if not value or type(value) is want:  # empty values of any type read as absent (`x or EMPTY`)
        return None
    return f"{path} must be {'a string' if want is str else 'a map'}, not {_type(value)}"


def shape_problem(kind: str, obj: Mapping) -> str | None:
    """The first field whose type the snapshot cannot index ("spec.nodeName must be a string, not a list"), or None."""
    # The common case in one expression, without Python-level loops: bulk loads check millions of labels.
    meta, spec, status = obj["metadata"], obj.get("spec"), obj.get("status")
    labels, annotations = meta.get("labels"), meta.get("annotations")
    if (
        (not labels or (type(labels) is dict and _STR_ONLY.issuperset(map(type, labels.values()))))
        and (not annotations or (type(annotations) is dict and _STR_ONLY.issuperset(map(type, annotations.values()))))
        and (not spec or type(spec) is dict) and (not status or type(status) is dict)
        and (kind != "PriorityClass" or _priority_class_problem(obj) is None)
        and (kind != "Pod" or (
            (not spec or type(spec.get("nodeName") or "") is str)
            and (not status or type(status.get("phase") or "") is str)
        ))
    ):
        return None
    return _located(kind, obj)


def _located(kind: str, obj: Mapping) -> str | None:
    meta = obj["metadata"]
    for name in _STRING_MAPS:
        problem = _string_map(meta.get(name), f"metadata.{name}")
        if problem:
            return problem
    for name in ("spec", "status"):
        problem = _field(obj, name, dict, name)
        if problem:
            return problem
    if kind == "PriorityClass":
        return _priority_class_problem(obj)
    spec = obj.get("spec")
    if kind == "Pod":
        if spec:
            problem = _field(spec, "nodeName", str, "spec.nodeName")
            if problem:
                return problem
        status = obj.get("status")
        if status:
            return _field(status, "phase", str, "status.phase")
    return None


PREEMPTION_POLICIES = frozenset({"PreemptLowerPriority", "Never"})
INT32 = (-(2**31), 2**31 - 1)


def _priority_class_problem(obj: Mapping) -> str | None:
    """The PriorityClass fields the Priority plugin computes from (and Allot patches with) must have the API's types."""
    value = obj.get("value")
    if type(value) is not int or not INT32[0] <= value <= INT32[1]:
        return f"value must be a 32-bit integer, not {_type(value) if type(value) is not int else value}"
    policy = obj.get("preemptionPolicy")
    if policy is not None and (type(policy) is not str or policy not in PREEMPTION_POLICIES):
        return f"preemptionPolicy must be PreemptLowerPriority or Never, not {policy!r}"
    default = obj.get("globalDefault")
    if default is not None and type(default) is not bool:
        return f"globalDefault must be a boolean, not {_type(default)}"
    return None
