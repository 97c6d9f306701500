"""IR expressions -> Python functions over a `Workload`, compiled once per policy set.

The generated code (`exprgen`) is what runs; `reference` holds the same semantics as nested
closures, which a differential test holds equal, plus level comparisons and templates.
"""

from __future__ import annotations

from typing import Callable

from lang import ir
from policy.compiler.exprgen import generate, generate_condition
from policy.compiler.reference import Getter, Levels, compile_reference, compile_template, render_value

__all__ = ["Getter", "Levels", "compile_condition", "compile_expr", "compile_reference", "compile_template", "render_value"]


def compile_expr(expr: ir.Expr, levels: Levels | None = None) -> Getter:
    """A function computing `expr` on a Workload: ONE generated Python function per expression.

    Nested closures cost a call per node; the generated function evaluates the whole
    expression inline, with the same semantics as the reference closures of `compile_reference`.
    """
    return generate(expr, levels or Levels())


def compile_condition(expr: ir.Expr | None, levels: Levels | None = None) -> Callable[[object], bool] | None:
    """A truth-valued function, or None for "no condition" (always true; callers skip the call)."""
    if expr is None:
        return None
    return generate_condition(expr, levels or Levels())
