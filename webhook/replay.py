"""Replay a decision log (`allot serve --log-requests`) against a policy set: which decisions would change.

Each decision line that carries its AdmissionReview `request` is decided again,
in log order, at the time it was logged unless told otherwise, as the endpoint that
answered it (mutate or validate), and compared with what was logged: the result and
the reason codes. Admitted non-dryRun creates hold quota and gang domains on the
replay's own snapshot exactly as the server's did, so a log replayed over the cluster
state it started from with the same policy reproduces its decisions, and a new policy
shows what it would have changed. Lines that cannot be replayed are counted with the
reason, never silently dropped.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Iterable

from policy.admission import API_VERSION, ReviewError, parse_review

NO_REQUEST = "no request logged (serve with --log-requests to make lines replayable)"


@dataclass(frozen=True, slots=True)
class Replayed:
    """One logged decision and the one the policy set takes now."""

    line: int
    uid: str
    what: str  # `CREATE pods team-a/job-4`
    was_allowed: bool
    was_codes: tuple[str, ...]
    now_allowed: bool
    now_codes: tuple[str, ...]
    was_failure: str | None = None  # the logged answer was the --on-error decision (timeout, exception…)

    @property
    def changed(self) -> bool:
        """The result or the set of reason codes differs."""
        return self.was_allowed != self.now_allowed or sorted(self.was_codes) != sorted(self.now_codes)

    def to_json(self) -> dict:
        """A JSON-ready dict."""
        return {"line": self.line, "uid": self.uid, "what": self.what,
                "was": {"allowed": self.was_allowed, "codes": list(self.was_codes), "failure": self.was_failure},
                "now": {"allowed": self.now_allowed, "codes": list(self.now_codes)}}


@dataclass
class ReplayReport:
    """Counts over the whole log, the changed decisions, and the lines skipped with why."""

    replayed: int = 0
    changed: list[Replayed] = field(default_factory=list)
    skipped: list[tuple[int, str]] = field(default_factory=list)  # (line, why)

    @property
    def newly_denied(self) -> int:
        """Changed decisions that were allowed and are now denied."""
        return sum(r.was_allowed and not r.now_allowed for r in self.changed)

    @property
    def newly_allowed(self) -> int:
        """Changed decisions that were denied and are now allowed."""
        return sum(r.now_allowed and not r.was_allowed for r in self.changed)

    def to_json(self) -> dict:
        """A JSON-ready dict."""
        return {"replayed": self.replayed, "unchanged": self.replayed - len(self.changed),
                "changed": [r.to_json() for r in self.changed],
                "newly_denied": self.newly_denied, "newly_allowed": self.newly_allowed,
                "skipped": [{"line": n, "why": why} for n, why in self.skipped]}


def _record(text: str) -> tuple[dict | None, str | None]:
    """(decision line, None) or (None, why it cannot be replayed)."""
    try:
        doc = json.loads(text)
    except ValueError:
        return None, "not JSON"
    if not isinstance(doc, dict):
        return None, "not a JSON object"
    if "error" in doc and "result" not in doc:
        return None, f"an error line ({doc.get('error')}), not a decision"
    if doc.get("result") not in ("allowed", "denied") or doc.get("endpoint") not in ("mutate", "validate"):
        return None, "not a decision line (needs result and endpoint)"
    if not isinstance(doc.get("request"), dict):
        return None, NO_REQUEST
    return doc, None


def replay(lines: Iterable[str], engine, snapshot, *, now: float | None = None) -> ReplayReport:
    """Decide every replayable line again with `engine` over `snapshot`; at each line's `ts` unless `now` is given."""
    report = ReplayReport()
    for number, text in enumerate(lines, 1):
        if not text.strip():
            continue
        doc, why = _record(text)
        if doc is None:
            report.skipped.append((number, why))
            continue
        try:
            request = parse_review({"apiVersion": API_VERSION, "kind": "AdmissionReview", "request": doc["request"]})
        except ReviewError as exc:
            report.skipped.append((number, f"logged request is malformed: {exc}"))
            continue
        at = now if now is not None else doc.get("ts")
        if not isinstance(at, (int, float)) or isinstance(at, bool):
            report.skipped.append((number, "no decision time (ts) logged; give --now"))
            continue
        decision = engine.decide(request, snapshot, float(at), mutate=doc["endpoint"] == "mutate")
        codes = doc.get("codes")
        got = Replayed(
            line=number,
            uid=str(request.get("uid")),
            what=_what(request),
            was_allowed=doc["result"] == "allowed",
            was_codes=tuple(str(c) for c in codes) if isinstance(codes, list) else (),
            now_allowed=decision.allowed,
            now_codes=tuple(r.code for r in decision.reasons),
            was_failure=doc.get("failure") if isinstance(doc.get("failure"), str) else None,
        )
        report.replayed += 1
        if got.changed:
            report.changed.append(got)
    return report


def _what(request: dict) -> str:
    """`OPERATION resource[/sub] namespace/name` of a well-formed request (generateName when the name is empty)."""
    sub = request.get("subResource")
    name = request.get("name")
    if not name:
        meta = (request.get("object") or {}).get("metadata")
        name = meta.get("generateName") if isinstance(meta, dict) else None
    return f"{request['operation']} {request['resource']['resource']}{'/' + sub if sub else ''} " \
           f"{request.get('namespace') or '-'}/{name if isinstance(name, str) and name else '-'}"


def render(report: ReplayReport) -> str:
    """One line per changed decision, then the summary."""
    out = []
    for r in report.changed:
        def side(allowed: bool, codes: tuple[str, ...]) -> str:
            return ("allowed" if allowed else "DENIED") + (f" [{', '.join(codes)}]" if codes else "")

        was = side(r.was_allowed, r.was_codes) + (f" (the --on-error answer: {r.was_failure})" if r.was_failure else "")
        out.append(f"line {r.line}  {r.what} (uid {r.uid}): was {was}, now {side(r.now_allowed, r.now_codes)}")
    reasons: dict[str, int] = {}
    for _, why in report.skipped:
        reasons[why] = reasons.get(why, 0) + 1
    skipped = "; ".join(f"{n} × {why}" for why, n in reasons.items())
    same_result = len(report.changed) - report.newly_denied - report.newly_allowed
    out.append(
        f"{report.replayed} replayed: {report.replayed - len(report.changed)} unchanged, {len(report.changed)} changed "
        f"({report.newly_denied} newly denied, {report.newly_allowed} newly allowed, {same_result} other reasons)"
        + (f"; {len(report.skipped)} line(s) skipped: {skipped}" if report.skipped else "")
    )
    return "\n".join(out)
