"""Lowering of `steer` blocks: preferred node affinity by a placement score (docs/placement.md, Steering).

`steer NAME { for EXPR; by fragmentation; nodes N; mode M }`: `by` is required (the score
is the mode a policy chooses); `nodes` defaults to 3. The first steer block whose `for`
matches a pod steers it, so a block after one with no `for` never steers anything (W0340).
"""

from __future__ import annotations

import difflib

from lang import ast, ir
from lang.checker import check_mode, check_statements, decl_name
from lang.diagnostics import Diagnostic, warning

DEFAULT_NODES = 3
MAX_NODES = 10  # preferred terms per pod: more only lengthens the pod spec, the scheduler weighs the first few


def lower_steer(low, b: ast.Block) -> ir.Steer | None:
    """`steer NAME { for; by fragmentation; nodes N; mode }`."""
    stmts = check_statements(b, low.diags)
    name = decl_name(b)
    selector = low.selector(stmts)
    by = stmts.get("by")
    if by is None:
        low.err("E0111", f"steer `{name}` states no `by`", b.span, "say what nodes are scored by: `by fragmentation`")
        return None
    if by.value.name not in ir.STEER_BY:
        close = difflib.get_close_matches(by.value.name, ir.STEER_BY, n=1)
        hint = f"did you mean `{close[0]}`?" if close else "scores: " + ", ".join(ir.STEER_BY)
        low.err("E0340", f"unknown steering score `{by.value.name}`", by.value.span, hint)
        return None
    nodes = DEFAULT_NODES
    line = stmts.get("nodes")
    if line is not None:
        text = line.value.text
        if not text.isdigit() or not 1 <= int(text) <= MAX_NODES:
            low.err("E0341", f"`nodes {text}` is not a whole number from 1 to {MAX_NODES}", line.value.span,
                    "how many nodes a pod is steered towards, best first, e.g. `nodes 3`")
            return None
        nodes = int(text)
    return ir.Steer(name, selector, by.value.name, nodes, check_mode(stmts, low.diags), b.span)  # type: ignore[arg-type]


def check_shadowed(steers: list[ir.Steer], diags: list[Diagnostic]) -> None:
    """W0340: the first matching steer block steers a pod, so every block after one without `for` never applies."""
    catch_all = next((s for s in steers if s.selector is None), None)
    if catch_all is None:
        return
    for s in steers[steers.index(catch_all) + 1:]:
        diags.append(warning("W0340", f"steer `{s.name}` never steers a pod", s.span,
                             f"steer `{catch_all.name}` ({catch_all.span.path}:{catch_all.span.line}) has no `for` and comes first; "
                             "give it a `for`, or merge the two"))
