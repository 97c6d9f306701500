"""Traces for `allot simulate`: timestamped arrivals and departures, read from text (no I/O here).

Three formats (docs/simulate.md):

- Allot's own: one record per JSON line, or a YAML list / multi-document stream.
  `{"at": 120, "object": {Pod…}, "duration": 3600, "user": "alice", "groups": [...]}` is an
  arrival (a CREATE request for the object at `at` seconds; it leaves `duration` seconds
  after it is bound); `{"at": 900, "delete": "ns/name"}` is a departure at an absolute time.
- A served decision log (`allot serve --log-requests`): every logged pod CREATE arrives at
  its `ts` with its logged user; a logged DELETE of a pod is a departure.
- The openb pod list CSV (the Alibaba GPU-sharing trace): see `policy.simulate.openb`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Iterable, Mapping

import yaml

_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
DEFAULT_USER = "system:serviceaccount:kube-system:job-controller"  # who creates pods of Jobs in a real cluster
DEFAULT_GROUPS = ("system:serviceaccounts", "system:serviceaccounts:kube-system", "system:authenticated")


class TraceError(ValueError):
    """A trace that cannot be simulated; the message is one located line."""


@dataclass(frozen=True, slots=True)
class Arrival:
    """A pod created at `at` seconds; it runs `duration` seconds once bound (None: until the end)."""

    at: float
    obj: Mapping
    duration: float | None = None
    user: str = DEFAULT_USER
    groups: tuple[str, ...] = DEFAULT_GROUPS
    where: str = ""


@dataclass(frozen=True, slots=True)
class Departure:
    """The pod `namespace/name` is deleted at `at` seconds (or withdrawn, if still waiting)."""

    at: float
    key: str
    where: str = ""


@dataclass
class Trace:
    """Events in file order, the records skipped (with why), and Node objects when the trace brings them."""

    name: str
    events: list = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (where, why)
    fmt: str = "allot"

    @property
    def arrivals(self) -> list[Arrival]:
        """Arrival events only."""
        return [e for e in self.events if isinstance(e, Arrival)]


def pod_key(obj: Mapping) -> str:
    """`namespace/name` of a pod (namespace `default` when absent)."""
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace') or 'default'}/{meta.get('name')}"


def _number(value, where: str, what: str, *, optional: bool = False) -> float | None:
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value or value in (float("inf"), float("-inf")):
        raise TraceError(f"{where}: {what} must be a finite number of seconds, got {value!r}")
    if value < 0:
        raise TraceError(f"{where}: {what} must not be negative, got {value!r}")
    return float(value)


def read_record(rec, where: str, trace: Trace) -> None:
    """One record of Allot's own format into `trace` (raises TraceError when malformed)."""
    if not isinstance(rec, Mapping):
        raise TraceError(f"{where}: expected a record object with 'at', got {type(rec).__name__}")
    unknown = set(rec) - {"at", "object", "delete", "duration", "user", "groups"}
    if unknown:
        raise TraceError(f"{where}: unknown field(s) {', '.join(sorted(map(str, unknown)))} (expected at, object, delete, duration, user, groups)")
    at = _number(rec.get("at"), where, "'at'")
    if ("object" in rec) == ("delete" in rec):
        raise TraceError(f"{where}: a record holds exactly one of 'object' (an arrival) or 'delete' (a departure)")
    if "delete" in rec:
        key = rec["delete"]
        if not isinstance(key, str) or key.count("/") != 1 or not all(key.split("/")):
            raise TraceError(f"{where}: 'delete' must be 'namespace/name', got {key!r}")
        trace.events.append(Departure(at, key, where))
        return
    obj = rec["object"]
    if not isinstance(obj, Mapping) or not isinstance(obj.get("metadata"), Mapping) or not obj["metadata"].get("name"):
        raise TraceError(f"{where}: 'object' must be a Kubernetes object with metadata.name")
    if not isinstance(obj.get("spec"), Mapping):
        raise TraceError(f"{where}: {obj.get('kind') or 'object'} {obj['metadata'].get('name')} has no spec")
    user = rec.get("user", DEFAULT_USER)
    groups = rec.get("groups", DEFAULT_GROUPS)
    if not isinstance(user, str) or not isinstance(groups, (list, tuple)) or not all(isinstance(g, str) for g in groups):
        raise TraceError(f"{where}: 'user' must be a string and 'groups' a list of strings")
    if (obj.get("kind") or "Pod") != "Pod":
        trace.skipped.append((where, f"{obj.get('kind')} objects are not simulated yet (pods only)"))
        return
    trace.events.append(Arrival(at, obj, _number(rec.get("duration"), where, "'duration'", optional=True), user, tuple(groups), where))


def parse_allot(text: str, name: str) -> Trace:
    """Allot's own trace format: JSON lines, or YAML (a list of records or one record per document)."""
    trace = Trace(name, fmt="allot")
    stripped = text.lstrip()
    if stripped.startswith("{"):
        for n, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except ValueError as exc:
                raise TraceError(f"{name}:{n}: not a JSON record ({exc.msg if hasattr(exc, 'msg') else exc})") from None
            read_record(rec, f"{name}:{n}", trace)
        return trace
    try:
        docs = [d for d in yaml.load_all(text, Loader=_Loader) if d is not None]
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f":{mark.line + 1}:{mark.column + 1}" if mark else ""
        raise TraceError(f"{name}{where}: not valid YAML ({getattr(exc, 'problem', None) or 'syntax error'})") from None
    records = docs[0] if len(docs) == 1 and isinstance(docs[0], list) else docs
    for i, rec in enumerate(records):
        read_record(rec, f"{name}: record {i + 1}", trace)
    return trace


def parse_decision_log(lines: Iterable[str], name: str) -> Trace:
    """A decision log of `serve --log-requests`: logged pod CREATEs arrive at `ts`; logged pod DELETEs depart."""
    trace = Trace(name, fmt="decision-log")
    first = None
    seen: set[str] = set()
    for n, text in enumerate(lines, 1):
        if not text.strip():
            continue
        where = f"{name}:{n}"
        try:
            doc = json.loads(text)
        except ValueError:
            trace.skipped.append((where, "not JSON"))
            continue
        req = doc.get("request") if isinstance(doc, dict) else None
        ts = doc.get("ts") if isinstance(doc, dict) else None
        if not isinstance(req, dict):
            trace.skipped.append((where, "no request logged (serve with --log-requests to make lines replayable)"))
            continue
        if isinstance(ts, bool) or not isinstance(ts, (int, float)):
            trace.skipped.append((where, "no decision time (ts) logged"))
            continue
        uid = req.get("uid")
        if uid in seen:
            continue  # the mutating and validating webhooks log one request twice: it arrived once
        seen.add(uid)
        first = ts if first is None else first
        at = max(0.0, float(ts) - first)
        kind = (req.get("kind") or {}).get("kind")
        op = req.get("operation")
        user_info = req.get("userInfo") or {}
        if kind == "Pod" and op == "CREATE" and isinstance(req.get("object"), dict):
            obj = req["object"]
            if not (obj.get("metadata") or {}).get("name"):  # generateName: the API server named it after admission
                obj = {**obj, "metadata": {**(obj.get("metadata") or {}), "name": f"{(obj.get('metadata') or {}).get('generateName') or 'pod-'}{n}"}}
            if req.get("namespace") and not obj["metadata"].get("namespace"):
                obj = {**obj, "metadata": {**obj["metadata"], "namespace": req["namespace"]}}
            groups = user_info.get("groups") or []
            trace.events.append(Arrival(at, obj, None, str(user_info.get("username") or DEFAULT_USER),
                                        tuple(str(g) for g in groups), where))
        elif kind == "Pod" and op == "DELETE" and req.get("name"):
            trace.events.append(Departure(at, f"{req.get('namespace') or 'default'}/{req['name']}", where))
        else:
            trace.skipped.append((where, f"{op} {kind} is not simulated (pod CREATE and DELETE only)"))
    return trace


def is_decision_log(text: str) -> bool:
    """The first non-empty line is a JSON decision line (has `endpoint` and `result`)."""
    for line in text.splitlines():
        if line.strip():
            try:
                doc = json.loads(line)
            except ValueError:
                return False
            return isinstance(doc, dict) and "endpoint" in doc and "result" in doc
    return False
