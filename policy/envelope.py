"""Consistency of an AdmissionReview request with its own object: what a real API server always keeps true.

A review whose parts contradict each other (no object on CREATE, `kind` or `namespace`
that the object denies, a sub-resource the operation cannot have) is not decided: the
webhook answers HTTP 400 `InvalidRequest`, and the engine turns it into a
`MalformedRequest` denial for callers that skip the envelope parser. Pure; a few dict
look-ups on the common path, messages built only on failure.
"""

from __future__ import annotations

from policy.subject.dialects.shape import jtype

# Sub-resources tied to one operation (core API): exec into a pod is a CONNECT, never a CREATE.
_SUBRESOURCE_OPS = {
    "exec": "CONNECT", "attach": "CONNECT", "portforward": "CONNECT", "proxy": "CONNECT",
    "status": "UPDATE", "ephemeralcontainers": "UPDATE", "resize": "UPDATE", "scale": "UPDATE",
    "binding": "CREATE", "eviction": "CREATE",
}
_WITH_OBJECT = ("CREATE", "UPDATE")


def contradiction(req: dict) -> str | None:
    """Why the request contradicts itself (message naming the fields), or None when it is consistent.

    Assumes the field types were already checked (`policy.admission.parse_review`); tolerates
    wrong types anyway (the engine calls it on unchecked requests).
    """
    op = req.get("operation")
    obj = req.get("object")
    sub = req.get("subResource")
    if sub:
        need = _SUBRESOURCE_OPS.get(sub)
        if need is not None and op != need:
            return f"request.subResource {sub!r} belongs to {need} requests, but request.operation is {op!r}"
    elif op == "CONNECT":
        return "request.operation CONNECT needs a request.subResource (exec, attach, portforward, proxy)"
    if op in _WITH_OBJECT:
        if type(obj) is not dict or not obj:
            got = "missing" if "object" not in req else "empty" if obj == {} else jtype(obj)
            return f"request.object is {got}: a {op} must carry the object it creates or updates"
    problem = _agrees(req, obj, "object") if type(obj) is dict else None
    if problem is None:
        old = req.get("oldObject")
        if type(old) is dict:
            problem = _agrees(req, old, "oldObject")
    return problem


def _agrees(req: dict, obj: dict, name: str) -> str | None:
    """The object's kind and namespace against the request's (absent in the object is not a contradiction)."""
    kind = obj.get("kind")
    if kind is not None:
        want = req.get("kind")
        want = want.get("kind") if type(want) is dict else None
        if kind != want:
            return f"request.kind.kind {want!r} contradicts request.{name}.kind {kind!r}"
    meta = obj.get("metadata")
    if type(meta) is dict:
        ns = meta.get("namespace")
        if ns is not None:
            if type(ns) is not str:
                return f"request.{name}.metadata.namespace must be a string, got {jtype(ns)}"
            rns = req.get("namespace")
            if ns and rns and ns != rns:
                return f"request.namespace {rns!r} contradicts request.{name}.metadata.namespace {ns!r}"
    return None
