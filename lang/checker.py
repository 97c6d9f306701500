"""Declaration-level checks of a policy set: names, duplicates, defaults, cohorts, statement repeats."""

from __future__ import annotations

import difflib
from collections import defaultdict

from lang import ast, ir
from lang.diagnostics import Diagnostic, error, warning
from lang.exprs import Scope

MODES = ("enforce", "warn", "audit")
REPEATABLE = (ast.Level, ast.RequireTopology, ast.Allow, ast.DenyStmt, ast.SetStmt)


def known(noun: str, names) -> str:
    """A help line listing what is declared: `declared models: h100, l4`."""
    return f"declared {noun}: " + (", ".join(sorted(names)) if names else "none")


def decl_name(d: ast.Decl) -> str:
    """The declared name; an unnamed agents block is called `agents`."""
    return d.name.name if d.name is not None else d.kind


def collect_scope(decls: list[ast.Decl], diags: list[Diagnostic]) -> Scope:
    """GPU models and topologies every expression may name; reports duplicate declarations."""
    seen: dict[tuple[str, str], ast.Decl] = {}
    scope = Scope()
    for d in decls:
        key = (d.kind, decl_name(d))
        where = d.name.span if d.name is not None else d.span
        if key in seen:
            first = seen[key].span
            diags.append(error("E0105", f"{d.kind} `{key[1]}` is declared twice", where, f"first declared at {first.path}:{first.line}"))
            continue
        seen[key] = d
        if d.kind == "gpu":
            scope.gpus.add(key[1])
        elif d.kind == "topology":
            scope.topologies[key[1]] = tuple(s.name.name for s in d.stmts if isinstance(s, ast.Level))
    return scope


def check_statements(block: ast.Block, diags: list[Diagnostic]) -> dict[str, ast.Stmt]:
    """The block's single-valued statements by key; a repeated one is E0106."""
    out: dict[str, ast.Stmt] = {}
    for s in block.stmts:
        if isinstance(s, REPEATABLE):
            continue
        key = s.key if isinstance(s, (ast.Setting, ast.Cond, ast.Models, *ast.BUDGET_STMTS)) else type(s).__name__
        if isinstance(s, ast.Setting) and s.of is not None:
            key = f"gpus of {s.of.name}"
        if key in out:
            first = out[key].span
            diags.append(error("E0106", f"`{key}` is given twice in {block.kind} `{decl_name(block)}`", s.span, f"first given at line {first.line}"))
            continue
        out[key] = s
    return out


def check_mode(stmts: dict[str, ast.Stmt], diags: list[Diagnostic]) -> ir.Mode:
    """The block's mode (enforce when absent); an unknown one is E0108."""
    s = stmts.get("mode")
    if s is None:
        return "enforce"
    name = s.value.name
    if name not in MODES:
        close = difflib.get_close_matches(name, MODES, n=1)
        hint = f"did you mean `{close[0]}`?" if close else "modes: enforce, warn, audit"
        diags.append(error("E0108", f"unknown mode `{name}`", s.value.span, hint))
        return "enforce"
    return name  # type: ignore[return-value]


def check_priorities(priorities: list[ir.Priority], diags: list[Diagnostic]) -> None:
    """At most one `default` class."""
    defaults = [p for p in priorities if p.default]
    for p in defaults[1:]:
        first = defaults[0].span
        diags.append(
            error("E0107", f"priority `{p.name}` is a second default", p.span, f"`{defaults[0].name}` is already the default ({first.path}:{first.line})")
        )


def check_cohorts(quotas: list[ir.Quota], diags: list[Diagnostic], cohorts: list[ir.Cohort] = ()) -> None:
    """A cohort with one member (and no pool, parent or child cohort) cannot borrow or lend anything: probably a typo in its name."""
    members: dict[str, list[ir.Quota]] = defaultdict(list)
    for q in quotas:
        if q.cohort is not None:
            members[q.cohort].append(q)
    names = sorted(members)
    linked = {c.name for c in cohorts if c.parent is not None or c.gpus} | {c.parent for c in cohorts if c.parent is not None}
    for cohort, qs in members.items():
        if len(qs) == 1 and cohort not in linked:
            others = [n for n in names if n != cohort]
            close = difflib.get_close_matches(cohort, others, n=1) if len(others) <= 200 else None  # bounded cost
            hint = f"did you mean `{close[0]}`?" if close else "add another quota to the cohort or remove the line"
            diags.append(warning("W0302", f"cohort `{cohort}` has only quota `{qs[0].name}`", qs[0].span, hint))


def check_topology_levels(block: ast.Block, diags: list[Diagnostic]) -> None:
    """Levels and their labels are distinct; at least one level."""
    levels = [s for s in block.stmts if isinstance(s, ast.Level)]
    if not levels:
        diags.append(error("E0111", f"topology `{decl_name(block)}` declares no levels", block.span, 'add levels widest first, e.g. `rack "topology.acme.io/rack"`'))
    names: set[str] = set()
    labels: set[str] = set()
    for lv in levels:
        if lv.name.name in names:
            diags.append(error("E0307", f"level `{lv.name.name}` appears twice", lv.name.span))
        if lv.label.value in labels:
            diags.append(error("E0307", f"label {lv.label.raw} names two levels", lv.label.span))
        if not lv.label.value:
            diags.append(error("E0111", "a level needs a node label key", lv.label.span))
        names.add(lv.name.name)
        labels.add(lv.label.value)


def check_borrow(stmts: dict[str, ast.Stmt], total: int | None, per_model: list[tuple[str, int]], borrow: int | None, diags: list[Diagnostic]) -> None:
    """`gpus N of MODEL` is a hard cap (docs/semantics.md): when it is the whole quota, MODEL pods can never borrow (W0305)."""
    if not borrow or "cohort" not in stmts:
        return  # no borrowing asked (no line, or `borrow 0`), or E0306 already
    b = stmts["borrow"]
    for model, amount in per_model:
        if total is not None and amount < total:
            continue  # its pods can borrow on the total line, within their own cap
        line = stmts[f"gpus of {model}"]
        cap = line.value.text
        if total is None:
            why = f"the quota has no total `gpus` for `borrow {b.value.text}` to raise, and `gpus {cap} of {model}` is a hard cap"
        else:
            why = f"`gpus {cap} of {model}` equals the total and is a hard cap, so they never hold more than {cap}"
        diags.append(
            warning(
                "W0305",
                f"{model} pods can never borrow: {why}",
                b.span,
                f"`borrow` cannot lift a per-model amount (docs/semantics.md, Quota); raise `gpus {cap} of {model}` (line {line.span.line}) to what {model} pods may hold, or drop the `borrow`",
            )
        )

def check_models(stmts: dict[str, ast.Stmt], scope: Scope, diags: list[Diagnostic]) -> tuple[str, ...]:
    """The declared GPU models a block's `models` line names (() when absent); unknown or repeated names are errors."""
    s = stmts.get("models")
    if not isinstance(s, ast.Models):
        return ()
    out: list[str] = []
    for ident in s.names:
        if ident.name not in scope.gpus:
            close = difflib.get_close_matches(ident.name, sorted(scope.gpus), n=1)
            hint = f"did you mean `{close[0]}`? " if close else ""
            diags.append(error("E0102", f"unknown GPU model `{ident.name}`", ident.span, hint + known("models", scope.gpus)))
        elif ident.name in out:
            diags.append(error("E0106", f"`{ident.name}` is listed twice in `models`", ident.span))
        else:
            out.append(ident.name)
    return tuple(out)
