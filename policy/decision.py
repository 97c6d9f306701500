"""The `Decision`: what the engine answers for one admission request, with its reasons as data."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping


@dataclass(frozen=True, slots=True)
class Reason:
    """One block's finding: a denial (enforce), a warning (warn) or an audit note (audit)."""

    code: str  # stable PascalCase: QuotaExceeded, FractionOutOfRange, AgentNotAllowed, …
    block: str  # block id, e.g. "quota team-a"
    location: str  # "path:line:col" of the block (or of the line that fired)
    message: str  # carries the arithmetic: "team-a: 30 in use + 4 requested > 32 nominal + 0 borrowable"
    mode: str = "enforce"  # enforce | warn | audit
    data: Mapping[str, object] = field(default_factory=dict)  # the numbers, for JSON and tests

    def to_json(self) -> dict:
        """A JSON-ready dict."""
        return {
            "code": self.code,
            "block": self.block,
            "location": self.location,
            "message": self.message,
            "mode": self.mode,
            "data": dict(self.data),
        }


@dataclass(frozen=True, slots=True)
class Placement:
    """Where a gang was placed: the domain (label key and value) and pods per node."""

    topology: str
    level: str
    label: str
    value: str
    nodes: Mapping[str, int]
    reservation: str | None = None


@dataclass(frozen=True, slots=True)
class Decision:
    """Allowed or not, why, and what to change; `blocks` lists every block that had a say."""

    allowed: bool
    reasons: tuple[Reason, ...] = ()  # every finding, all modes, in evaluation order
    warnings: tuple[str, ...] = ()  # admission warnings (each <= 120 chars)
    audit: Mapping[str, str] = field(default_factory=dict)  # auditAnnotations
    patch: tuple[Mapping, ...] = ()  # RFC 6902 JSONPatch ops for /mutate
    blocks: tuple[str, ...] = ()
    placement: Placement | None = None
    plan: object = None  # policy.reclaim.Plan: workloads to evict or suspend so this admitted request lands

    @property
    def denials(self) -> tuple[Reason, ...]:
        """The enforcing reasons that made `allowed` false."""
        return tuple(r for r in self.reasons if r.mode == "enforce")

    def to_json(self) -> dict:
        """A JSON-ready dict (the `allot eval --explain --format json` shape)."""
        return {
            "allowed": self.allowed,
            "reasons": [r.to_json() for r in self.reasons],
            "warnings": list(self.warnings),
            "audit": dict(self.audit),
            "patch": [dict(p) for p in self.patch],
            "blocks": list(self.blocks),
            "placement": None
            if self.placement is None
            else {
                "topology": self.placement.topology,
                "level": self.placement.level,
                "label": self.placement.label,
                "value": self.placement.value,
                "nodes": dict(self.placement.nodes),
                "reservation": self.placement.reservation,
            },
            "plan": None if self.plan is None else self.plan.to_json(),
        }


ALLOW = Decision(allowed=True)
