"""A block's `for`/`when` as CEL over the AdmissionReview: a sound over-approximation for matchConditions.

`over(expr)` is true for every request on which `expr` could hold (never hides a
request from a block). Atoms read from the request or the object translate exactly
where CEL can see them (namespace, operation, user, groups, labels, annotations,
priority class); GPU amounts become the `gpu-pod` test when they need a GPU; any
other atom is `true`. Under `not`, the under-approximation is used instead, where an
untranslatable atom is `false`, so the negation still over-approximates.
"""

from __future__ import annotations

from lang import ir
from policy.manifests import cel
from policy.manifests.scope import eval_without_gpu, needs_gpu

TRUE, FALSE = "true", "false"


def _and(parts: list[str]) -> str:
    if FALSE in parts:
        return FALSE
    parts = list(dict.fromkeys(p for p in parts if p != TRUE))
    return TRUE if not parts else parts[0] if len(parts) == 1 else "(" + " && ".join(parts) + ")"


def _or(parts: list[str]) -> str:
    if TRUE in parts:
        return TRUE
    parts = list(dict.fromkeys(p for p in parts if p != FALSE))
    return FALSE if not parts else parts[0] if len(parts) == 1 else "(" + " || ".join(parts) + ")"


def _not(part: str) -> str:
    return FALSE if part == TRUE else TRUE if part == FALSE else f"!({part})"  # `!a == b` would negate `a`


def _per_object(pred, positive: bool) -> str:
    """`pred` on the subject, which is the new object (absent on DELETE) or the old one (absent on CREATE).

    Positive: true if it holds on either object present. Negative: only if it holds on every
    object present, so the result is sound whichever of the two the engine reads.
    """
    if positive:
        return f"((request.operation != \"DELETE\" && {pred('object')}) || (request.operation != \"CREATE\" && {pred('oldObject')}))"
    return f"((request.operation == \"DELETE\" || {pred('object')}) && (request.operation == \"CREATE\" || {pred('oldObject')}))"


def _string_test(lhs: ir.Expr, rhs: ir.Expr, op: str) -> tuple[str, object] | None:
    """('kind', payload) when `lhs op "literal"` is a comparison CEL can decide exactly."""
    if isinstance(lhs, ir.Lit) and not isinstance(rhs, ir.Lit):
        lhs, rhs = rhs, lhs
    if op not in ("==", "!=") or not isinstance(rhs, ir.Lit) or not isinstance(rhs.value, str):
        return None
    return ("cmp", (lhs, rhs.value))


def _value_cel(target: ir.Expr, test, positive: bool) -> str | None:
    """CEL applying `test(value_cel)` to a string-valued target (false when absent), or None if untranslatable."""
    if isinstance(target, ir.Field) and target.name in ("namespace", "operation"):
        return test(f"request.{target.name}")
    if isinstance(target, ir.Index) and isinstance(target.target, ir.Field) and target.target.name in ("labels", "annotations"):
        key, kind = cel.cel_string(target.key), target.target.name

        def pred(o: str) -> str:
            m = f"{o}.metadata.{kind}"
            value = test(f"{m}[{key}]")
            tail = "" if value == TRUE else f" && {value}"  # has()/`in` tests need only the key
            return f"(has({o}.metadata) && has({m}) && {key} in {m}{tail})"

        return _per_object(pred, positive)
    if isinstance(target, ir.Field) and target.name == "priority_class":
        def has_class(o: str) -> str:
            value = test(f"{o}.spec.priorityClassName")
            tail = "" if value == TRUE else f" && {value}"
            return f"(has({o}.spec) && has({o}.spec.priorityClassName){tail})"

        return _per_object(has_class, positive)
    return None


def _atom(expr: ir.Expr, positive: bool, gpu: str) -> str:
    """CEL for one atom (anything but and/or/not)."""
    exact = None
    if isinstance(expr, ir.Compare) and (t := _string_test(expr.left, expr.right, expr.op)):
        target, lit = t[1]
        exact = _value_cel(target, lambda v: f"{v} {expr.op} {cel.cel_string(lit)}", positive)
    elif isinstance(expr, ir.Matches):
        exact = _value_cel(expr.target, lambda v: cel.glob_cel(v, expr.pattern), positive)
    elif isinstance(expr, ir.Has) and isinstance(expr.target, ir.Index):
        exact = _value_cel(expr.target, lambda v: "true", positive)
    elif isinstance(expr, ir.Has) and isinstance(expr.target, ir.Field) and expr.target.name == "priority_class":
        exact = _value_cel(expr.target, lambda v: "true", positive)
    elif (
        isinstance(expr, ir.Contains)
        and isinstance(expr.item, ir.Lit)
        and isinstance(expr.item.value, str)
        and isinstance(expr.container, ir.Field)
        and expr.container.name in ("labels", "annotations")
    ):
        exact = _value_cel(ir.Index(expr.container, expr.item.value, expr.span), lambda v: "true", positive)
    if exact is not None:
        return exact
    if _mentions_identity(expr):
        return cel.identity_cel(expr, positive)
    if positive and eval_without_gpu(expr) is False:
        return gpu
    return TRUE if positive else FALSE


def _mentions_identity(expr: ir.Expr) -> bool:
    return any(cel.mentions(expr, f) for f in ("user", "groups", "serviceaccount"))


def over(expr: ir.Expr | None, positive: bool = True, gpu: str | None = None) -> str:
    """CEL that holds whenever `expr` may (positive), or only when it surely does (negative).

    `gpu` is the CEL standing for "the pod asks for a GPU" (default: the gpu-pod test; pass
    "true" when a separate matchCondition already requires it).
    """
    gpu = cel.gpu_pod_cel() if gpu is None else gpu
    if expr is None:
        return TRUE if positive else FALSE
    if isinstance(expr, ir.Lit) and isinstance(expr.value, bool):
        return TRUE if expr.value else FALSE
    if isinstance(expr, ir.And):
        if positive and eval_without_gpu(expr) is False:
            return _and([gpu, *(over(i, True, gpu) for i in expr.items)])
        return _and([over(i, positive, gpu) for i in expr.items])
    if isinstance(expr, ir.Or):
        return _or([over(i, positive, gpu) for i in expr.items])
    if isinstance(expr, ir.Not):
        return _not(over(expr.item, not positive, gpu))
    return _atom(expr, positive, gpu)


def any_block_cel(blocks: list[tuple[tuple[ir.Expr | None, ...], bool]], gpu_required: bool) -> str:
    """Over-approximation of any block acting, from (conditions, needs a GPU by meaning) pairs.

    Blocks that need a GPU share one gpu-pod test: `(gpu && (A || B)) || C` rather than
    repeating the long GPU expression per block. With `gpu_required` a separate
    matchCondition already demands a GPU, so it is left out here.
    """
    gpu = cel.gpu_pod_cel()
    with_gpu, without = [], []
    for conds, by_meaning in blocks:
        present = [c for c in conds if c is not None]
        if by_meaning or needs_gpu(*present):
            with_gpu.append(_and([over(c, True, TRUE) for c in present]))  # the gpu test is factored out
        else:
            without.append(_and([over(c, True, gpu) for c in present]))
    gpu_part = _or(with_gpu) if with_gpu else FALSE
    if not gpu_required:
        gpu_part = _and([gpu, gpu_part])
    return _or([gpu_part, *without])
