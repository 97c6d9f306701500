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

from dataclasses import dataclass
from typing import Callable, Sequence

from lang import ir
from policy.compiler.expr import Levels
from policy.compiler.exprgen import Gen, source


@dataclass(frozen=True)
class Step:
    """One block in the pipeline: `guard` and `selector` before `check`.

    With `block` set (rules), the pipeline itself records the block as selected and
    calls `check` only when `when` also holds (tracing "`when` is false" otherwise).
    A guard is a constant condition written by the engine (never policy text).
    """

    guard: str | None
    selector: ir.Expr | None
    check: Callable
    block: str | None = None
    when: ir.Expr | None = None
    location: str = ""


def _note_when_false(ctx, block: str, location: str) -> None:
    ctx.note(block, location, "selected; `when` is false")


def build_pipeline(steps: Sequence[Step | Callable], levels: Levels) -> Callable:
    """The function running `steps` in order; a plain callable item is another pipeline to call."""
    g = Gen(levels)
    note = g.const(_note_when_false)
    lines = ["def pipeline(ctx):", "    w = ctx.w", "    blocks = ctx.blocks"]
    for step in steps:
        if not isinstance(step, Step):
            lines.append(f"    {g.const(step)}(ctx)")
            continue
        name = g.const(step.check)
        tests = [f"({step.guard})"] if step.guard else []
        if step.selector is not None:
            tests.append(source(step.selector, g))
        test = " and ".join(tests) or "True"
        if step.block is None:
            lines.append(f"    if {test}: {name}(ctx)" if tests else f"    {name}(ctx)")
            continue
        lines.append(f"    if {test}:")
        lines.append(f"        blocks.append({step.block!r})")
        if step.when is None:
            lines.append(f"        {name}(ctx)")
        else:
            lines.append(f"        if {source(step.when, g)}: {name}(ctx)")
            lines.append(f"        elif ctx.trace is not None: {note}(ctx, {step.block!r}, {step.location!r})")
    if len(lines) == 2:
        lines.append("    return None")
    namespace = {"__builtins__": {"bool": bool}, **g.consts}
    exec(compile("\n".join(lines), "<policy pipeline>", "exec"), namespace)  # noqa: S102 - source built from the IR only
    return namespace["pipeline"]
