"""The reference semantics of IR expressions as nested closures; level comparisons and message templates.

None semantics follow language.md: any comparison or `matches` with a missing value
is False (so `!=` with none is False too), `has(x)` tests presence, `in` on a missing
container is False. Amounts are exact ints (milli-GPU, bytes); no floats anywhere.
"""

from __future__ import annotations

import fnmatch
import operator
import re
from collections.abc import Mapping
from typing import Callable

from lang import ir
from lang.quantity import format_bytes, format_bytes_short, format_milli

Getter = Callable[[object], object]

_CMP = {
    "==": operator.eq,
    "!=": operator.ne,
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}
_MILLI_TYPES = (ir.Type.GPU, ir.Type.FRACTION)


class Levels:
    """Topology levels by (topology, level) -> node label key, and label -> rank (0 = widest)."""

    def __init__(self, topologies: tuple[ir.Topology, ...] = ()):
        self.label: dict[tuple[str, str], str] = {}
        self.rank: dict[tuple[str, str], int] = {}
        for topo in topologies:
            for i, lvl in enumerate(topo.levels):
                self.label[(topo.name, lvl.name)] = lvl.label
                self.rank[(topo.name, lvl.name)] = i


def attr_name(field: str) -> str:
    """The `Workload` attribute of a dotted subject field (`namespace.labels` -> `namespace_labels`)."""
    return field.replace(".", "_")


def compile_reference(expr: ir.Expr, levels: Levels | None = None) -> Getter:
    """The reference semantics as nested closures (slower; used for level comparisons and tests)."""
    return _compile(expr, levels or Levels())


def _compile(e: ir.Expr, levels: Levels) -> Getter:
    kind = type(e)
    if kind is ir.Lit:
        value = e.value
        return lambda w: value
    if kind is ir.Field:
        return operator.attrgetter(attr_name(e.name))
    if kind is ir.Index:
        target, key = _compile(e.target, levels), e.key
        return lambda w: (target(w) or {}).get(key)
    if kind is ir.Compare:
        return _compile_compare(e, levels)
    if kind is ir.Arith:
        return _compile_arith(e, levels)
    if kind is ir.Matches:
        target, match = _compile(e.target, levels), re.compile(fnmatch.translate(e.pattern)).match
        return lambda w: (v := target(w)) is not None and match(v) is not None
    if kind is ir.Contains:
        item, container = _compile(e.item, levels), _compile(e.container, levels)

        def contains(w):
            c, i = container(w), item(w)
            return c is not None and i is not None and i in c

        return contains
    if kind is ir.Has:
        target = _compile(e.target, levels)
        return lambda w: target(w) is not None
    if kind is ir.Not:
        item = _compile(e.item, levels)
        return lambda w: not item(w)
    if kind is ir.And:
        items = tuple(_compile(i, levels) for i in e.items)
        return lambda w: all(f(w) for f in items)
    if kind is ir.Or:
        items = tuple(_compile(i, levels) for i in e.items)
        return lambda w: any(f(w) for f in items)
    raise TypeError(f"unknown expression node {kind.__name__}")


def _compile_compare(e: ir.Compare, levels: Levels) -> Getter:
    op = _CMP[e.op]
    if ir.Type.LEVEL in (e.left.type, e.right.type):
        return compile_level_compare(e, levels)
    left, right = _compile(e.left, levels), _compile(e.right, levels)
    if isinstance(e.right, ir.Lit):  # the common shape: field OP literal
        value = e.right.value
        if value is None:
            return lambda w: False
        return lambda w: (v := left(w)) is not None and op(v, value)

    def compare(w):
        a, b = left(w), right(w)
        return a is not None and b is not None and op(a, b)

    return compare


def compile_level_compare(e: ir.Compare, levels: Levels) -> Getter:
    """Subject topology fields hold the requested node label key; a level literal names (topology, level).

    Equality compares label keys; ordering compares ranks within the literal's topology (wider < narrower).
    """
    op = _CMP[e.op]
    rank_of_label: dict[str, int] = {}
    lit = e.right if isinstance(e.right, ir.Lit) else e.left
    field_side = e.left if lit is e.right else e.right
    if not isinstance(lit, ir.Lit) or lit.value is None:
        return lambda w: False
    topo = lit.value[0]
    for (t, _), label in levels.label.items():
        if t == topo:
            rank_of_label[label] = levels.rank[(t, _)]
    want_label, want_rank = levels.label.get(lit.value), levels.rank.get(lit.value)
    get = _compile(field_side, levels)
    flip = lit is e.left

    def compare(w):
        label = get(w)
        if label is None:
            return False
        if e.op in ("==", "!="):
            return op(label, want_label)
        rank = rank_of_label.get(label)
        if rank is None or want_rank is None:
            return False
        return op(want_rank, rank) if flip else op(rank, want_rank)

    return compare


def _compile_arith(e: ir.Arith, levels: Levels) -> Getter:
    left, right = _compile(e.left, levels), _compile(e.right, levels)
    scale = e.op == "*" and e.left.type in _MILLI_TYPES and e.right.type in _MILLI_TYPES
    op = {"+": operator.add, "-": operator.sub, "*": operator.mul}[e.op]

    def arith(w):
        a, b = left(w), right(w)
        if a is None or b is None:
            return None
        v = op(a, b)
        return v // 1000 if scale else v  # milli x milli stays milli

    return arith


def render_value(value: object, type_: ir.Type, *, exact: bool = True) -> str:
    """A value as people read it in messages and labels: 4000 milli-GPU -> '4', bytes -> '80Gi'.

    `exact=False` (message templates) rounds bytes no short unit form states ('7.2Gi');
    a label or annotation value keeps every byte.
    """
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "true" if value else "false"
    if type_ in _MILLI_TYPES and isinstance(value, int):
        return format_milli(value)
    if type_ is ir.Type.BYTES and isinstance(value, int):
        return format_bytes(value) if exact else format_bytes_short(value)
    if type_ is ir.Type.LEVEL and isinstance(value, tuple):
        return ".".join(value)
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping):
        return ",".join(f"{k}={v}" for k, v in sorted(value.items()))
    if isinstance(value, (tuple, list)):
        return ",".join(str(v) for v in value)
    return str(value)


def compile_template(tpl: ir.Template | None, levels: Levels | None = None) -> Callable[[object], str]:
    """A closure rendering a `{field}` message template against a Workload."""
    if tpl is None:
        return lambda w: ""
    levels = levels or Levels()
    parts: list[Callable[[object], str]] = []
    for part in tpl.parts:
        if isinstance(part, str):
            parts.append(lambda w, s=part: s)
        else:
            get, type_ = _compile(part, levels), part.type
            parts.append(lambda w, g=get, t=type_: render_value(g(w), t, exact=False))
    if all(isinstance(p, str) for p in tpl.parts):
        text = "".join(tpl.parts)
        return lambda w: text
    return lambda w: "".join(p(w) for p in parts)
