"""`priority` declarations: unknown classes are denied, the `default` class is set by mutation.

The API server's Priority admission plugin runs BEFORE mutating webhooks and has
already resolved `spec.priority` (and `spec.preemptionPolicy`) for the pod as sent.
A patch that adds `priorityClassName` must therefore also set `spec.priority` to the
class value and `spec.preemptionPolicy` to match the class, or the API server rejects
the pod. Classes declared with `preempts` preempt (`PreemptLowerPriority`); the
others are declared `Never` (the compiler emits the PriorityClass manifests the same way).
"""

from __future__ import annotations

from typing import Callable

from lang import ir
from policy.context import Context, where

# Built-in classes of every cluster: never "unknown", so system pods are not denied.
SYSTEM_CLASSES = frozenset({"system-node-critical", "system-cluster-critical"})


def preemption_policy(p: ir.Priority) -> str:
    """The `preemptionPolicy` of a declared class."""
    return "PreemptLowerPriority" if p.preempts else "Never"


def make_check(priorities: tuple[ir.Priority, ...], mode: str) -> Callable[[Context], None] | None:
    """The per-request priority check, or None when the set declares no classes."""
    if not priorities:
        return None
    by_name = {p.name: p for p in priorities}
    declared = ", ".join(sorted(by_name))
    default = next((p for p in priorities if p.default), None)
    default_members = (
        {"priorityClassName": default.name, "priority": default.value, "preemptionPolicy": preemption_policy(default)}
        if default is not None
        else {}
    )
    unknown_location = where(priorities[0].span)

    def check(ctx: Context) -> None:
        w = ctx.w
        if w.operation != "CREATE" or w.total_gpus <= 0:
            return
        cls = w.priority_class
        if cls is None:
            if default is None or w.kind != "Pod":
                return
            block = f"priority {default.name}"
            ctx.blocks.append(block)
            if ctx.mutate:
                ctx.patch.set_members(("spec",), default_members)
            ctx.note(block, where(default.span), f"no priority class named; default {default.name} ({default.value}) applies")
            return
        p = by_name.get(cls)
        if p is not None:
            ctx.blocks.append(f"priority {p.name}")
            ctx.note(f"priority {p.name}", where(p.span), f"class {cls} is declared ({p.value})")
            return
        if cls in SYSTEM_CLASSES:
            return
        ctx.blocks.append("priority")
        ctx.find(
            "UnknownPriorityClass",
            "priority",
            unknown_location,
            f"priority class {cls!r} is not declared by the policy (declared: {declared})",
            mode,
            {"class": cls, "declared": sorted(by_name)},
        )

    return check
