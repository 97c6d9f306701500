"""What the scheduler model reads from Kubernetes objects: pod requests, node allocatable, node selection terms.

Exact integers throughout: cpu in millicores, memory in bytes (Kubernetes quantities
are parsed exactly and rounded up, as the API server does for requests).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from fractions import Fraction

from lang.quantity import QuantityError
from policy.placement.needs import node_filter, pod_requests as needs_requests
from policy.subject.dialects.common import EMPTY, quantity

HOSTNAME = "kubernetes.io/hostname"


class ResourceError(ValueError):
    """A request or allocatable value that is not a Kubernetes quantity; the message names the field."""


def _exact(value: object, path: str) -> Fraction | int:
    try:
        q = quantity(value)
    except (QuantityError, ValueError):
        raise ResourceError(f"{path}: {value!r} is not a Kubernetes quantity") from None
    if q < 0:
        raise ResourceError(f"{path}: {value!r} is negative")
    return q


_MILLI: dict[str, int] = {}
_WHOLE: dict[str, int] = {}  # quantity text -> value: traces repeat a few request sizes thousands of times


def _cached(value: object, path: str, cache: dict[str, int], read) -> int:
    if type(value) is not str:
        return read(value, path)
    hit = cache.get(value)
    if hit is None:
        hit = cache[value] = read(value, path)
        if len(cache) > 65536:
            cache.clear()
    return hit


def milli(value: object, path: str) -> int:
    """A cpu quantity in millicores (rounded up)."""
    return _cached(value, path, _MILLI, _milli)


def whole(value: object, path: str) -> int:
    """A memory quantity in bytes (rounded up)."""
    return _cached(value, path, _WHOLE, _whole)


def _milli(value: object, path: str) -> int:
    q = _exact(value, path) * 1000
    return -(-q.numerator // q.denominator) if not isinstance(q, int) else q


def _whole(value: object, path: str) -> int:
    q = _exact(value, path)
    return -(-q.numerator // q.denominator) if not isinstance(q, int) else q


def _check_quantities(spec: Mapping) -> None:
    """ResourceError naming the field when a cpu or memory request, limit or overhead is not a quantity."""
    for kind in ("containers", "initContainers"):
        for i, c in enumerate(spec.get(kind) or ()):
            res = (c.get("resources") or EMPTY) if isinstance(c, Mapping) else EMPTY
            for table in ("requests", "limits"):
                for name in ("cpu", "memory"):
                    value = (res.get(table) or EMPTY).get(name)
                    if value is not None:
                        _exact(value, f"spec.{kind}[{i}].resources.{table}.{name}")
    overhead = spec.get("overhead") or EMPTY
    for name in ("cpu", "memory"):
        if overhead.get(name) is not None:
            _exact(overhead[name], f"spec.overhead.{name}")


def pod_requests(pod: Mapping) -> tuple[int, int]:
    """(cpu millicores, memory bytes) the scheduler reserves, as placement computes them (`policy.placement.needs`).

    One computation serves the webhook's placement and the simulator's scheduler; here a value
    that is not a quantity is a located ResourceError instead of counting as nothing.
    """
    spec = pod.get("spec") or EMPTY
    _check_quantities(spec)
    return needs_requests(spec)


@dataclass(frozen=True, slots=True)
class NodeAllocatable:
    """What a node offers pods, and whether it takes new ones."""

    name: str
    cpu: int
    memory: int
    labels: Mapping[str, str]
    schedulable: bool


def node_allocatable(node: Mapping) -> NodeAllocatable:
    """cpu/memory from `status.allocatable` (else capacity); unschedulable or not Ready nodes take no pods."""
    meta = node.get("metadata") or EMPTY
    name = str(meta.get("name") or "")
    status = node.get("status") or EMPTY
    alloc = status.get("allocatable") or status.get("capacity") or EMPTY
    cpu = milli(alloc.get("cpu", 0), f"Node {name}: status.allocatable.cpu")
    mem = whole(alloc.get("memory", 0), f"Node {name}: status.allocatable.memory")
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or () if isinstance(c, Mapping))
    cordoned = (node.get("spec") or EMPTY).get("unschedulable") is True
    labels = dict(meta.get("labels") or EMPTY)
    labels.setdefault(HOSTNAME, name)
    return NodeAllocatable(name, cpu, mem, labels, ready and not cordoned)


class NodeSelection:
    """A pod's `nodeSelector` and required node affinity: placement's `NodeFilter`, plus the label keys it reads."""

    __slots__ = ("filter", "keys")

    def __init__(self, pod: Mapping):
        spec = pod.get("spec") or EMPTY
        self.filter = node_filter(spec) if isinstance(spec, Mapping) else None
        keys: set[str] = set()
        if self.filter is not None:
            keys.update(k for k, _v in self.filter.selector)
            for exprs, fields in self.filter.terms or ():
                keys.update(e[0] for e in exprs)
                keys.update("metadata.name" for _f in fields)  # a field names the node itself: judged per node
        self.keys = frozenset(keys)

    @property
    def empty(self) -> bool:
        """No constraint at all: every node passes."""
        return self.filter is None

    def matches(self, labels: Mapping[str, str]) -> bool:
        """All nodeSelector labels equal, and one term (if any) whose expressions all hold (the node's name from its hostname label)."""
        return self.filter is None or self.filter.matches(labels.get(HOSTNAME, ""), labels)
