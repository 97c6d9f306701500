"""The AdmissionReview v1 envelope: parse a review, build the response, wrap a bare manifest.

Pure functions shared by `allot eval` and the webhook, so offline answers are
byte-for-byte what the server sends.
"""

from __future__ import annotations

import base64
import json
import uuid
from typing import Iterable, Mapping

import orjson

from policy.decision import Decision
from policy.envelope import contradiction

API_VERSION = "admission.k8s.io/v1"
OPERATIONS = ("CREATE", "UPDATE", "DELETE", "CONNECT")
WARNING_LIMIT = 120
_OPTIONS = {"CREATE": "CreateOptions", "UPDATE": "UpdateOptions", "DELETE": "DeleteOptions"}
_PLURALS = {"Pod": "pods", "PodGroup": "podgroups", "Workload": "workloads", "Namespace": "namespaces"}
_CLUSTER_SCOPED = frozenset({"Namespace", "Node", "PriorityClass", "DeviceClass", "ClusterRole"})


class ReviewError(ValueError):
    """The body is not a well-formed AdmissionReview v1 request (HTTP 400 upstream)."""


def _require(cond: bool, message: str) -> None:
    if not cond:
        raise ReviewError(message)


def parse_review(body: dict) -> dict:
    """The `request` of an AdmissionReview v1 body; `ReviewError` names the first bad field."""
    # Every check is a cheap test first; the error text is built only when one fails
    # (formatting the messages eagerly cost ~20 us on every well-formed request).
    req = body.get("request") if isinstance(body, dict) else None
    if (
        isinstance(req, dict)
        and body.get("apiVersion") == API_VERSION
        and body.get("kind") == "AdmissionReview"
        and _well_formed(req)
        and contradiction(req) is None
    ):
        return req
    _explain_bad_review(body)
    raise ReviewError("malformed AdmissionReview")  # pragma: no cover - _explain_bad_review always raises


def _well_formed(req: dict) -> bool:
    uid, kind, resource = req.get("uid"), req.get("kind"), req.get("resource")
    user = req.get("userInfo", _NO_USER)
    get = req.get
    return (
        isinstance(uid, str) and uid != ""
        and isinstance(kind, dict) and isinstance(kind.get("kind"), str)
        and isinstance(resource, dict) and isinstance(resource.get("resource"), str)
        and get("operation") in OPERATIONS
        and isinstance(user, dict) and _strings(user.get("groups", _NO_GROUPS))
        and (user.get("username") is None or isinstance(user.get("username"), str))
        and (get("object") is None or isinstance(get("object"), dict))
        and (get("oldObject") is None or isinstance(get("oldObject"), dict))
        and (get("namespace") is None or isinstance(get("namespace"), str))
        and (get("name") is None or isinstance(get("name"), str))
        and (get("subResource") is None or isinstance(get("subResource"), str))
        and isinstance(get("dryRun", False), bool)
    )


_NO_USER: dict = {}


def _strings(items: object) -> bool:
    """A JSON list of strings (the API server's userInfo.groups)."""
    return isinstance(items, list) and all(isinstance(i, str) for i in items)

_NO_GROUPS: list = []


def _explain_bad_review(body) -> None:
    """Raise `ReviewError` naming the first bad field (the slow path, with messages)."""
    _require(isinstance(body, dict), "AdmissionReview must be a JSON object")
    _require(body.get("apiVersion") == API_VERSION, f"apiVersion must be {API_VERSION}, got {body.get('apiVersion')!r}")
    _require(body.get("kind") == "AdmissionReview", f"kind must be AdmissionReview, got {body.get('kind')!r}")
    req = body.get("request")
    _require(isinstance(req, dict), "request must be an object")
    uid = req.get("uid")
    _require(isinstance(uid, str) and uid != "", "request.uid must be a non-empty string")
    kind = req.get("kind")
    _require(isinstance(kind, dict) and isinstance(kind.get("kind"), str), "request.kind must be an object with a string kind")
    resource = req.get("resource")
    _require(isinstance(resource, dict) and isinstance(resource.get("resource"), str), "request.resource must be an object with a string resource")
    _require(req.get("operation") in OPERATIONS, f"request.operation must be one of {', '.join(OPERATIONS)}, got {req.get('operation')!r}")
    user = req.get("userInfo", {})
    _require(isinstance(user, dict), "request.userInfo must be an object")
    _require(isinstance(user.get("groups", []), list), "request.userInfo.groups must be a list")
    _require(_strings(user.get("groups", [])), "request.userInfo.groups must hold strings")
    _require(user.get("username") is None or isinstance(user.get("username"), str), "request.userInfo.username must be a string")
    for name in ("object", "oldObject"):
        _require(req.get(name) is None or isinstance(req.get(name), dict), f"request.{name} must be an object or null")
    for name in ("namespace", "name", "subResource"):
        _require(req.get(name) is None or isinstance(req.get(name), str), f"request.{name} must be a string")
    _require(isinstance(req.get("dryRun", False), bool), "request.dryRun must be a boolean")
    why = contradiction(req)
    _require(why is None, why or "")


def _fit(text: str) -> str:
    return text if len(text) <= WARNING_LIMIT else text[: WARNING_LIMIT - 3] + "..."


def headline(block: str, message: str) -> str:
    """`quota team-a: msg`, without repeating the name when the message starts with it."""
    kind, _, name = block.partition(" ")
    return f"{kind} {message}" if name and message.startswith(name + ":") else f"{block}: {message}"


def denial_message(decision: Decision) -> str:
    """The `status.message` of a denial: every enforcing reason with its block and source line."""
    parts = [f"{headline(r.block, r.message)} ({r.location})" for r in decision.reasons if r.mode == "enforce"]
    return "allot denied: " + "; ".join(parts) if parts else "allot denied"


def respond(review_request: dict, decision: Decision, *, mutate: bool) -> dict:
    """The full AdmissionReview v1 response to `review_request` (patch only when `mutate`)."""
    response: dict = {"uid": review_request.get("uid", ""), "allowed": decision.allowed}
    if decision.allowed:
        response["status"] = {"code": 200, "message": "allowed"}
    else:
        response["status"] = {"code": 403, "reason": "Forbidden", "message": denial_message(decision)}
    if decision.warnings:
        response["warnings"] = [_fit(w) for w in decision.warnings]
    if decision.audit:
        response["auditAnnotations"] = dict(decision.audit)
    if mutate and decision.allowed and decision.patch:
        response["patchType"] = "JSONPatch"
        ops = [dict(op) for op in decision.patch]
        try:
            raw = orjson.dumps(ops)
        except TypeError:  # a value orjson cannot encode (e.g. an integer beyond 64 bits copied from the object)
            raw = json.dumps(ops, separators=(",", ":")).encode()
        response["patch"] = base64.b64encode(raw).decode("ascii")
    return {"apiVersion": API_VERSION, "kind": "AdmissionReview", "response": response}


def _group_version(api_version: str) -> tuple[str, str]:
    group, _, version = api_version.rpartition("/")
    return group, version


def plural(kind: str) -> str:
    """The REST resource of a kind: `Pod` -> `pods`, `PodGroup` -> `podgroups`."""
    if kind in _PLURALS:
        return _PLURALS[kind]
    lower = kind.lower()
    if lower.endswith("y"):
        return lower[:-1] + "ies"
    return lower + ("es" if lower.endswith("s") else "s")


def wrap_manifest(
    obj: Mapping,
    *,
    user: str,
    groups: Iterable[str],
    operation: str,
    namespace: str | None = None,
) -> dict:
    """A full AdmissionReview v1 for a bare manifest; the uid is derived from the inputs (deterministic).

    CONNECT wraps the named pod as a `pods/exec` request (its object is PodExecOptions).
    """
    operation = operation.upper()
    if operation not in OPERATIONS:
        raise ReviewError(f"operation must be one of {', '.join(OPERATIONS)}, got {operation!r}")
    groups = list(groups)
    kind = str(obj.get("kind") or "Pod")
    group, version = _group_version(str(obj.get("apiVersion") or "v1"))
    meta = obj.get("metadata") or {}
    ns = None if kind in _CLUSTER_SCOPED else (namespace or meta.get("namespace") or "default")
    # json, not orjson: a manifest may hold integers beyond 64 bits, which orjson refuses.
    seed = json.dumps([obj, user, groups, operation, ns], sort_keys=True, default=str)
    request: dict = {
        "uid": str(uuid.uuid5(uuid.NAMESPACE_URL, "allot:" + seed)),
        "kind": {"group": group, "version": version, "kind": kind},
        "resource": {"group": group, "version": version, "resource": plural(kind)},
        "requestKind": {"group": group, "version": version, "kind": kind},
        "requestResource": {"group": group, "version": version, "resource": plural(kind)},
        "name": meta.get("name") or "",
        "operation": operation,
        "userInfo": {"username": user, "groups": groups},
        "object": None,
        "oldObject": None,
        "dryRun": False,
    }
    if ns is not None:
        request["namespace"] = ns
    if operation == "CONNECT":
        request["kind"] = request["requestKind"] = {"group": "", "version": "v1", "kind": "PodExecOptions"}
        request["resource"] = request["requestResource"] = {"group": "", "version": "v1", "resource": "pods"}
        request["subResource"] = request["requestSubResource"] = "exec"
        request["object"] = {"apiVersion": "v1", "kind": "PodExecOptions", "command": ["sh"], "stdin": True, "tty": True}
    else:
        if operation in ("CREATE", "UPDATE"):
            request["object"] = dict(obj)
        if operation in ("UPDATE", "DELETE"):
            request["oldObject"] = dict(obj)
        request["options"] = {"apiVersion": "meta.k8s.io/v1", "kind": _OPTIONS[operation]}
    return {"apiVersion": API_VERSION, "kind": "AdmissionReview", "request": request}
