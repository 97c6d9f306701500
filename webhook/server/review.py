"""AdmissionReview in, AdmissionReview out: the pure core of the webhook, testable without HTTP.

`handle(body, mutate=, state=, now=)` is decode -> decide -> encode. The server
splits the same steps so it can run a slow decision off the loop and still answer
before the API server's timeout.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import Any

import orjson

from policy.decision import Decision, Reason
from webhook.server.duplicates import duplicate_problem

API_VERSION = "admission.k8s.io/v1"
MAX_WARNING = 120  # characters; the API server truncates or drops longer ones
FAILURE_CODE = "WebhookFailure"


class BadReview(Exception):
    """Input that is not a usable AdmissionReview: answered with HTTP `status` and a JSON error."""

    def __init__(self, status: int, reason: str, message: str, uid: str | None = None) -> None:
        super().__init__(message)
        self.status, self.reason, self.message, self.uid = status, reason, message, uid

    def body(self) -> dict:
        """The JSON error body (no traceback, ever)."""
        return {"error": self.reason, "message": self.message}


@dataclass(slots=True)
class Review:
    """A decoded request: the fields the log needs, the raw `request`, and the engine's parsed form."""

    uid: str
    kind: str | None
    namespace: str | None
    name: str | None
    operation: str | None
    dry_run: bool
    raw: dict
    parsed: Any
    problems: tuple = ()  # what the bytes showed and the decoded request cannot (duplicate keys)
    taken: list | None = None  # holds the last decision took, to commit to the cluster ledger before answering
    view: int = 0  # the cluster ledger's generation that decision saw
    attempts: int = 0  # writes of its holds to the cluster ledger
    body: bytes | None = None  # the request as received: what the peer channel sends a slice's holder
    peer: str | None = None  # the replica that admitted it inside its slice, asked over the peer channel


def decode(body: bytes, state) -> Review:
    """Check the envelope strictly and let the engine parse the rest; raises BadReview."""
    if len(body) > state.max_body:
        raise BadReview(413, "TooLarge", f"request body of {len(body)} bytes exceeds the limit of {state.max_body}")
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise BadReview(400, "NotJSON", f"request body is not JSON: {exc.msg}") from None
    if not isinstance(doc, dict):
        raise BadReview(400, "NotAdmissionReview", "request body is not a JSON object")
    if doc.get("apiVersion") != API_VERSION or doc.get("kind") != "AdmissionReview":
        raise BadReview(
            400,
            "NotAdmissionReview",
            f"expected apiVersion {API_VERSION} kind AdmissionReview, got {_short(doc.get('apiVersion'))} {_short(doc.get('kind'))}",
        )
    req = doc.get("request")
    if not isinstance(req, dict):
        raise BadReview(400, "MissingRequest", "AdmissionReview has no request object")
    uid = req.get("uid")
    if not isinstance(uid, str) or not uid:
        raise BadReview(400, "MissingUID", "AdmissionReview request has no uid")
    try:
        parsed = state.admission.parse_review(doc)
    except state.admission.ReviewError as exc:
        raise BadReview(400, "InvalidRequest", str(exc)[:500], uid) from None
    except Exception as exc:  # noqa: BLE001 - a parser bug, not bad input: answered by the failure decision
        parsed = _Unparsed(exc)
    dup = duplicate_problem(body, req)
    kind = req.get("kind")
    return Review(
        uid=uid,
        kind=kind.get("kind") if isinstance(kind, dict) else None,
        namespace=req.get("namespace"),
        name=req.get("name"),
        operation=req.get("operation"),
        dry_run=req.get("dryRun") is True,
        raw=req,
        parsed=parsed,
        problems=(dup,) if dup is not None else (),
        body=body,
    )


def decide(review: Review, *, mutate: bool, state, now: float) -> Decision:
    """The engine's decision (may raise; callers turn that into the failure decision)."""
    engine = state.engine
    if engine is None:
        raise NoEngine("no policy set is loaded")
    if isinstance(review.parsed, _Unparsed):
        raise review.parsed.error
    ledger = state.ledger
    if ledger is not None and not review.dry_run:  # (the mutating side holds gang domains: they are written too)
        review.taken, review.view = [], ledger.generation
        return engine.decide(review.parsed, state.snapshot, now, mutate=mutate, problems=review.problems, taken=review.taken)
    if review.problems:
        return engine.decide(review.parsed, state.snapshot, now, mutate=mutate, problems=review.problems)
    return engine.decide(review.parsed, state.snapshot, now, mutate=mutate)


@dataclass(frozen=True, slots=True)
class _Unparsed:
    """The envelope parser raised unexpectedly; deciding re-raises so the failure decision answers."""

    error: Exception


class NoEngine(RuntimeError):
    """Asked to decide before any policy set loaded."""


def encode(review: Review, decision: Decision, *, mutate: bool, state) -> dict:
    """The engine's response, held to the contract: uid echoed, no patch on /validate, short warnings."""
    doc = state.admission.respond(review.parsed, decision, mutate=mutate)
    resp = doc["response"]
    resp["uid"] = review.uid
    if not mutate:
        resp.pop("patch", None)
        resp.pop("patchType", None)
    warnings = resp.get("warnings")
    if warnings:
        resp["warnings"] = [clip(w) for w in warnings]
    return doc


def failure(review: Review, *, mutate: bool, state, cause: str, message: str) -> tuple[Decision, dict]:
    """The `--on-error` decision for a request the engine could not decide, and its response."""
    allowed = state.on_error == "allow"
    text = f"allot could not decide ({cause}): {message}"
    decision = Decision(
        allowed=allowed,
        reasons=(Reason(FAILURE_CODE, "allot", "", text, "enforce" if not allowed else "audit"),),
        warnings=(clip(f"allot failed open: {cause}"),) if allowed else (),
        audit={"on-error": f"{state.on_error}: {cause}"},
    )
    resp: dict = {"uid": review.uid, "allowed": allowed, "auditAnnotations": dict(decision.audit)}
    if allowed:
        resp["warnings"] = list(decision.warnings)
    else:
        resp["status"] = {"code": 403, "reason": "Forbidden", "message": clip(text, 1000)}
    state.metrics.failures.labels(cause, state.on_error).inc()
    return decision, {"apiVersion": API_VERSION, "kind": "AdmissionReview", "response": resp}


def answer(review: Review, *, mutate: bool, state, now: float) -> tuple[Decision, dict, str | None]:
    """Decide and encode; any exception becomes the failure decision. Returns (decision, doc, cause)."""
    try:
        decision = decide(review, mutate=mutate, state=state, now=now)
        return decision, encode(review, decision, mutate=mutate, state=state), None
    except NoEngine as exc:
        return (*failure(review, mutate=mutate, state=state, cause="no_engine", message=str(exc)), "no_engine")
    except Exception as exc:  # noqa: BLE001 - an engine bug must never crash or hang admission
        state.log.error(ts=now, uid=review.uid, stage="decide", message=f"{type(exc).__name__}: {exc}")
        return (*failure(review, mutate=mutate, state=state, cause="exception", message=type(exc).__name__), "exception")


def account(review: Review, decision: Decision, *, endpoint: str, state, now: float, seconds: float, cause: str | None) -> None:
    """Metrics and the decision log line for one answered request."""
    state.metrics.count_decision(endpoint, decision.allowed, seconds, decision.reasons)
    state.log.record(
        ts=now,
        uid=review.uid,
        endpoint=endpoint,
        kind=review.kind,
        namespace=review.namespace,
        name=review.name,
        operation=review.operation,
        dry_run=review.dry_run,
        allowed=decision.allowed,
        blocks=list(decision.blocks),
        codes=[r.code for r in decision.reasons],
        duration_s=seconds,
        failure=cause,
        digest=state.policy.digest,
        ledger_attempts=review.attempts,
        peer=review.peer,
        request=review.raw,
        placement=decision.placement,
        plan=decision.plan,
    )


def handle(body: bytes, *, mutate: bool, state, now: float) -> tuple[int, dict]:
    """Decode -> decide -> encode one request body; (HTTP status, JSON document). Never raises."""
    start = time.perf_counter()
    try:
        review = decode(body, state)
    except BadReview as exc:
        state.metrics.bad_requests.labels(exc.reason).inc()
        state.log.error(ts=now, uid=exc.uid, stage=exc.reason, message=exc.message)
        return exc.status, exc.body()
    decision, doc, cause = answer(review, mutate=mutate, state=state, now=now)
    endpoint = "mutate" if mutate else "validate"
    account(review, decision, endpoint=endpoint, state=state, now=now, seconds=time.perf_counter() - start, cause=cause)
    return 200, doc


def clip(text: str, limit: int = MAX_WARNING) -> str:
    """`text` cut to `limit` characters, marking the cut with an ellipsis."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _short(value: object) -> str:
    return repr(value)[:60]


_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)")
_UNIT = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


_TIMEOUTS: dict[str, float | None] = {}  # the API server sends one value per webhook: parse it once


def parse_timeout(text: str | None) -> float | None:
    """Seconds from the API server's `?timeout=` (a Go duration such as `10s`, `1m30s`); None if absent or bad."""
    if not text:
        return None
    try:
        return _TIMEOUTS[text]
    except KeyError:
        pass
    value = _parse_duration(text)
    if len(_TIMEOUTS) < 64:
        _TIMEOUTS[text] = value
    return value


def _parse_duration(text: str) -> float | None:
    pos, total = 0, 0.0
    for m in _DURATION.finditer(text):
        if m.start() != pos:
            return None
        total += float(m.group(1)) * _UNIT[m.group(2)]
        pos = m.end()
    return total if pos == len(text) and total > 0 else None
