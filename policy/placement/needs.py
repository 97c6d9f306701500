"""What a pod asks of a node besides GPUs, as the scheduler reads it: cpu, memory, a pod slot, and where it may run.

`pod_requests` computes effective requests the way kube-scheduler does (the sum of the
containers, or the largest init container when that is more — sidecars, init
containers with `restartPolicy: Always`, add to both — plus `spec.overhead`), exact:
cpu in millicores, memory in bytes. `NodeFilter` is `nodeSelector` ANDed with required
node affinity (terms ORed, expressions and fields ANDed inside a term), matched as
`k8s.io/component-helpers` matches them. Both are hashable: they are part of a gang query.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from lang.quantity import QuantityError, to_int, to_milli
from policy.placement.capacity import is_map

_REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
OPERATORS = frozenset({"In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"})


@dataclass(frozen=True, slots=True)
class NodeFilter:
    """`nodeSelector` pairs ANDed with required node-affinity terms (ORed); each term is (expressions, fields), ANDed."""

    selector: tuple[tuple[str, str], ...] = ()
    terms: tuple[tuple[tuple[tuple[str, str, tuple[str, ...]], ...], tuple[tuple[str, str, tuple[str, ...]], ...]], ...] | None = None

    def matches(self, name: str, labels: Mapping) -> bool:
        """Whether a node of this name and these labels may take the pod."""
        for key, value in self.selector:
            if labels.get(key) != value:
                return False
        if self.terms is None:
            return True
        for exprs, fields in self.terms:
            if (exprs or fields) and all(_expr(labels, e) for e in exprs) and all(_expr({"metadata.name": name}, f) for f in fields):
                return True
        return False  # no term matched (an empty term matches nothing, as in Kubernetes)

    def describe(self) -> str:
        """`nodeSelector pool=a, node affinity (zone In [z1])` for messages."""
        parts = []
        if self.selector:
            parts.append("nodeSelector " + ", ".join(f"{k}={v}" for k, v in self.selector))
        if self.terms is not None:
            terms = [" and ".join(_show(e) for e in (*exprs, *fields)) or "(empty term)" for exprs, fields in self.terms]
            parts.append("node affinity " + " or ".join(f"({t})" for t in terms))
        return ", ".join(parts)


@dataclass(frozen=True, slots=True)
class PodNeeds:
    """Per pod, besides GPUs: `cpu` millicores, `memory` bytes, one pod slot, and the node filter (None: any node)."""

    cpu: int = 0
    memory: int = 0
    node_filter: NodeFilter | None = None


def _show(e: tuple[str, str, tuple[str, ...]]) -> str:
    key, op, values = e
    return f"{key} {op}" + (f" [{', '.join(values)}]" if values else "")


def _int(text: str) -> int | None:
    try:
        return int(text, 10)
    except (TypeError, ValueError):
        return None


def _expr(labels: Mapping, e: tuple[str, str, tuple[str, ...]]) -> bool:
    key, op, values = e
    have = labels.get(key)
    if op == "In":
        return have is not None and have in values
    if op == "NotIn":
        return have is None or have not in values
    if op == "Exists":
        return have is not None
    if op == "DoesNotExist":
        return have is None
    if op in ("Gt", "Lt"):  # one integer value; the label must parse as an integer too
        want = _int(values[0]) if len(values) == 1 else None
        got = _int(have) if isinstance(have, str) else None
        if want is None or got is None:
            return False
        return got > want if op == "Gt" else got < want
    return False  # an operator Kubernetes does not know selects nothing


def _requirements(raw) -> tuple[tuple[str, str, tuple[str, ...]], ...]:
    out = []
    for e in raw if isinstance(raw, list) else ():
        if not is_map(e):
            out.append(("", "Invalid", ()))  # a malformed expression selects nothing
            continue
        values = e.get("values")
        vals = tuple(str(v) for v in values) if isinstance(values, list) else ()
        out.append((str(e.get("key") or ""), str(e.get("operator") or ""), vals))
    return tuple(out)


def node_filter(spec: Mapping) -> NodeFilter | None:
    """The node filter of a pod spec, or None when it has neither a nodeSelector nor required node affinity."""
    selector = spec.get("nodeSelector")
    pairs = tuple(sorted((str(k), str(v)) for k, v in selector.items())) if is_map(selector) else ()
    affinity = spec.get("affinity")
    node_aff = affinity.get("nodeAffinity") if is_map(affinity) else None
    required = node_aff.get(_REQUIRED) if is_map(node_aff) else None
    terms = None
    if is_map(required):
        raw_terms = required.get("nodeSelectorTerms")
        terms = tuple(
            (_requirements(t.get("matchExpressions")), _requirements(t.get("matchFields"))) if is_map(t) else ((), ())
            for t in (raw_terms if isinstance(raw_terms, list) else ())
        )
    if not pairs and terms is None:
        return None
    return NodeFilter(pairs, terms)


def preferred_terms(spec: Mapping) -> tuple[tuple[int, NodeFilter], ...]:
    """(weight, filter) of each preferred node-affinity term of a pod spec (a term matching every node selects none, as kube-scheduler's empty term)."""
    affinity = spec.get("affinity")
    node_aff = affinity.get("nodeAffinity") if is_map(affinity) else None
    raw = node_aff.get("preferredDuringSchedulingIgnoredDuringExecution") if is_map(node_aff) else None
    out = []
    for t in raw if isinstance(raw, list) else ():
        pref = t.get("preference") if is_map(t) else None
        weight = t.get("weight") if is_map(t) else None
        if not is_map(pref) or type(weight) is not int or not 1 <= weight <= 100:
            continue  # the API server refuses such a term; never scored
        exprs, fields = _requirements(pref.get("matchExpressions")), _requirements(pref.get("matchFields"))
        if exprs or fields:
            out.append((weight, NodeFilter((), ((exprs, fields),))))
    return tuple(out)


_CPU: dict[str, int] = {}  # quantity text -> value: pods repeat a handful of request strings
_MEM: dict[str, int] = {}


def _quantity(raw, cache: dict[str, int], milli: bool) -> int:
    if type(raw) is int:
        return max(0, raw * 1000 if milli else raw)
    text = raw if type(raw) is str else str(raw)
    hit = cache.get(text)
    if hit is None:
        try:
            hit = max(0, to_milli(text) if milli else to_int(text))
        except QuantityError:
            hit = 0  # the API server rejects malformed quantities; never raise on odd input
        if len(cache) < 4096:
            cache[text] = hit
    return hit


def _container(c) -> tuple[int, int]:
    if not is_map(c):
        return 0, 0
    res = c.get("resources")
    if not is_map(res):
        return 0, 0
    req = res.get("requests")
    lim = res.get("limits")
    req = req if is_map(req) else {}
    lim = lim if is_map(lim) else {}
    cpu = req.get("cpu", lim.get("cpu"))  # a limit without a request defaults the request to it
    mem = req.get("memory", lim.get("memory"))
    return (_quantity(cpu, _CPU, True) if cpu is not None else 0), (_quantity(mem, _MEM, False) if mem is not None else 0)


def pod_requests(spec: Mapping) -> tuple[int, int]:
    """(cpu millicores, memory bytes) a pod spec asks of its node, computed as the scheduler computes them."""
    cpu = mem = 0
    containers = spec.get("containers")
    for c in containers if isinstance(containers, list) else ():
        a, b = _container(c)
        cpu += a
        mem += b
    inits = spec.get("initContainers")
    if inits and isinstance(inits, list):
        side_cpu = side_mem = init_cpu = init_mem = 0
        for c in inits:
            a, b = _container(c)
            if is_map(c) and c.get("restartPolicy") == "Always":  # a sidecar runs beside what follows
                side_cpu += a
                side_mem += b
                init_cpu, init_mem = max(init_cpu, side_cpu), max(init_mem, side_mem)
            else:
                init_cpu, init_mem = max(init_cpu, side_cpu + a), max(init_mem, side_mem + b)
        cpu, mem = max(cpu + side_cpu, init_cpu), max(mem + side_mem, init_mem)
    overhead = spec.get("overhead")
    if is_map(overhead):
        if overhead.get("cpu") is not None:
            cpu += _quantity(overhead["cpu"], _CPU, True)
        if overhead.get("memory") is not None:
            mem += _quantity(overhead["memory"], _MEM, False)
    return cpu, mem


def pod_needs(spec: Mapping) -> PodNeeds | None:
    """What a pod spec asks of its node besides GPUs, or None when it asks nothing (no requests, no filter)."""
    if not is_map(spec):
        return None
    cpu, mem = pod_requests(spec)
    flt = node_filter(spec)
    if not cpu and not mem and flt is None:
        return None
    return PodNeeds(cpu, mem, flt)


class LabelCounts:
    """How many tracked nodes carry each label value, so a node filter every node passes costs nothing at query time.

    A gang's `nodeSelector` is most often the GPU product, or a pool label every GPU node
    has; such a filter is dropped from the query (`universal`), and the aggregates answer
    as for a gang without one.
    """

    __slots__ = ("by_key", "total", "odd")

    def __init__(self) -> None:
        self.by_key: dict[str, dict[str, int]] = {}  # label key -> value -> nodes (a key no node has now may stay, empty)
        self.total = 0
        # Whether a value not a str was ever counted (as its text): then values equal as objects may differ as text
        # (0 and False), so `replace` cannot trust item comparisons and counts the node again.
        self.odd = False

    def add(self, labels: Mapping, sign: int) -> None:
        """Count (sign +1) or forget (-1) one node's labels."""
        self.total += sign
        by_key = self.by_key
        if sign == 1:  # a node added (or tainted): the loop every such event runs over dozens of labels
            for k, v in labels.items():
                if type(v) is not str:
                    v = str(v)
                    self.odd = True
                try:
                    values = by_key[k]  # (a `try` costs nothing until it catches: cheaper than `.get` and a test)
                except KeyError:
                    by_key[k] = {v: 1}
                    continue
                values[v] = values.get(v, 0) + 1
            return
        if sign == -1:  # a node deleted (or its taint's key left): every pair it was counted with is there, at ≥ 1
            for k, v in labels.items():
                try:
                    values = by_key[k]
                    n = values[v] - 1  # a value not a str is counted as its text: not found as itself, so below
                except (KeyError, TypeError):
                    self._move(k, v, sign)
                    continue
                if n:
                    values[v] = n
                else:
                    del values[v]
            return
        for k, v in labels.items():
            self._move(k, v, sign)

    def _move(self, k, v, sign: int) -> None:
        """Move one pair's count by `sign`, wherever it stands (a value not a str, a pair not counted): the general case."""
        if type(v) is not str:
            v = str(v)
            self.odd = True
        values = self.by_key.get(k)
        if values is None:  # a key left without values keeps its empty dict: the next node's finds it
            values = self.by_key[k] = {}
        n = values.get(v, 0) + sign
        if n > 0:
            values[v] = n
        elif n == 0:
            del values[v]
        else:  # forgetting more than was counted (never, when counts are consistent): kept, as a negative count
            values[v] = n

    def replace(self, old: Mapping, new: Mapping) -> None:
        """One node's labels went from `old` to `new`: count only the pairs that changed (a node has dozens of labels;
        a label event changes one or two), found by one C-level set difference of the items."""
        if self.odd:  # (see `odd`)
            self.add(old, -1)
            self.add(new, +1)
            return
        try:
            came = new.items() - old.items()  # one set of items; the pairs gone are the old values of its keys and the keys gone
        except TypeError:  # an unhashable value (odd input): count the whole node again
            self.add(old, -1)
            self.add(new, +1)
            return
        gone = [(k, old[k]) for k, _v in came if k in old]
        if len(old) + len(came) != len(new) + len(gone):  # a key only the old labels have (C-level set of keys: cached hashes)
            gone.extend((k, old[k]) for k in old.keys() - new.keys())
        by_key = self.by_key
        for k, v in gone:
            v = v if type(v) is str else str(v)
            values = by_key[k]
            n = values[v] - 1
            if n:
                values[v] = n
            else:
                del values[v]
        for k, v in came:
            if type(v) is not str:
                v = str(v)
                self.odd = True
            values = by_key.get(k)
            if values is None:
                values = by_key[k] = {}
            values[v] = values.get(v, 0) + 1

    def universal(self, flt: NodeFilter, names) -> bool:
        """Whether every tracked node passes `flt` (`names`: the tracked node names, for matchFields)."""
        return _universal(self, flt, names)

    def count(self, key: str, value: str) -> int:
        """Nodes whose label `key` is `value`."""
        values = self.by_key.get(key)
        return values.get(value, 0) if values else 0

    def key_total(self, key: str) -> int:
        """Nodes carrying label `key`."""
        values = self.by_key.get(key)
        return sum(values.values()) if values else 0

    def present(self, key: str):
        """The values of label `key` some node carries."""
        return iter(self.by_key.get(key, ()))


class Untainted:
    """The label counts of a model's nodes without blocking taints: its counts over all its nodes minus those of each
    tainted variant (so a taint added or gone counts the node's labels once, in the variant's counts, not twice)."""

    __slots__ = ("base", "variants", "total")

    def __init__(self, base: LabelCounts, variants: list[LabelCounts]) -> None:
        self.base = base
        self.variants = variants
        self.total = base.total - sum(v.total for v in variants)

    def count(self, key: str, value: str) -> int:
        """Nodes whose label `key` is `value`."""
        return self.base.count(key, value) - sum(v.count(key, value) for v in self.variants)

    def key_total(self, key: str) -> int:
        """Nodes carrying label `key`."""
        return self.base.key_total(key) - sum(v.key_total(key) for v in self.variants)

    def present(self, key: str):
        """The values of label `key` some node carries."""
        return (value for value in self.base.present(key) if self.count(key, value) > 0)

    def universal(self, flt: NodeFilter, names) -> bool:
        """Whether every untainted node passes `flt` (`names`: every tracked node name, for matchFields)."""
        return _universal(self, flt, names)


def _universal(counts, flt: NodeFilter, names) -> bool:
    """Whether every node `counts` counts passes `flt`, from the counts alone (`LabelCounts` or `Untainted`)."""
    total = counts.total
    for k, v in flt.selector:
        if counts.count(k, v) != total:
            return False
    if flt.terms is None:
        return True
    return any((exprs or fields) and all(_all(counts, e) for e in exprs) and all(_all_names(f, names, total) for f in fields)
               for exprs, fields in flt.terms)


def _all(counts, e: tuple[str, str, tuple[str, ...]]) -> bool:
    key, op, values = e
    total = counts.total
    if op == "In":
        return sum(counts.count(key, v) for v in set(values)) == total
    if op == "NotIn":
        return not any(counts.count(key, v) > 0 for v in values)
    if op == "Exists":
        return counts.key_total(key) == total
    if op == "DoesNotExist":
        return counts.key_total(key) == 0
    if op in ("Gt", "Lt"):
        return counts.key_total(key) == total and all(_expr({key: v}, e) for v in counts.present(key))
    return False


def _all_names(f: tuple[str, str, tuple[str, ...]], names, total: int) -> bool:
    key, op, values = f
    if key != "metadata.name":
        return False
    if op == "NotIn":
        return not any(v in names for v in values)
    if op == "In":
        return len(values) >= total and all(n in values for n in names)
    return False
