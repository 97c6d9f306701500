"""Shape checks of the object fields Allot reads: a field of the wrong JSON type is a located problem, never silence.

Called where the readers already hold the value, so a well-formed object pays a
`type(...) is` test per field; the message (built only on failure) names the path.
"""

from __future__ import annotations

import re
from typing import Mapping

from policy.subject.model import Problem

from .common import BAD_OBJECT, EMPTY

BAD_RESOURCE_NAME = "MalformedResourceName"
BAD_REQUESTS = "MalformedResourceRequests"
DUPLICATE_KEY = "MalformedDuplicateKey"


def jtype(value: object) -> str:
    """The JSON type name of a decoded value."""
    if value is None:
        return "null"
    if value is True or value is False:
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    return "list" if isinstance(value, list) else "object" if isinstance(value, dict) else type(value).__name__


def wrong(path: str, expected: str, value: object) -> Problem:
    """The problem of a field of the wrong type: `spec.containers: expected a list, got string`."""
    return Problem(BAD_OBJECT, f"{path}: expected {expected}, got {jtype(value)} {_short(value)}")


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def mapping(value: object, path: str, problems: list) -> Mapping:
    """`value` when it is an object; EMPTY (and a problem unless absent/null) otherwise."""
    if type(value) is dict:
        return value
    if value is not None and value is not EMPTY:
        problems.append(wrong(path, "an object", value))
    return EMPTY


def items(value: object, path: str, problems: list) -> list:
    """`value` when it is a list of objects; its objects only (and a problem per bad part) otherwise."""
    if type(value) is list:
        for v in value:
            if type(v) is not dict:
                break
        else:
            return value
        out = []
        for i, v in enumerate(value):
            if type(v) is dict:
                out.append(v)
            else:
                problems.append(wrong(f"{path}[{i}]", "an object", v))
        return out
    if value is not None:
        problems.append(wrong(path, "a list of objects", value))
    return []


def string_map(value: object, path: str, problems: list) -> Mapping:
    """Labels / annotations: an object of strings; EMPTY (and a problem) when it is anything else."""
    if type(value) is dict:
        for v in value.values():
            if type(v) is not str:
                break
        else:
            return value
        for k, v in value.items():
            if type(v) is not str:
                problems.append(wrong(f"{path}[{k}]", "a string", v))
                return EMPTY
    if value is not None and value is not EMPTY:
        problems.append(wrong(path, "an object of strings", value))
    return EMPTY


def flag(value: object, path: str, problems: list) -> bool:
    """A boolean field (`privileged`, `hostNetwork`): True only for true; a non-boolean is a problem."""
    if value is True:
        return True
    if value is not None and value is not False:
        problems.append(wrong(path, "a boolean", value))
    return False


# Resource names (Kubernetes API validation): a standard container resource, or a qualified
# name whose prefix is a lowercase DNS subdomain: `NVIDIA.COM/GPU` is refused by the API server.
_STANDARD = frozenset({"cpu", "memory", "ephemeral-storage"})
_PREFIX = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
_NAMES: dict[str, bool] = {n: True for n in _STANDARD}  # verdict cache: pods name the same few resources


def valid_resource_name(key: object) -> bool:
    """Whether `key` is a container resource name the API server accepts."""
    ok = _NAMES.get(key) if type(key) is str else False
    if ok is None:
        ok = _judge(key)
        if len(_NAMES) < 4096:
            _NAMES[key] = ok
    return ok


def _judge(key: str) -> bool:
    prefix, slash, name = key.rpartition("/")
    if not slash:
        return key.startswith("hugepages-") and len(key) > 10
    return (
        0 < len(prefix) <= 253 and _PREFIX.fullmatch(prefix) is not None
        and 0 < len(name) <= 63 and _NAME.fullmatch(name) is not None
    )


def bad_resource_name(key: object, path: str) -> Problem:
    """The problem of an invalid resource name, with the fix when only the case is wrong."""
    hint = f"; did you mean {key.lower()!r}?" if type(key) is str and valid_resource_name(key.lower()) else ""
    return Problem(BAD_RESOURCE_NAME, f"{path}: {key!r} is not a valid resource name (lowercase domain prefix, as the API server requires){hint}")


def _walk(value, path: str, want: tuple) -> Problem | None:
    """The first value along `want` (("object"|"list"|"string"|"strings", key)...) of the wrong type."""
    for i, (expected, key) in enumerate(want):
        if value is None:
            return None
        if expected == "list":
            if type(value) is not list:
                return wrong(path, "a list", value)
            for j, item in enumerate(value):
                found = _walk(item, f"{path}[{j}]", want[i + 1:])
                if found is not None:
                    return found
            return None
        if expected == "strings":
            problems: list = []
            string_map(value, path, problems)
            return problems[0] if problems else None
        if type(value) is not dict:
            return wrong(path, "an object", value)
        if key is None:
            return None
        value, path = value.get(key), f"{path}.{key}"
    return None


_OBJ, _LIST = "object", "list"
_POD_FIELDS = (  # fields the product, gang and DRA readers follow, for the message of a reader that raised
    ("spec", ((_OBJ, "nodeSelector"), ("strings", None))),
    ("spec", ((_OBJ, "affinity"), (_OBJ, "nodeAffinity"), (_OBJ, "requiredDuringSchedulingIgnoredDuringExecution"),
              (_OBJ, "nodeSelectorTerms"), (_LIST, None), (_OBJ, "matchExpressions"), (_LIST, None), (_OBJ, None))),
    ("spec", ((_OBJ, "resourceClaims"), (_LIST, None), (_OBJ, None))),
    ("spec", ((_OBJ, "schedulingGroup"), (_OBJ, None))),
    ("spec", ((_OBJ, "workloadRef"), (_OBJ, None))),
    ("status", ((_OBJ, "resourceClaimStatuses"), (_LIST, None), (_OBJ, None))),
)


def locate(obj: Mapping) -> Problem | None:
    """The first mis-typed field among those the pod readers follow (slow; only after a reader raised)."""
    for top, want in _POD_FIELDS:
        found = _walk(obj.get(top), top, want)
        if found is not None:
            return found
    spec = obj.get("spec") if type(obj.get("spec")) is dict else EMPTY
    node = spec.get("nodeName")
    if node is not None and type(node) is not str:
        return wrong("spec.nodeName", "a string", node)
    return None
