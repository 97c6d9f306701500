"""`priority` declarations: unknown classes are denied, the `default` class is set by mutation.

The API server's Priority admission plugin runs BEFORE mutating webhooks and has
already resolved `spec.priority` (and `spec.preemptionPolicy`) for the pod as sent;
after a webhook mutates the pod it runs again and computes both fields from the LIVE
PriorityClass, refusing the pod when the patch says otherwise. So the patch carries the
live class's value and preemption policy (from the cluster snapshot) and the policy's
declaration only when the cluster has no such class yet. Declared with `preempts` means
`PreemptLowerPriority`, otherwise `Never`, as the compiled PriorityClass manifests say;
`policy/blocks/priority_drift.py` reports live classes that differ.
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


def live_fields(p: ir.Priority, snapshot) -> tuple[int, str, bool]:
    """(value, preemptionPolicy, live?) the Priority admission plugin computes for class `p`."""
    live = snapshot.priority_class(p.name) if snapshot is not None else None
    if live is None or type(live.get("value")) is not int:
        return p.value, preemption_policy(p), False
    # The API server defaults an absent preemptionPolicy to PreemptLowerPriority when it stores a class.
    return live["value"], live.get("preemptionPolicy") or "PreemptLowerPriority", True


def is_priority_group(w) -> bool:
    """An upstream `scheduling.k8s.io` PodGroup: the Priority plugin admits its priorityClassName too."""
    if w.kind != "PodGroup" or w.obj is None:
        return False
    api = w.obj.get("apiVersion")
    return type(api) is str and api.startswith("scheduling.k8s.io/")


def make_check(priorities: tuple[ir.Priority, ...], mode: str) -> Callable[[Context], None] | None:
    """The per-request priority check, or None when the set declares no classes."""
    if not priorities:
        return None
    by_name = {p.name: p for p in priorities}
    declared = ", ".join(sorted(by_name))
    default = next((p for p in priorities if p.default), None)
    unknown_location = where(priorities[0].span)
    # Block id and location per class, built once: a pod of a declared class formats nothing unless explained.
    ids = {p.name: (f"priority {p.name}", where(p.span)) for p in priorities}

    def check(ctx: Context) -> None:
        w = ctx.w
        if w.operation != "CREATE" or w.total_gpus <= 0:
            return
        cls = w.priority_class
        if cls is None:
            if default is None or (w.kind != "Pod" and not is_priority_group(w) and not w.template_paths):
                return
            block, location = ids[default.name]
            ctx.blocks.append(block)
            value, policy, live = live_fields(default, ctx.snapshot)
            if ctx.mutate and w.template_paths:  # a workload object: its pods get the class from each template
                for path in w.template_paths:
                    if path is not None:  # the Priority plugin fills priority and preemptionPolicy on each pod
                        ctx.patch.set(path + ("priorityClassName",), default.name)
            elif ctx.mutate:
                members = {"priorityClassName": default.name, "priority": value}
                if w.kind == "Pod":  # a PodGroup has no preemptionPolicy
                    members["preemptionPolicy"] = policy
                ctx.patch.set_members(("spec",), members)
            if ctx.trace is not None:
                source = "the live class" if live else "declared; no such class in the cluster yet"
                ctx.note(block, location, f"no priority class named; default {default.name} ({value}, {policy}: {source}) applies")
            return
        if cls in ids:  # `in` + subscript, not .get: this runs on every pod of a declared class
            block, location = ids[cls]
            ctx.blocks.append(block)
            if ctx.trace is not None:  # a note is only read by --explain: do not format it otherwise
                p = by_name[cls]
                live = f"; the live class says {w.priority}" if w.priority is not None and w.priority != p.value else ""
                ctx.note(block, location, f"class {cls} is declared ({p.value}){live}")
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
