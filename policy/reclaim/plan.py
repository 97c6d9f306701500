"""A plan as data: the victims (whole workloads), what each frees, and the rules behind it."""

from __future__ import annotations

from dataclasses import dataclass

from lang.quantity import format_milli


@dataclass(frozen=True, slots=True)
class VictimPod:
    """One pod of a victim: what an eviction names (and the node it frees GPUs on, when bound)."""

    namespace: str
    name: str
    uid: str | None
    node: str | None
    gpus: int  # milli-GPU

    def to_json(self) -> dict:
        """A JSON-ready dict."""
        return {"namespace": self.namespace, "name": self.name, "uid": self.uid, "node": self.node, "gpus": self.gpus}


@dataclass(frozen=True, slots=True)
class Victim:
    """A whole workload to give way: `suspend` a suspendable kind (it comes back), else `evict` every pod."""

    kind: str
    namespace: str
    name: str
    uid: str | None
    action: str  # evict | suspend
    quotas: tuple[str, ...]  # ids of the quotas its GPUs are charged to
    priority: int
    gpus: int  # milli-GPU freed
    pods: tuple[VictimPod, ...]
    reason: str  # why this workload: borrowed from another quota, or a lower priority in the same quota
    admitted: str = ""  # its earliest pod's creationTimestamp (the order's "most recently admitted")

    def to_json(self) -> dict:
        """A JSON-ready dict (the shape the controller executes)."""
        return {"kind": self.kind, "namespace": self.namespace, "name": self.name, "uid": self.uid, "action": self.action,
                "quotas": list(self.quotas), "priority": self.priority, "gpus": self.gpus, "reason": self.reason,
                "admitted": self.admitted, "pods": [p.to_json() for p in self.pods]}

    def describe(self) -> str:
        """`suspend JobSet team-b/train (8 GPUs)`."""
        return f"{self.action} {self.kind} {self.namespace}/{self.name} ({format_milli(self.gpus)} GPUs)"


@dataclass(frozen=True, slots=True)
class Plan:
    """Victims that let a request land, in the order chosen; `kind` is reclaim, fair-share or preempt."""

    kind: str
    quota: str  # the requesting quota's id
    workload: str  # `Kind namespace/name` of the request
    victims: tuple[Victim, ...]
    freed: int  # milli-GPU, all victims
    rules: tuple[str, ...]  # quota, cohort and priority ids behind the plan
    nodes: tuple[tuple[str, int], ...] = ()  # where the request lands once the victims are gone (node, pods)
    placed: bool = True  # False: no placement evaluator (quota arithmetic alone decided)

    def to_json(self) -> dict:
        """A JSON-ready dict (decision JSON, decision log, the controller's input)."""
        return {"kind": self.kind, "quota": self.quota, "workload": self.workload, "freed": self.freed,
                "rules": list(self.rules), "placed": self.placed, "nodes": dict(self.nodes),
                "victims": [v.to_json() for v in self.victims]}

    def summary(self) -> str:
        """One line: what goes, what it frees."""
        verb = {"reclaim": "reclaims", "fair-share": "reclaims its fair share", "preempt": "preempts"}[self.kind]
        victims = ", ".join(v.describe() for v in self.victims)
        return f"{verb} {format_milli(self.freed)} GPUs: {victims}"
