"""Declared priority classes against the cluster's live PriorityClasses: what differs, and why it matters.

The Priority admission plugin computes a pod's `priority` and `preemptionPolicy` from
the live class, so a live class that differs from the declaration changes what a
defaulted pod gets (Allot patches the live values), and a cluster `globalDefault`
class the policy does not declare is set on every class-less pod before Allot sees it.
`allot compile` writes the PriorityClasses that make cluster and policy agree.
"""

from __future__ import annotations

from dataclasses import dataclass

from lang import ir
from policy.blocks.priority import preemption_policy

# PriorityClass `value` and `preemptionPolicy` are immutable: a differing class is replaced, not patched.
FIX_IMMUTABLE = "kubectl replace --force -f priorityclasses.yaml (value and preemptionPolicy are immutable)"
FIX_APPLY = "kubectl apply -f priorityclasses.yaml (from allot compile)"


@dataclass(frozen=True, slots=True)
class Drift:
    """One disagreement: the class, which field (value, preemptionPolicy, globalDefault, missing), both sides."""

    name: str
    field: str
    declared: object
    live: object
    message: str
    fix: str
    span: object = None  # the declaring block's span (lang.span.Span); None for an undeclared class

    def to_json(self) -> dict:
        """A JSON-ready dict."""
        return {"class": self.name, "field": self.field, "declared": self.declared, "live": self.live,
                "message": self.message, "fix": self.fix}


def _live_policy(pc: dict) -> str:
    return pc.get("preemptionPolicy") or "PreemptLowerPriority"  # what the API server stores when absent


def priority_drift(priorities: tuple[ir.Priority, ...], snapshot) -> list[Drift]:
    """Every difference between the declared classes and the snapshot's PriorityClasses, in a stable order."""
    out: list[Drift] = []
    if snapshot is None:
        return out
    declared = {p.name for p in priorities}
    for p in sorted(priorities, key=lambda p: p.name):
        live = snapshot.priority_class(p.name)
        if live is None:
            out.append(Drift(p.name, "missing", p.value, None,
                             f"priority class {p.name} is declared but not in the cluster: the API server refuses "
                             f"pods naming it (no PriorityClass with name {p.name} was found)", FIX_APPLY, p.span))
            continue
        value = live.get("value")
        if value != p.value:
            out.append(Drift(p.name, "value", p.value, value,
                             f"priority class {p.name} is declared {p.value} but the cluster's says {value}: "
                             f"pods get {value}", FIX_IMMUTABLE, p.span))
        want, got = preemption_policy(p), _live_policy(live)
        if got != want:
            out.append(Drift(p.name, "preemptionPolicy", want, got,
                             f"priority class {p.name} is declared {want} but the cluster's says {got}: pods get {got}",
                             FIX_IMMUTABLE, p.span))
        if live.get("globalDefault") is True:
            out.append(Drift(p.name, "globalDefault", False, True,
                             f"priority class {p.name} is the cluster's globalDefault: every pod without a class "
                             f"gets it, not only GPU workloads", FIX_APPLY, p.span))
    default = snapshot.default_priority_class()
    if default is not None:
        name = (default.get("metadata") or {}).get("name")
        if name not in declared:
            out.append(Drift(name, "globalDefault", None, True,
                             f"the cluster's globalDefault class {name} is not declared: the API server sets it on "
                             f"every pod without a class before Allot sees it, so GPU pods are denied as "
                             f"UnknownPriorityClass and the declared default never applies",
                             f"declare `priority {name} {default.get('value')}` or clear globalDefault on {name}"))
    return out
