"""Decide from literals alone whether a condition is always or never true (for E0301 / W0301)."""

from __future__ import annotations

import fnmatch
import operator

from lang import ir
from lang.ir import Type

_OPS = {"==": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge}
_FLIP = {"==": "==", "!=": "!=", "<": ">", "<=": ">=", ">": "<", ">=": "<="}
_NUMERIC = {Type.INT, Type.GPU, Type.FRACTION, Type.BYTES}
# Fields that can never be negative: `gpus < 0` is decidably false.
NON_NEGATIVE = {"pods", "gpus", "total_gpus", "fraction", "gpu_memory", "min_members", "gpu_pods", "gpu_memory_requested",
                "gpu_limit_mismatches"}
# Fields normalization always fills (policy/subject/model.py defaults): `has(gpus)` is always true.
ALWAYS_PRESENT = {
    "kind", "operation", "pods", "gpus", "total_gpus", "agent", "privileged", "host_path", "host_network",
    "labels", "annotations", "namespace.labels", "groups", "gpu_pods", "memory_share", "gpu_limit_mismatches",
    "unread",
    "quota.covered",
}  # fmt: skip


def truth(e: ir.Expr | None) -> bool | None:
    """True/False when decidable from literals and field domains, else None."""
    if e is None:
        return None
    if isinstance(e, ir.Lit):
        return e.value if e.type is Type.BOOL else None
    if isinstance(e, ir.Not):
        t = truth(e.item)
        return None if t is None else not t
    if isinstance(e, ir.And):
        ts = [truth(i) for i in e.items]
        if False in ts or _contradicts(e.items):
            return False
        return True if all(t is True for t in ts) else None
    if isinstance(e, ir.Or):
        ts = [truth(i) for i in e.items]
        if True in ts:
            return True
        return False if all(t is False for t in ts) else None
    if isinstance(e, ir.Compare):
        return _compare(e)
    if isinstance(e, ir.Has):
        if isinstance(e.target, ir.Lit):
            return e.target.value is not None
        return True if isinstance(e.target, ir.Field) and e.target.name in ALWAYS_PRESENT else None
    if isinstance(e, ir.Matches) and isinstance(e.target, ir.Lit) and isinstance(e.target.value, str):
        return fnmatch.fnmatchcase(e.target.value, e.pattern)
    return None


def _compare(e: ir.Compare) -> bool | None:
    left, right = e.left, e.right
    if Type.NONE in (left.type, right.type):
        return False  # comparisons with none are false (language.md)
    if isinstance(left, ir.Lit) and isinstance(right, ir.Lit):
        try:
            return bool(_OPS[e.op](left.value, right.value))
        except TypeError:
            return None
    bound = _bound(e)
    if bound is not None:
        lo, hi = bound[1]
        return False if lo is not None and hi is not None and lo > hi else None
    return None


def _bound(e: ir.Expr):
    """(field name, (lo, hi)) for `field OP literal` over integers, else None."""
    if not isinstance(e, ir.Compare) or e.op == "!=":
        return None
    left, right, op = e.left, e.right, e.op
    if isinstance(left, ir.Lit) and isinstance(right, ir.Field):
        left, right, op = right, left, _FLIP[op]
    if not (isinstance(left, ir.Field) and isinstance(right, ir.Lit) and left.type in _NUMERIC and isinstance(right.value, int)):
        return None
    lo = 0 if left.name in NON_NEGATIVE else None
    v = right.value
    ranges = {"<": (lo, v - 1), "<=": (lo, v), ">": (v + 1, None), ">=": (v, None), "==": (v, v)}
    rlo, rhi = ranges[op]
    if lo is not None and (rlo is None or rlo < lo):
        rlo = lo
    return left.name, (rlo, rhi)


def _contradicts(items: tuple[ir.Expr, ...]) -> bool:
    """`gpus > 8 and gpus < 4`, `namespace == "a" and namespace == "b"`: no value satisfies both."""
    bounds: dict[str, tuple] = {}
    equals: dict[str, object] = {}
    for item in items:
        b = _bound(item)
        if b is not None:
            name, (lo, hi) = b
            plo, phi = bounds.get(name, (None, None))
            lo = lo if plo is None else (plo if lo is None else max(lo, plo))
            hi = hi if phi is None else (phi if hi is None else min(hi, phi))
            if lo is not None and hi is not None and lo > hi:
                return True
            bounds[name] = (lo, hi)
        elif isinstance(item, ir.Compare) and item.op == "==" and isinstance(item.right, ir.Lit) and isinstance(item.left, (ir.Field, ir.Index)):
            key = _key(item.left)
            if key in equals and equals[key] != item.right.value:
                return True
            equals[key] = item.right.value
    return False


def _key(e) -> str:
    if isinstance(e, ir.Field):
        return e.name
    return f"{_key(e.target)}[{e.key!r}]"
