"""Controllable engines for failure paths the real engine cannot be made to take (raise, stall).

They wrap or imitate `policy.engine.Engine.decide`; the envelope parsing and
encoding stay the real `policy.admission` functions whenever those exist.
"""

from __future__ import annotations

import base64
import threading
import time

import orjson

from policy.decision import Decision, Reason


class StandInAdmission:
    """parse_review/respond with the `policy.admission` shape; used only until the real one lands."""

    class ReviewError(Exception):
        pass

    @staticmethod
    def parse_review(body: dict) -> dict:
        req = body["request"]
        if not isinstance(req.get("object"), dict) and req.get("operation") != "DELETE":
            raise StandInAdmission.ReviewError("request.object is missing")
        return req

    @staticmethod
    def respond(request: dict, decision: Decision, *, mutate: bool) -> dict:
        resp: dict = {"uid": request["uid"], "allowed": decision.allowed}
        if not decision.allowed:
            resp["status"] = {"code": 403, "reason": "Forbidden", "message": "; ".join(r.message for r in decision.denials)}
        if decision.warnings:
            resp["warnings"] = list(decision.warnings)
        if decision.audit:
            resp["auditAnnotations"] = dict(decision.audit)
        if mutate and decision.patch:
            resp["patchType"] = "JSONPatch"
            resp["patch"] = base64.b64encode(orjson.dumps(list(decision.patch))).decode()
        return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": resp}


def admission_module():
    """The real policy.admission if it exists, else the stand-in."""
    try:
        from policy import admission

        return admission
    except ImportError:
        return StandInAdmission


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
