"""IR -> compiled policy: an ordered list of named, pure compiler passes (OPA-style).

Each pass reads the `PolicySet` and what earlier passes produced, and adds to the
`Compiled` result. Nothing here runs per request; `Engine.decide` only calls the
generated pipeline these passes build, in kind order: agents, priority, fraction,
quota, budget, gang, rules, steer (identity first, mutations last).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable

from lang import ir
from policy.blocks import agents, budget, fraction, gang, priority, quota, rules, steer
from policy.blocks import models
from policy.compiler.expr import Levels, compile_condition, compile_expr, compile_template
from policy.context import where
from policy.compiler.pipeline import Step, build_pipeline

MODES = ("enforce", "warn", "audit")


@dataclass
class Compiled:
    """The output of the passes: closures and indexes the engine uses per request."""

    policy: ir.PolicySet
    mode_override: str | None
    levels: Levels = field(default_factory=Levels)
    model_by_product: dict[str, str] = field(default_factory=dict)
    model_memory: dict[str, int] = field(default_factory=dict)
    selectors: dict[str, Callable | None] = field(default_factory=dict)  # quota id -> selector (for the ledger)
    modes: dict[str, str] = field(default_factory=dict)  # block id -> effective mode
    identities: list[Callable] = field(default_factory=list)
    quota_specs: list[quota.QuotaSpec] = field(default_factory=list)
    budget_specs: list = field(default_factory=list)  # policy.budget.meter.BudgetSpec, for the per-snapshot meter
    checks: list[tuple[str, Callable]] = field(default_factory=list)  # (stage, check) in evaluation order
    steps: list[Step] = field(default_factory=list)  # checks[i] as a pipeline step: guard, `for`, check
    namespace_keys: dict[int, str] = field(default_factory=dict)  # position in `checks` -> the only namespace it can match
    block_ids: list[str] = field(default_factory=list)
    by_namespace: dict[str, Callable] = field(default_factory=dict)  # namespace -> pipeline of the checks that can apply
    unkeyed: Callable | None = None  # the pipeline for any other namespace

    def mode(self, declared: str) -> str:
        """The effective mode of a block declared with `declared`."""
        return self.mode_override or declared

    def cond(self, expr: ir.Expr | None):
        """A compiled condition (None for "always")."""
        return compile_condition(expr, self.levels)

    def value(self, expr: ir.Expr):
        """A compiled value expression."""
        return compile_expr(expr, self.levels)

    def message(self, tpl: ir.Template | None):
        """A compiled message template."""
        return compile_template(tpl, self.levels)


def _governing(policy: ir.PolicySet):
    return (*policy.quotas, *policy.fractions, *policy.gangs, *policy.agents, *policy.rules, *policy.budgets, *policy.steers)


def index_declarations(c: Compiled) -> None:
    """GPU models by product label value, topology levels by (topology, level)."""
    c.levels = Levels(c.policy.topologies)
    for g in c.policy.gpus:
        c.model_by_product[g.product] = g.name
        c.model_memory[g.name] = g.memory


def resolve_modes(c: Compiled) -> None:
    """Each governing block's effective mode (the serve-time override wins)."""
    for b in _governing(c.policy):
        c.modes[b.id] = c.mode(b.mode)
        c.block_ids.append(b.id)


def compile_selectors(c: Compiled) -> None:
    """Selectors needed outside the pipeline: quotas' (the ledger tests live pods) and agent identities.

    Every other `for` is generated inline into the pipelines by `index-by-namespace`.
    """
    for q in c.policy.quotas:
        c.selectors[q.id] = c.cond(q.selector)
    identities = [a.identity for a in c.policy.agents if a.identity is not None]
    if identities:  # one generated function tests every block's identity (the subject's `agent` field)
        span = identities[0].span
        c.identities.append(c.cond(identities[0] if len(identities) == 1 else ir.Or(tuple(identities), span)))


def compile_agents(c: Compiled) -> None:
    """Agents blocks: identity first, so an agent is denied before anything else is computed."""
    for a in c.policy.agents:
        check = agents.make_check(a, c.cond(a.identity), c.cond, c.message, c.modes[a.id])
        _add(c, "agents", None, check, AGENTS_GUARD)


def compile_priority(c: Compiled) -> None:
    """Priority declarations: default class mutation and unknown-class denial."""
    check = priority.make_check(c.policy.priorities, c.mode("enforce"))
    if check is not None:
        _add(c, "priority", None, check, PRIORITY_GUARD)


def compile_fractions(c: Compiled) -> None:
    """Fraction blocks."""
    for f in c.policy.fractions:
        _add(c, "fraction", f.selector, fraction.make_check(f, None, c.modes[f.id]), FRACTION_GUARD)
        if f.models:
            _add(c, "fraction", f.selector, models.make_check("fraction", f.name, f.id, f.span, f.models, c.modes[f.id]), FRACTION_GUARD)


def compile_quotas(c: Compiled) -> None:
    """Quota blocks and the spec list the per-snapshot ledger is built from."""
    for i, q in enumerate(c.policy.quotas):
        spec = quota.compile_quota(q, i, c.selectors[q.id], c.modes[q.id], namespace_key(q.selector))
        c.quota_specs.append(spec)  # the ledger tests the selector on live pods itself
        _add(c, "quota", q.selector, quota.make_check(spec, prefiltered=True), QUOTA_GUARD)
        if q.models:
            _add(c, "quota", q.selector, models.make_check("quota", q.name, q.id, q.span, q.models, c.modes[q.id]), QUOTA_GUARD)


def compile_budgets(c: Compiled) -> None:
    """Budget blocks (after quotas: a workload over its quota is denied there first) and the specs the meter is built from."""
    for i, b in enumerate(c.policy.budgets):
        key = namespace_key(b.selector)
        # The meter looks budgets up by namespace: a `for` that is only `namespace == "x"` needs no test after that.
        selector = None if key is not None and isinstance(b.selector, ir.Compare) else c.cond(b.selector)
        spec = budget.compile_budget(b, i, selector, c.modes[b.id], key)
        c.budget_specs.append(spec)
        _add(c, "budget", b.selector, budget.make_check(spec, c.policy.priorities), BUDGET_GUARD)


def compile_gangs(c: Compiled) -> None:
    """Gang blocks with their topology requirements' `when` closures."""
    for g in c.policy.gangs:
        whens = tuple(c.cond(t.when) for t in g.topology)
        # Conjuncts of `for` that read pods/total_gpus must see the gang view, so the check tests them.
        inline, own = gang.split_selector(g.selector)
        own_cond = c.cond(own) if own is not None else None
        _add(c, "gang", inline, gang.make_check(g, own_cond, whens, c.levels.label, c.modes[g.id]), GANG_GUARD)


def compile_rules(c: Compiled) -> None:
    """Rules last, so their `set` patches follow every other block's."""
    for r in c.policy.rules:
        check = rules.make_check(r, None, None, c.value, c.message, c.modes[r.id], selected=True)
        _add(c, "rule", r.selector, check, step=dict(block=r.id, when=r.when, location=where(r.span)))


def compile_steers(c: Compiled) -> None:
    """Steer blocks last, as one check: the first whose `for` matches a pod steers it (policy/blocks/steer.py)."""
    if c.policy.steers:
        blocks = [(s, c.cond(s.selector) if s.selector is not None else None, c.modes[s.id]) for s in c.policy.steers]
        _add(c, "steer", None, steer.make_check(blocks), steer.GUARD)


def namespace_key(expr: ir.Expr | None) -> str | None:
    """The namespace a selector requires (`namespace == "x"`, alone or as a conjunct), else None."""
    if isinstance(expr, ir.Compare) and expr.op == "==":
        sides = (expr.left, expr.right)
        for a, b in (sides, sides[::-1]):
            if isinstance(a, ir.Field) and a.name == "namespace" and isinstance(b, ir.Lit) and isinstance(b.value, str):
                return b.value
    if isinstance(expr, ir.And):
        for item in expr.items:
            key = namespace_key(item)
            if key is not None:
                return key
    return None


# What a kind of block concerns at all, tested before its `for` (cheap attribute tests first).
# The checks test the same again: the guards only save calls, they never decide.
AGENTS_GUARD = "w.agent"  # the engine sets it when any identity or the labels mark an agent
PRIORITY_GUARD = "w.operation == 'CREATE' and w.total_gpus > 0"
FRACTION_GUARD = "w.fraction is not None"
# Workload objects (policy/subject/workloads.py) also reach quota and gang on an UPDATE that adds GPUs, never while suspended.
QUOTA_GUARD = "(w.operation == 'CREATE' or w.added_gpus) and (w.total_gpus > 0 or w.gpu_memory) and not w.suspended"
BUDGET_GUARD = "(w.operation == 'CREATE' or w.added_gpus) and w.total_gpus > 0 and not w.suspended"
GANG_GUARD = "(w.operation == 'CREATE' or w.added_gpus) and (w.total_gpus > 0 or w.kind != 'Pod') and not w.suspended"  # CPU pods (launchers) are no gang members


def _add(c: Compiled, stage: str, selector: ir.Expr | None, check: Callable, guard: str | None = None, step: dict | None = None) -> None:
    """Append a check; the pipeline tests `guard` and `selector` before calling it; note its namespace key."""
    key = namespace_key(selector)
    if key is not None:
        c.namespace_keys[len(c.checks)] = key
    c.checks.append((stage, check))
    c.steps.append(Step(guard, selector, check, **(step or {})))


def index_by_namespace(c: Compiled) -> None:
    """Rule indexing (as OPA does): per namespace, a pipeline of only the checks that can apply there.

    Each kind (stage) of block is one shared function for the blocks that name no single
    namespace; a namespace's pipeline calls those in stage order and inlines its own
    blocks after them, so the generated code grows with blocks + namespaces x stages,
    not blocks x namespaces.
    """
    keyed = c.namespace_keys
    stages: dict[str, tuple[list[Step], dict[str, list[Step]]]] = {}
    for i, ((stage, _), step) in enumerate(zip(c.checks, c.steps)):
        shared, own = stages.setdefault(stage, ([], {}))
        if i in keyed:
            own.setdefault(keyed[i], []).append(step)
        else:
            shared.append(step)
    c.unkeyed = build_pipeline([step for shared, _ in stages.values() for step in shared], c.levels)
    segments = {stage: build_pipeline(shared, c.levels) for stage, (shared, _) in stages.items() if shared}
    c.by_namespace = {}
    for ns in set(keyed.values()):
        items: list = []
        for stage, (_, own) in stages.items():
            if stage in segments:
                items.append(segments[stage])
            items.extend(own.get(ns, ()))
        c.by_namespace[ns] = build_pipeline(items, c.levels)


PASSES: list[tuple[str, Callable[[Compiled], None]]] = [
    ("index-declarations", index_declarations),
    ("resolve-modes", resolve_modes),
    ("compile-selectors", compile_selectors),
    ("compile-agents", compile_agents),
    ("compile-priority", compile_priority),
    ("compile-fractions", compile_fractions),
    ("compile-quotas", compile_quotas),
    ("compile-budgets", compile_budgets),
    ("compile-gangs", compile_gangs),
    ("compile-rules", compile_rules),
    ("compile-steers", compile_steers),
    ("index-by-namespace", index_by_namespace),
]


def compile_policy_set(policy: ir.PolicySet, mode_override: str | None = None) -> Compiled:
    """Run every pass in order over `policy`."""
    if mode_override not in (None, *MODES):
        raise ValueError(f"mode override must be one of {', '.join(MODES)}, not {mode_override!r}")
    c = Compiled(policy, mode_override)
    for _, run in PASSES:
        run(c)
    return c


_KEY_BAD = re.compile(r"[^A-Za-z0-9_.-]+")


def audit_key(block_id: str) -> str:
    """A qualified-name audit annotation key for a block id: `quota team-a` -> `quota.team-a`.

    The API server prefixes webhook audit keys with the webhook's name, so the final
    key reads e.g. `validate.allot.dev/quota.team-a`.
    """
    key = _KEY_BAD.sub("-", block_id.replace(" ", ".")).strip("-_.")[:63].strip("-_.")
    return key or "allot"
