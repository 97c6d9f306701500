"""What the scheduler model reads from Kubernetes objects: pod requests, node allocatable, node selection terms.

Exact integers throughout: cpu in millicores, memory in bytes (Kubernetes quantities
are parsed exactly and rounded up, as the API server does for requests).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from fractions import Fraction

from lang.quantity import QuantityError
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


def milli(value: object, path: str) -> int:
    """A cpu quantity in millicores (rounded up)."""
    if type(value) is str:
        hit = _MILLI.get(value)
        if hit is None:
            hit = _MILLI[value] = _milli(value, path)
            if len(_MILLI) > 65536:
                _MILLI.clear()
        return hit
    return _milli(value, path)


def whole(value: object, path: str) -> int:
    """A memory quantity in bytes (rounded up)."""
    if type(value) is str:
        hit = _WHOLE.get(value)
        if hit is None:
            hit = _WHOLE[value] = _whole(value, path)
            if len(_WHOLE) > 65536:
                _WHOLE.clear()
        return hit
    return _whole(value, path)


def _milli(value: object, path: str) -> int:
    q = _exact(value, path) * 1000
    return -(-q.numerator // q.denominator) if not isinstance(q, int) else q


def _whole(value: object, path: str) -> int:
    q = _exact(value, path)
    return -(-q.numerator // q.denominator) if not isinstance(q, int) else q


def _container_requests(c: Mapping, where: str) -> tuple[int, int]:
    res = c.get("resources") or EMPTY
    req, lim = res.get("requests") or EMPTY, res.get("limits") or EMPTY
    cpu = req.get("cpu", lim.get("cpu"))  # a limit alone implies an equal request
    mem = req.get("memory", lim.get("memory"))
    return (milli(cpu, f"{where}.resources.requests.cpu") if cpu is not None else 0,
            whole(mem, f"{where}.resources.requests.memory") if mem is not None else 0)


def pod_requests(pod: Mapping) -> tuple[int, int]:
    """(cpu millicores, memory bytes) the scheduler reserves: app containers and sidecars add, init containers max."""
    spec = pod.get("spec") or EMPTY
    cpu = mem = 0
    for i, c in enumerate(spec.get("containers") or ()):
        a, b = _container_requests(c, f"spec.containers[{i}]")
        cpu, mem = cpu + a, mem + b
    init_cpu = init_mem = 0
    for i, c in enumerate(spec.get("initContainers") or ()):
        a, b = _container_requests(c, f"spec.initContainers[{i}]")
        if c.get("restartPolicy") == "Always":  # a sidecar runs beside the app containers
            cpu, mem = cpu + a, mem + b
        else:
            init_cpu, init_mem = max(init_cpu, a), max(init_mem, b)
    overhead = spec.get("overhead") or EMPTY
    if overhead:
        cpu += milli(overhead.get("cpu", 0), "spec.overhead.cpu")
        mem += whole(overhead.get("memory", 0), "spec.overhead.memory")
    return max(cpu, init_cpu), max(mem, init_mem)


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


def _expression_holds(expr: Mapping, labels: Mapping[str, str]) -> bool:
    key, op, values = expr.get("key"), expr.get("operator"), expr.get("values") or ()
    have = labels.get(key)
    if op == "In":
        return have is not None and have in values
    if op == "NotIn":
        return have is None or have not in values
    if op == "Exists":
        return have is not None
    if op == "DoesNotExist":
        return have is None
    if op in ("Gt", "Lt") and have is not None and values:
        try:
            a, b = int(have), int(values[0])
        except ValueError:
            return False
        return a > b if op == "Gt" else a < b
    return False


class NodeSelection:
    """A pod's `nodeSelector` and required node affinity, matched as kube-scheduler's NodeAffinity filter does."""

    __slots__ = ("selector", "terms", "keys")

    def __init__(self, pod: Mapping):
        spec = pod.get("spec") or EMPTY
        self.selector = dict(spec.get("nodeSelector") or EMPTY)
        required = (((spec.get("affinity") or EMPTY).get("nodeAffinity") or EMPTY)
                    .get("requiredDuringSchedulingIgnoredDuringExecution") or EMPTY)
        self.terms = [t.get("matchExpressions") or () for t in required.get("nodeSelectorTerms") or () if isinstance(t, Mapping)]
        keys = set(self.selector)
        for exprs in self.terms:
            keys.update(e.get("key") for e in exprs)
        self.keys = frozenset(keys)

    @property
    def empty(self) -> bool:
        """No constraint at all: every node passes."""
        return not self.selector and not self.terms

    def matches(self, labels: Mapping[str, str]) -> bool:
        """All nodeSelector labels equal, and one term (if any) whose expressions all hold."""
        for k, v in self.selector.items():
            if labels.get(k) != v:
                return False
        if not self.terms:
            return True
        return any(all(_expression_holds(e, labels) for e in exprs) for exprs in self.terms)
