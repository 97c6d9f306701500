"""What a block can govern, read statically from its IR: does it need a GPU, is it pinned to namespaces.

Used by `policy.manifests` to narrow webhook configurations. Every answer here is
conservative: "unknown" means "do not narrow", so a narrowed configuration never
hides a request from a block that could act on it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from lang import ir
from lang.span import NO_SPAN

# Value a field takes on a pod that asks for no GPU in any dialect (Workload defaults):
# gpus/total_gpus are 0; fraction and model are none; memory is none (or 0 in some dialects).
_NO_GPU_VALUES: dict[str, tuple[object, ...]] = {
    "gpus": (0,),
    "total_gpus": (0,),
    "gpu_memory": (0, None),
    "fraction": (None,),
    "gpu_model": (None,),
}

_OPS = {
    "==": lambda a, b: a == b,
    "!=": lambda a, b: a != b,
    "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b,
    ">": lambda a, b: a > b,
    ">=": lambda a, b: a >= b,
}
_FLIP = {"==": "==", "!=": "!=", "<": ">", "<=": ">=", ">": "<", ">=": "<="}


def _compare_no_gpu(op: str, field: str, lit: object) -> bool | None:
    """The comparison's value on a GPU-less pod, or None when it depends on the dialect."""
    results = set()
    for value in _NO_GPU_VALUES[field]:
        # language.md: every comparison with none is false.
        results.add(False if value is None or lit is None else bool(_OPS[op](value, lit)))
    return results.pop() if len(results) == 1 else None


def eval_without_gpu(expr: ir.Expr | None) -> bool | None:
    """Three-valued evaluation of `expr` on a pod that requests no GPU: True, False or None (unknown)."""
    if expr is None:
        return True
    if isinstance(expr, ir.Lit) and isinstance(expr.value, bool):
        return expr.value
    if isinstance(expr, ir.Compare):
        left, right, op = expr.left, expr.right, expr.op
        if isinstance(right, ir.Field) and isinstance(left, ir.Lit):
            left, right, op = right, left, _FLIP[op]
        if isinstance(left, ir.Field) and left.name in _NO_GPU_VALUES and isinstance(right, ir.Lit):
            return _compare_no_gpu(op, left.name, right.value)
        return None
    if isinstance(expr, ir.Has) and isinstance(expr.target, ir.Field) and expr.target.name in _NO_GPU_VALUES:
        present = {v is not None for v in _NO_GPU_VALUES[expr.target.name]}
        return present.pop() if len(present) == 1 else None
    if isinstance(expr, ir.Matches) and isinstance(expr.target, ir.Field) and expr.target.name == "gpu_model":
        return False
    if isinstance(expr, ir.Not):
        inner = eval_without_gpu(expr.item)
        return None if inner is None else not inner
    if isinstance(expr, ir.And):
        vals = [eval_without_gpu(i) for i in expr.items]
        return False if False in vals else (True if all(v is True for v in vals) else None)
    if isinstance(expr, ir.Or):
        vals = [eval_without_gpu(i) for i in expr.items]
        return True if True in vals else (False if all(v is False for v in vals) else None)
    return None


def needs_gpu(*conditions: ir.Expr | None) -> bool:
    """True when the conjunction of `conditions` is certainly false for a pod without GPUs."""
    return any(eval_without_gpu(c) is False for c in conditions if c is not None)


# ---- namespaces ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class NamespaceScope:
    """Namespaces a block is pinned to: exact names and fnmatch globs (a union)."""

    names: frozenset[str] = frozenset()
    globs: frozenset[str] = frozenset()

    @property
    def exact(self) -> bool:
        """Expressible as a label selector on `kubernetes.io/metadata.name` (no globs)."""
        return not self.globs

    def union(self, other: "NamespaceScope") -> "NamespaceScope":
        """Either scope."""
        return NamespaceScope(self.names | other.names, self.globs | other.globs)


def _is_namespace(e: ir.Expr) -> bool:
    return isinstance(e, ir.Field) and e.name == "namespace"


def namespace_scope(expr: ir.Expr | None) -> NamespaceScope | None:
    """Namespaces outside which `expr` is certainly false, or None when it is not pinned."""
    if isinstance(expr, ir.Compare) and expr.op == "==":
        for a, b in ((expr.left, expr.right), (expr.right, expr.left)):
            if _is_namespace(a) and isinstance(b, ir.Lit) and isinstance(b.value, str):
                return NamespaceScope(names=frozenset({b.value}))
        return None
    if isinstance(expr, ir.Matches) and _is_namespace(expr.target):
        if not any(ch in expr.pattern for ch in "*?["):
            return NamespaceScope(names=frozenset({expr.pattern}))
        return NamespaceScope(globs=frozenset({expr.pattern}))
    if isinstance(expr, ir.And):
        # Any pinned conjunct pins the whole; prefer an exact one so a selector can carry it.
        scopes = [s for s in map(namespace_scope, expr.items) if s is not None]
        exact = [s for s in scopes if s.exact]
        return (exact or scopes or [None])[0]
    if isinstance(expr, ir.Or):
        scopes = [namespace_scope(i) for i in expr.items]
        if not scopes or any(s is None for s in scopes):
            return None
        out = NamespaceScope()
        for s in scopes:
            out = out.union(s)
        return out
    return None


def scope_of(*conditions: ir.Expr | None) -> NamespaceScope | None:
    """The namespace pin of a conjunction of conditions (selector, when), if any."""
    present = tuple(c for c in conditions if c is not None)
    if not present:
        return None
    return namespace_scope(ir.And(present, NO_SPAN))


def union_scopes(scopes: Iterable[NamespaceScope | None]) -> NamespaceScope | None:
    """The union of block scopes; None as soon as one block is unpinned."""
    out = NamespaceScope()
    seen = False
    for s in scopes:
        if s is None:
            return None
        out, seen = out.union(s), True
    return out if seen else None


def kind_pin(*conditions: ir.Expr | None) -> frozenset[str] | None:
    """Kinds outside which a conjunction of conditions is certainly false (`kind == "Workload"`), or None when not pinned."""
    present = tuple(c for c in conditions if c is not None)
    return _kinds(ir.And(present, NO_SPAN)) if present else None


def _kinds(expr: ir.Expr) -> frozenset[str] | None:
    if isinstance(expr, ir.Compare) and expr.op == "==":
        for a, b in ((expr.left, expr.right), (expr.right, expr.left)):
            if isinstance(a, ir.Field) and a.name == "kind" and isinstance(b, ir.Lit) and isinstance(b.value, str):
                return frozenset({b.value})
        return None
    if isinstance(expr, ir.And):  # every pinned conjunct must hold: the intersection
        pins = [k for k in map(_kinds, expr.items) if k is not None]
        return frozenset.intersection(*pins) if pins else None
    if isinstance(expr, ir.Or):  # any branch may hold: the union, when every branch is pinned
        pins = [_kinds(i) for i in expr.items]
        return None if not pins or any(k is None for k in pins) else frozenset().union(*pins)
    return None
