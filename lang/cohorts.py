"""Cohort trees: lowering `cohort` blocks and the checks that need the whole tree (parents, cycles, limits never used).

Semantics are Kueue's hierarchical cohorts (docs/reclaim.md): a node's subtree quota is its
own nominal plus what each child lends it (the child's subtree, or its `lend`); a node may
borrow from its parent up to `borrow`. The checks here evaluate the tree with no usage at
all, so "can never" means: not even in an empty cluster.
"""

from __future__ import annotations

import difflib
from collections import defaultdict

from lang import ast, ir
from lang.diagnostics import Diagnostic, error, warning
from lang.ir import Type

MAX_WEIGHT = 2_147_483_648_000  # milli: 2^31, as E0305 bounds every amount


def lower_cohort(low, b: ast.Block) -> ir.Cohort:
    """One `cohort` block: parent, own pool, limits towards the parent, weight."""
    from lang.checker import check_statements, decl_name

    stmts = check_statements(b, low.diags)
    gpus = stmts.get("gpus")
    for key, s in stmts.items():
        if key.startswith("gpus of "):
            low.err("E0114", "a cohort's pool counts GPU-equivalents: `gpus N of MODEL` belongs in a quota", s.span)
    parent = stmts.get("parent")
    return ir.Cohort(
        name=decl_name(b),
        parent=parent.value.name if parent is not None else None,
        gpus=low.amount(gpus, Type.GPU),
        borrow=low.amount(stmts.get("borrow"), Type.GPU),
        lend=low.amount(stmts.get("lend"), Type.GPU),
        weight=lower_weight(low, stmts.get("weight")),
        span=b.span,
    )


def lower_weight(low, s: ast.Setting | None) -> int | None:
    """`weight W` in milli (Kueue accepts any non-negative quantity; 0 means always last in fair sharing)."""
    if s is None:
        return None
    value = low.amount(s, Type.FRACTION)
    if value is not None and not 0 <= value <= MAX_WEIGHT:
        low.err("E0305", f"weight {s.value.text} is out of range", s.value.span, "a weight is a non-negative number, 1 by default")
        return None
    return value


class _Node:
    __slots__ = ("name", "kind", "nominal", "borrow", "lend", "parent", "children", "span", "decl")

    def __init__(self, name: str, kind: str, nominal: int, borrow, lend, span, decl=None):
        self.name, self.kind, self.nominal, self.borrow, self.lend, self.span, self.decl = name, kind, nominal, borrow, lend, span, decl
        self.parent: _Node | None = None
        self.children: list[_Node] = []


def check_tree(quotas: list[ir.Quota], cohorts: list[ir.Cohort], diags: list[Diagnostic], unparsed: set) -> None:
    """Parents exist (E0320), no cycles (E0321), and no limit that can never be used (W0320–W0324)."""
    declared = {c.name: c for c in cohorts}
    named = {q.cohort for q in quotas if q.cohort is not None}
    broken = {name for kind, name in unparsed if kind == "cohort"}
    nodes: dict[str, _Node] = {}
    for name in sorted(named | set(declared)):
        c = declared.get(name)
        nodes[name] = _Node(name, "cohort", (c.gpus or 0) if c else 0, c.borrow if c else None, c.lend if c else None,
                            c.span if c else None, c)
    for c in cohorts:
        if c.parent is None:
            continue
        if c.parent not in nodes:
            if c.parent in broken:
                continue
            close = difflib.get_close_matches(c.parent, list(nodes), n=1) if len(nodes) <= 200 else None
            hint = f"did you mean `{close[0]}`?" if close else "declare `cohort " + c.parent + " { … }`, or name a cohort a quota joins"
            diags.append(error("E0320", f"cohort `{c.name}` names an unknown parent cohort `{c.parent}`", c.span, hint))
            continue
        nodes[c.name].parent = nodes[c.parent]
    for c in cohorts:  # a parent chain that comes back: Kueue refuses such a tree (ErrCohortHasCycle)
        seen, n = [c.name], nodes[c.name].parent
        while n is not None and n.name not in seen:
            seen.append(n.name)
            n = n.parent
        if n is not None and n.name == c.name:
            diags.append(error("E0321", f"cohort `{c.name}` is its own ancestor: {' -> '.join(seen + [c.name])}", c.span,
                               "a cohort tree has a root; remove one `parent` line"))
            return  # the limits of a cyclic tree mean nothing
    for c in cohorts:
        if c.parent is not None and c.parent in nodes:
            nodes[c.parent].children.append(nodes[c.name])
    leaves = []
    for q in quotas:
        if q.cohort is None:
            if q.weight is not None:
                diags.append(warning("W0324", f"quota `{q.name}` sets a `weight` but joins no cohort: fair sharing needs one", q.span,
                                     "add `cohort NAME`, or remove the `weight` line"))
            continue
        leaf = _Node(q.name, "quota", q.gpus or 0, q.borrow, q.lend, q.span, q)
        leaf.parent = nodes[q.cohort]
        nodes[q.cohort].children.append(leaf)
        leaves.append(leaf)
    if broken or any(kind == "quota" for kind, _ in unparsed):
        return  # a block that did not parse may be the member or the parent the checks would miss
    _check_members(nodes, diags)
    _check_limits(nodes, leaves, diags)


def _check_members(nodes: dict[str, _Node], diags: list[Diagnostic]) -> None:
    for n in nodes.values():
        if n.decl is None or n.children:
            continue
        diags.append(warning("W0320", f"cohort `{n.name}` has no members: no quota joins it and no cohort names it as `parent`", n.span,
                             f"add `cohort {n.name}` to a quota, or `parent {n.name}` to a cohort"))
    for n in nodes.values():
        if n.decl is not None and n.parent is None:
            for key in ("borrow", "lend"):
                s = getattr(n.decl, key)
                if s is not None:
                    diags.append(warning("W0321", f"cohort `{n.name}` has no parent, so its `{key}` can never be used", n.span,
                                         f"give it a `parent`, or remove the `{key}` line"))


def subtree(n: _Node) -> int:
    """Kueue SubtreeQuota: own nominal plus what each child stores in it (its subtree beyond its guaranteed part)."""
    return n.nominal + sum(subtree(c) - guaranteed(c) for c in n.children)


def guaranteed(n: _Node) -> int:
    """What a node keeps from its parent: its subtree beyond `lend` (0 without a `lend`)."""
    return max(0, subtree(n) - n.lend) if n.lend is not None else 0


def potential(n: _Node) -> int:
    """The most a node can ever use, with nothing else used (Kueue potentialAvailable)."""
    if n.parent is None:
        return subtree(n)
    out = guaranteed(n) + potential(n.parent)
    return min(out, subtree(n) + n.borrow) if n.borrow is not None else out


def _check_limits(nodes: dict[str, _Node], leaves: list[_Node], diags: list[Diagnostic]) -> None:
    from lang.quantity import format_milli

    borrowers: dict[_Node, list[_Node]] = defaultdict(list)
    for leaf in leaves:
        borrowers[_root(leaf)].append(leaf)
    for n in [*nodes.values(), *leaves]:
        if n.parent is None or not n.borrow or n.decl is None or (n.kind == "quota" and n.decl.gpus is None):
            continue  # a quota without a total: W0305 says its `borrow` lifts nothing
        unlimited = _Node(n.name, n.kind, n.nominal, None, n.lend, n.span)
        unlimited.parent, unlimited.children = n.parent, n.children
        most = potential(unlimited) - subtree(n)
        lone = len(n.parent.children) == 1 and n.parent.parent is None and not n.parent.nominal
        if most < n.borrow and not (lone and n.kind == "quota"):  # a lone member: W0302 says it
            what = "nothing" if most <= 0 else f"at most {format_milli(most)}"
            diags.append(warning("W0322", f"{n.kind} `{n.name}` may borrow {format_milli(n.borrow)}, but its cohort tree can lend it {what}",
                                 n.span, "lower `borrow` to what can be lent, or raise the lenders' `gpus`/`lend`"))
    for n in [*nodes.values(), *leaves]:
        if n.parent is None or n.lend is None or n.lend == 0 or n.decl is None:
            continue
        others = [q for q in borrowers[_root(n)] if not _within(q, n) and q.borrow != 0]
        if not others:
            diags.append(warning("W0323", f"{n.kind} `{n.name}` lends {format_milli(n.lend)}, but no other quota of its cohort tree may borrow",
                                 n.span, "every other quota has `borrow 0`: remove the `lend`, or let a quota borrow"))


def _root(n: _Node) -> _Node:
    while n.parent is not None:
        n = n.parent
    return n


def _within(q: _Node, n: _Node) -> bool:
    while q is not None:
        if q is n:
            return True
        q = q.parent
    return False
