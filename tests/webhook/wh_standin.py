"""Controllable engines for failure paths the real engine cannot be made to take (raise, stall).

They imitate `policy.engine.Engine.decide`; the envelope parsing and encoding
stay the real `policy.admission` functions.
"""

from __future__ import annotations

import threading

from policy.decision import Decision, Reason


def admission_module():
    """The engine's envelope functions (`parse_review`, `respond`, `ReviewError`)."""
    from policy import admission

    return admission


class FixedEngine:
    """Answers every request with one Decision."""

    def __init__(self, decision: Decision) -> None:
        self.decision = decision
        self.calls: list[tuple] = []

    def decide(self, request, snapshot, now, *, mutate):
        self.calls.append((request, mutate))
        return self.decision


class RaisingEngine:
    """An engine with a bug."""

    def decide(self, request, snapshot, now, *, mutate):
        raise ZeroDivisionError("engine bug")


class StallingEngine:
    """Blocks until released (or `limit` seconds), as a pathological placement query would."""

    def __init__(self, limit: float = 5.0) -> None:
        self.release = threading.Event()
        self.limit = limit

    def decide(self, request, snapshot, now, *, mutate):
        self.release.wait(self.limit)
        return Decision(allowed=True)


DENY_QUOTA = Decision(
    allowed=False,
    reasons=(Reason("QuotaExceeded", "quota team-a", "q.policy:1:1", "team-a: 30 in use + 4 requested > 32 nominal + 0 borrowable"),),
    blocks=("quota team-a",),
)
WARN_LONG = Decision(
    allowed=True,
    reasons=(Reason("Custom", "rule r", "r.policy:1:1", "x" * 300, mode="warn"),),
    warnings=("x" * 300,),
    audit={"rule-r": "fired"},
    patch=({"op": "add", "path": "/spec/priorityClassName", "value": "batch"},),
    blocks=("rule r",),
)
