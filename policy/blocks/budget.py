"""`budget` blocks at admission: is the period's GPU-hour budget spent, or would this workload's stated run spend it?

All in integers: the meter counts milli-GPU x milliseconds (policy/budget/meter.py), a budget's
amount is milli-GPU-seconds. A workload is spent-judged when it is new work: a CREATE, or an
UPDATE adding GPUs; a pod its workload's controller makes (a JobSet's, a Deployment's) is
metered but not judged again (its workload was). It is *spent* when

    used >= amount                             (nothing left), or
    used + requested x stated duration > amount  (its own run would overrun it)

and then `on spent` decides: deny, warn, or move it to a lower priority tier (a patch on
/mutate; /validate admits it only at or below that tier).
"""

from __future__ import annotations

from collections.abc import Callable

from lang import ir
from lang.quantity import format_milli
from policy.blocks.priority import live_fields
from policy.budget import figures
from policy.budget.duration import stated_duration
from policy.budget.meter import BudgetSpec
from policy.context import Context, where


def compile_budget(b: ir.Budget, index: int, selector, mode: str, namespace: str | None = None) -> BudgetSpec:
    """The compiled form of one `budget` block."""
    return BudgetSpec(index, b.id, b.name, where(b.span), selector, b.model, b.amount, b.period, b.zone, b.on_spent, b.tier,
                      b.thresholds, mode, namespace)


def made_by_controller(w) -> bool:
    """A Pod with a controlling owner (its workload was judged), or a workload object another one's controller made."""
    meta = (w.obj or {}).get("metadata") if isinstance(w.obj, dict) else None
    refs = (meta or {}).get("ownerReferences") if isinstance(meta, dict) else None
    return isinstance(refs, list) and any(isinstance(r, dict) and r.get("controller") is True for r in refs)


def make_check(spec: BudgetSpec, priorities: tuple[ir.Priority, ...]) -> Callable[[Context], None]:
    """The per-request check of one budget."""
    i, block, location, mode, name = spec.index, spec.id, spec.location, spec.mode, spec.name
    limit = spec.amount * 1000  # milli-GPU-ms
    unit, when = figures.unit(spec.model), figures.PERIOD_WORDS[spec.period]
    tier = next((p for p in priorities if p.name == spec.tier), None)

    def check(ctx: Context) -> None:
        w = ctx.w
        if (w.operation != "CREATE" and not w.added_gpus) or w.suspended or w.total_gpus <= 0:
            return
        if spec.model is not None and w.gpu_model != spec.model:
            return
        meter = ctx.state.meter_at(int(ctx.now * 1000)) if ctx.state is not None else None
        if meter is None:
            return
        ctx.blocks.append(block)
        if made_by_controller(w):
            ctx.note(block, location, f"{w.kind} {w.name or ''} is made by its workload's controller: metered, judged with its workload")
            return
        used = meter.used_at(i, meter.now_ms(ctx.now))
        requested = w.added_gpus if w.operation != "CREATE" else w.total_gpus
        seconds, source = stated_duration(w)
        projected = requested * seconds * 1000 if seconds else 0
        head = f"{name}: {figures.hours(used)} of {figures.hours(limit)} {unit} used {when}"
        runs = f"this {w.kind} runs {format_milli(requested)} GPUs"
        if seconds:
            runs += f" for {figures.duration(seconds)} ({source}): {figures.hours(projected)} {unit}"
        elif source is not None:  # an annotation that does not read: judged as if it stated nothing
            ctx.find("BudgetDurationUnreadable", block, location, f"{name}: {source}; judged without a run time", "warn", {})
        data = {"used": used // 1000, "amount": spec.amount, "requested": requested, "duration": seconds,
                "projected": projected // 1000, "period": meter.key[i]}
        spent = used >= limit or used + projected > limit
        if not spent:
            _thresholds(ctx, spec, used + projected, limit, head, data)
            ctx.note(block, location, f"{head}; {runs}: fits")
            return
        why = "spent" if used >= limit else f"{figures.hours(used)} + {figures.hours(projected)} > {figures.hours(limit)}"
        if spec.on_spent == "priority" and tier is not None:
            _move(ctx, spec, tier, f"{head}; {runs}; {why}", data)
            return
        action_mode = "warn" if spec.on_spent == "warn" else mode
        verdict = "denied" if action_mode == "enforce" else "over budget"
        ctx.find("BudgetSpent", block, location, f"{head}; {runs}; {why}: {verdict}", action_mode, data)

    return check


def _thresholds(ctx: Context, spec: BudgetSpec, use: int, limit: int, head: str, data: dict) -> None:
    """A warning at the highest `warn at` share the use (with this workload's stated run) has reached."""
    reached = [t for t in spec.thresholds if use * 1000 >= t * limit]
    if reached:
        t = reached[-1]
        ctx.find("BudgetThreshold", spec.id, spec.location,
                 f"{head} ({figures.percent(use, limit)}, past the {t / 10:g} % warning)", "warn", {**data, "threshold": t})


def _move(ctx: Context, spec: BudgetSpec, tier: ir.Priority, text: str, data: dict) -> None:
    """`on spent priority TIER`: new work runs at TIER or lower; /mutate moves it there, /validate holds anything above."""
    w = ctx.w
    block, location = spec.id, spec.location
    at_or_below = w.priority_class == tier.name or (w.priority is not None and w.priority <= tier.value)
    if at_or_below:
        ctx.note(block, location, f"{text}; it runs at {w.priority_class or w.priority}, at or below {tier.name}: admitted")
        return
    data = {**data, "tier": tier.name}
    if ctx.mutate and spec.mode == "enforce":
        value, preemption, _ = live_fields(tier, ctx.snapshot)
        if w.template_paths:  # a workload object: each pod template gets the class (the Priority plugin fills the rest)
            for path in w.template_paths:
                if path is not None:
                    ctx.patch.set(path + ("priorityClassName",), tier.name)
        else:
            members = {"priorityClassName": tier.name, "priority": value}
            if w.kind == "Pod":
                members["preemptionPolicy"] = preemption
            ctx.patch.set_members(("spec",), members)
        ctx.find("BudgetMovedToTier", block, location, f"{text}: moved to priority {tier.name} ({value})", "audit", data)
        return
    verdict = "denied" if spec.mode == "enforce" else f"would move it to priority {tier.name}"
    ctx.find("BudgetSpent", block, location,
             f"{text}; spent budgets admit new work at priority {tier.name} ({tier.value}) or lower: {verdict}", spec.mode, data)
