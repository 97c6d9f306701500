"""Optional fields: a comparison that an absent value would make silently false needs a `has()` guard (E0205).

An absent value (`none`) makes every comparison false, so `gpu_model != "l4"` misses
exactly the pods that name no model. `==` and `matches` ask "is it this?", which an
absent value is not, so they need no guard; `!=`, `<`, `<=`, `>` and `>=` read as
"anything but" or "small/large", and an absent value is neither. Such a comparison is
accepted when a guard dominates it, as Cedar's validator does for optional
attributes: an earlier item of an `and` chain that proves the value present
(`has(x)`, or a comparison of x that is true), an earlier `not has(x)` of an `or`
chain, or the block's `for` (for `when` conditions evaluated only after it matched).
"""

from __future__ import annotations

from collections.abc import Set

from lang import ir, quantity
from lang.diagnostics import Diagnostic, error
from lang.fold import ALWAYS_PRESENT
from lang.ir import Type

# Fields normalization may leave empty (policy/subject/model.py `| None` fields): language.md marks them.
MAY_BE_ABSENT = frozenset(ir.SUBJECT_FIELDS) - ALWAYS_PRESENT
_NEEDS_GUARD = frozenset(("!=", "<", "<=", ">", ">="))
NOTHING: frozenset[str] = frozenset()


def check_absent(e: ir.Expr | None, given: Set[str], diags: list[Diagnostic]) -> None:
    """Append E0205 for each comparison on a maybe-absent value that no guard dominates."""
    if e is not None:
        _walk(e, given, diags)


def present_when_true(e: ir.Expr | None) -> frozenset[str]:
    """Keys (`gpu_model`, `labels["k"]`) certainly present whenever `e` is true."""
    if e is None:
        return NOTHING
    if isinstance(e, ir.Has):
        return frozenset(_optional_leaves(e.target))
    if isinstance(e, ir.Compare):  # true only when both sides are present
        if Type.NONE in (e.left.type, e.right.type):
            return NOTHING
        return frozenset(_optional_leaves(e.left) + _optional_leaves(e.right))
    if isinstance(e, ir.Matches):
        return frozenset(_optional_leaves(e.target))
    if isinstance(e, ir.Contains):
        return frozenset(_optional_leaves(e.item))
    if isinstance(e, ir.And):
        out: set[str] = set()
        for i in e.items:
            out |= present_when_true(i)
        return frozenset(out)
    if isinstance(e, ir.Or):
        return _meet(present_when_true(i) for i in e.items)
    if isinstance(e, ir.Not):
        return _present_when_false(e.item)
    return NOTHING


def _present_when_false(e: ir.Expr) -> frozenset[str]:
    if isinstance(e, ir.Not):
        return present_when_true(e.item)
    if isinstance(e, ir.Or):  # every item false
        out: set[str] = set()
        for i in e.items:
            out |= _present_when_false(i)
        return frozenset(out)
    if isinstance(e, ir.And):  # some item false
        return _meet(_present_when_false(i) for i in e.items)
    return NOTHING


def _meet(sets) -> frozenset[str]:
    out = None
    for s in sets:
        out = s if out is None else out & s
        if not out:
            return NOTHING
    return out or NOTHING


def _walk(e: ir.Expr, given: Set[str], diags: list[Diagnostic]) -> None:
    if isinstance(e, ir.And) or isinstance(e, ir.Or):
        # one running set per chain (copied once), so a chain of n items costs O(n)
        acc = set(given)
        learn = present_when_true if isinstance(e, ir.And) else _present_when_false
        last = len(e.items) - 1
        for n, item in enumerate(e.items):
            _walk(item, acc, diags)
            if n < last:
                acc |= learn(item)
    elif isinstance(e, ir.Not):
        _walk(e.item, given, diags)
    elif isinstance(e, ir.Compare):
        _compare(e, given, diags)


def _compare(e: ir.Compare, given: Set[str], diags: list[Diagnostic]) -> None:
    if e.op not in _NEEDS_GUARD or Type.NONE in (e.left.type, e.right.type):
        return  # `==` needs no guard; a literal `none` is E0301's
    missing = [k for k in dict.fromkeys(_optional_leaves(e.left) + _optional_leaves(e.right)) if k not in given]
    if not missing:
        return
    shown = show(e)
    what = " and ".join(f"`{k}`" for k in missing)
    present = " and ".join(f"has({k})" for k in missing)
    absent = " or ".join(f"not has({k})" for k in missing)
    diags.append(
        error(
            "E0205",
            f"{what} may be absent, which makes `{shown}` false",
            e.span,
            f"guard it: `{present} and {shown}` leaves absent values out, `{absent} or {shown}` counts them in",
        )
    )


def _optional_leaves(e: ir.Expr) -> list[str]:
    """The maybe-absent values an operand reads: optional fields and map lookups, by their source text."""
    if isinstance(e, ir.Field):
        return [e.name] if e.name in MAY_BE_ABSENT else []
    if isinstance(e, ir.Index):
        return [show(e)]
    if isinstance(e, ir.Arith):
        return _optional_leaves(e.left) + _optional_leaves(e.right)
    return []


def show(e: ir.Expr) -> str:
    """Policy text of a (small) IR expression, for messages: `gpu_model != "h100"`, `labels["team"]`."""
    if isinstance(e, ir.Field):
        return e.name
    if isinstance(e, ir.Index):
        return f"{show(e.target)}[{_quote(e.key)}]"
    if isinstance(e, ir.Lit):
        return _literal(e)
    if isinstance(e, (ir.Compare, ir.Arith)):
        return f"{show(e.left)} {e.op} {show(e.right)}"
    return "…"


def _literal(e: ir.Lit) -> str:
    if e.type is Type.STRING:
        return _quote(e.value)
    if e.type in (Type.GPU, Type.FRACTION):
        return quantity.format_milli(e.value)
    if e.type is Type.BYTES:
        return quantity.format_bytes(e.value)
    if e.type is Type.LEVEL:
        return ".".join(e.value)
    if e.type is Type.BOOL:
        return "true" if e.value else "false"
    return str(e.value)


def _quote(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\t", "\\t") + '"'
