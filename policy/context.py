"""Per-request scratch state that compiled blocks write their findings into."""

from __future__ import annotations

from typing import Mapping

from lang.span import Span
from policy.decision import Reason
from policy.patch import PatchBuilder


def where(span: Span) -> str:
    """`path:line:col` of a span, the `Reason.location` format."""
    return f"{span.path}:{span.line}:{span.col}"


class Context:
    """One decision in progress: the subject, the inputs, and what blocks found so far."""

    __slots__ = ("w", "snapshot", "now", "mutate", "reasons", "blocks", "_patch", "trace", "reserve", "state", "placement", "may_reserve", "gang",
                 "contention", "plan", "unplaced")

    def __init__(self, w, snapshot, now: float, mutate: bool, explain: bool = False, state=None):
        self.w = w
        self.state = state  # per-snapshot incremental indexes (quota ledger, GPU sharers)
        self.snapshot = snapshot
        self.now = now
        self.mutate = mutate
        self.reasons: list[Reason] = []
        self.blocks: list[str] = []
        self._patch: PatchBuilder | None = None
        self.trace: list[tuple[str, str, str]] | None = [] if explain else None  # (block, location, text)
        self.reserve: list = []  # (ledger, charge) to commit when the request is admitted
        self.placement = None  # policy.decision.Placement of a gang member that fits
        self.may_reserve = True  # False for offline decisions: placement holds nothing
        self.gang = None  # policy.gang.Proposed: a gang domain to hold and pin to once the request is admitted
        self.contention: list | None = None  # policy.reclaim.settle.Contention: quotas a plan may make room in
        self.plan = None  # policy.reclaim.Plan: the victims that let this request land
        self.unplaced = None  # (GangRequest, reason index) of an enforcing GangUnplaceable a reclaim plan may lift

    @property
    def patch(self) -> PatchBuilder:
        """The JSONPatch under construction, created on first use (most requests patch nothing)."""
        if self._patch is None:
            self._patch = PatchBuilder(self.w.obj)
        return self._patch

    def patch_ops(self) -> tuple[dict, ...]:
        """The collected patch operations."""
        return self._patch.ops() if self._patch is not None else ()

    def find(self, code: str, block: str, location: str, message: str, mode: str, data: Mapping | None = None) -> None:
        """Record a finding (denial in enforce mode, warning in warn, note in audit)."""
        self.reasons.append(Reason(code, block, location, message, mode, data or {}))
        if self.trace is not None:
            self.trace.append((block, location, f"{mode.upper()} {code}: {message}"))

    def note(self, block: str, location: str, text: str) -> None:
        """A trace line for `--explain` (free when not explaining)."""
        if self.trace is not None:
            self.trace.append((block, location, text))
