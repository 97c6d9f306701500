"""The per-request pipeline as ONE generated function: every block's `for` inline, then its check.

Calling a selector closure per block costs two calls even when the block does not
match (most blocks, for most requests). The generated function tests each selector
inline and calls only the checks that apply, in evaluation order:

    def pipeline(ctx):
        w = ctx.w
        _c0(ctx)                                  # no selector (agents, priority)
        if (w.namespace == 'team-3'): _c1(ctx)    # quota team-3
        ...
"""

from __future__ import annotations

from typing import Callable, Sequence

from lang import ir
from policy.expr import Levels
from policy.exprgen import Gen, source


def build_pipeline(steps: Sequence[tuple[ir.Expr | None, Callable]], levels: Levels) -> Callable:
    """The function running `steps` = [(selector or None, check)] in order."""
    g = Gen(levels)
    lines = ["def pipeline(ctx):", "    w = ctx.w"]
    for selector, check in steps:
        name = g.const(check)
        if selector is None:
            lines.append(f"    {name}(ctx)")
        else:
            lines.append(f"    if {source(selector, g)}: {name}(ctx)")
    if len(lines) == 2:
        lines.append("    return None")
    namespace = {"__builtins__": {"bool": bool}, **g.consts}
    exec(compile("\n".join(lines), "<policy pipeline>", "exec"), namespace)  # noqa: S102 - source built from the IR only
    return namespace["pipeline"]
