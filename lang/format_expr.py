"""Canonical text of expressions and statements (the formatter's leaves)."""

from __future__ import annotations

from lang import ast


def show_expr(e: ast.Expr) -> str:
    """One expression on one line; the author's parentheses are kept, spacing is canonical."""
    if isinstance(e, ast.Path):
        return e.dotted
    if isinstance(e, ast.Str):
        return e.raw
    if isinstance(e, ast.Num):
        return e.text
    if isinstance(e, ast.Const):
        return {True: "true", False: "false", None: "none"}[e.value]
    if isinstance(e, ast.IndexExpr):
        return f"{show_expr(e.target)}[{e.key.raw}]"
    if isinstance(e, ast.HasExpr):
        return f"has({show_expr(e.target)})"
    if isinstance(e, ast.NotExpr):
        return f"not {show_expr(e.item)}"
    if isinstance(e, ast.NegExpr):
        return f"-{show_expr(e.item)}"
    if isinstance(e, ast.BoolOp):
        return f" {e.op} ".join(show_expr(i) for i in e.items)
    if isinstance(e, (ast.CompareExpr, ast.ArithExpr)):
        return f"{show_expr(e.left)} {e.op} {show_expr(e.right)}"
    if isinstance(e, ast.MatchesExpr):
        return f"{show_expr(e.target)} matches {e.pattern.raw}"
    if isinstance(e, ast.InExpr):
        return f"{show_expr(e.item)} in {show_expr(e.container)}"
    if isinstance(e, ast.Paren):
        return f"({show_expr(e.item)})"
    raise AssertionError(f"unhandled expression {type(e).__name__}")


def _value(v) -> str:
    if isinstance(v, ast.Str):
        return v.raw
    if isinstance(v, ast.Num):
        return v.text
    return v.name


def show_stmt(s: ast.Stmt) -> str:
    """One statement on one line."""
    if isinstance(s, ast.Setting):
        if s.value is None:
            return s.key
        text = f"{s.key} {_value(s.value)}"
        return text + (f" of {s.of.name}" if s.of is not None else "")
    if isinstance(s, ast.Level):
        return f"{s.name.name} {s.label.raw}"
    if isinstance(s, ast.Cond):
        return f"{s.key} {show_expr(s.expr)}"
    if isinstance(s, ast.RequireTopology):
        when = f" when {show_expr(s.when)}" if s.when is not None else ""
        return f"require topology {s.topology.name}.{s.level.name}{when}"
    if isinstance(s, ast.Allow):
        verbs = ", ".join(v.name for v in s.verbs)
        resources = ", ".join(r.name for r in s.resources)
        when = f" when {show_expr(s.when)}" if s.when is not None else ""
        return f"allow {verbs} {resources}{when}"
    if isinstance(s, ast.DenyStmt):
        parts = ["deny"]
        if s.when is not None:
            parts.append(f"when {show_expr(s.when)}")
        if s.message is not None:
            parts.append(s.message.raw)
        return " ".join(parts)
    if isinstance(s, ast.Models):
        return "models " + ", ".join(n.name for n in s.names)
    if isinstance(s, ast.GpuHours):
        return f"gpu_hours {s.amount.text}" + (f" of {s.model.name}" if s.model is not None else "")
    if isinstance(s, ast.Period):
        return f"period {s.unit.name}" + (f" in {s.zone.raw}" if s.zone is not None else "")
    if isinstance(s, ast.OnSpent):
        return f"on spent {s.action.name}" + (f" {s.tier.name}" if s.tier is not None else "")
    if isinstance(s, ast.Thresholds):
        return "warn at " + ", ".join(f"{v.text}%" for v in s.values)
    if isinstance(s, ast.HalfLife):
        return f"half_life {s.amount.text} {s.unit.name}"
    if isinstance(s, ast.SetStmt):
        return f"set {s.target.name}[{s.key.raw}] = {show_expr(s.value)}"
    raise AssertionError(f"unhandled statement {type(s).__name__}")
