"""Exact CEL for a block's conditions and message over a Pod request, as ValidatingAdmissionPolicy evaluates them.

Unlike `match.py` (an over-approximation that may only widen what reaches the webhook),
this translation must hold exactly when the engine's expression holds, or refuse:
`translate` raises `Untranslatable` naming the first part it cannot state. Values that
the engine may find absent (none) translate as a (present, value) pair, so none
semantics follow language.md: a comparison with none is false, `has()` tests presence.
Every expression is guarded (`has()`) so it never errs at runtime: with failurePolicy
Fail an error would deny.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from lang import ir
from policy.manifests.cel import cel_string, glob_cel

SA_PREFIX = "system:serviceaccount:"
# `NS/NAME` of `system:serviceaccount:NS:NAME` (policy.subject.normalize.service_account): NS up to the first colon.
SA_RE = "(?s)^system:serviceaccount:[^:]+:.+$"
USER = "request.userInfo.username"
GROUPS = "request.userInfo.groups"

# Why a subject field cannot be judged by the API server alone (docs/native.md).
STATEFUL: dict[str, str] = {
    "gpus": "reads GPU amounts, which Allot reads through its GPU dialects (device plugins, HAMi, KAI, DRA claims in the cluster state)",
    "total_gpus": "reads GPU amounts of the whole workload (its gang or its replicas)",
    "fraction": "reads a GPU share, which Allot reads through its GPU dialects",
    "gpu_memory": "reads GPU memory, which Allot reads through its GPU dialects",
    "gpu_model": "reads the GPU model, resolved from node selectors, affinities and DRA claims against the declared models",
    "gang": "reads the gang, which needs the PodGroup/Workload objects in the cluster state",
    "min_members": "reads a gang's size, which needs its group object in the cluster state",
    "pods": "reads the pod count of the workload",
    "priority": "reads the live PriorityClass value",
    "topology.required": "reads topology requests through the gang dialects",
    "topology.preferred": "reads topology requests through the gang dialects",
    "agent": "reads whether an agents block governs the request",
    "operation": "reads the operation: a DELETE's subject is the live object (not translated)",
    "controller": "reads the workload-expression fields (the object's controller)",
    "gpu_pods": "reads the workload-expression fields",
    "gang_scheduler": "reads the workload-expression fields",
    "gpu_memory_requested": "reads the workload-expression fields",
    "memory_share": "reads the workload-expression fields",
    "gpu_limit_mismatches": "reads the workload-expression fields",
}


class Untranslatable(Exception):
    """A part of an expression CEL cannot state exactly; the message says which and why."""


@dataclass(frozen=True, slots=True)
class Value:
    """A CEL value that may be absent: `present` guards `value` (the engine's none)."""

    present: str
    value: str


def _containers_any(test: str) -> str:
    lists = [f"(has(object.spec.{k}) && object.spec.{k}.exists(c, {test}))"
             for k in ("containers", "initContainers", "ephemeralContainers")]
    return "(" + " || ".join(lists) + ")"


# policy/subject/dialects/security.py, for a Pod's spec.
_FLAGS = {
    "privileged": _containers_any("has(c.securityContext) && has(c.securityContext.privileged) && c.securityContext.privileged == true"),
    "host_path": "(has(object.spec.volumes) && object.spec.volumes.exists(v, has(v.hostPath)))",
    "host_network": "(has(object.spec.hostNetwork) && object.spec.hostNetwork == true)",
}


def _map(kind: str) -> str:
    return {"labels": "object.metadata.labels", "annotations": "object.metadata.annotations",
            "namespace.labels": "namespaceObject.metadata.labels"}[kind]


def _map_guard(kind: str) -> str:
    if kind == "namespace.labels":
        # Pods are namespaced, so the API server always binds namespaceObject (comparing it to null errs in some CEL implementations).
        return "(has(namespaceObject.metadata) && has(namespaceObject.metadata.labels))"
    return f"(has(object.metadata.{kind.split('.')[-1]}))"


def value(e: ir.Expr) -> Value:
    """The (present, value) CEL of a string-valued expression; Untranslatable otherwise."""
    if isinstance(e, ir.Lit):
        if isinstance(e.value, str):
            return Value("true", cel_string(e.value))
        if isinstance(e.value, bool):
            return Value("true", "true" if e.value else "false")
        raise Untranslatable(f"the literal {e.value!r} ({e.type.value}) has no exact CEL value here")
    if isinstance(e, ir.Field):
        name = e.name
        if name == "namespace":
            return Value("true", "request.namespace")
        if name == "name":
            # request.name, else the object's own (engine: normalize()); absent on generateName creates.
            return Value("(request.name != \"\" || has(object.metadata.name))",
                         "(request.name != \"\" ? request.name : object.metadata.name)")
        if name == "kind":
            return Value("true", "\"Pod\"")
        if name == "user":
            return Value(f"has({USER})", USER)
        if name == "priority_class":
            return Value("(has(object.spec.priorityClassName) && object.spec.priorityClassName != \"\")",
                         "object.spec.priorityClassName")
        if name in _FLAGS:
            return Value("true", _FLAGS[name])
        if name in STATEFUL:
            raise Untranslatable(f"`{name}` {STATEFUL[name]}")
        raise Untranslatable(f"`{name}` is not translated to CEL")
    if isinstance(e, ir.Index) and isinstance(e.target, ir.Field) and e.target.name in ("labels", "annotations", "namespace.labels"):
        m, key = _map(e.target.name), cel_string(e.key)
        return Value(f"({_map_guard(e.target.name)} && {key} in {m})", f"{m}[{key}]")
    raise Untranslatable(f"{type(e).__name__.lower()} expression is not translated to CEL")


def _and(*parts: str) -> str:
    parts = tuple(p for p in parts if p != "true")
    return "true" if not parts else parts[0] if len(parts) == 1 else "(" + " && ".join(parts) + ")"


def translate(e: ir.Expr | None) -> str:
    """CEL that is true exactly when `e` is (None: true); Untranslatable names what is not."""
    if e is None:
        return "true"
    if isinstance(e, ir.Lit) and isinstance(e.value, bool):
        return "true" if e.value else "false"
    if isinstance(e, ir.And):
        return "(" + " && ".join(translate(i) for i in e.items) + ")"
    if isinstance(e, ir.Or):
        return "(" + " || ".join(translate(i) for i in e.items) + ")"
    if isinstance(e, ir.Not):
        return f"!({translate(e.item)})"
    if isinstance(e, ir.Field) and e.name in _FLAGS:
        return _FLAGS[e.name]
    if isinstance(e, ir.Has) and isinstance(e.target, ir.Field) and e.target.name == "serviceaccount":
        return f"(has({USER}) && {USER}.matches({cel_string(SA_RE)}))"
    if isinstance(e, ir.Has):
        return value(e.target).present
    if isinstance(e, ir.Matches):
        v = value(e.target)
        return _and(v.present, glob_cel(v.value, e.pattern))
    if (sa := _serviceaccount_compare(e)) is not None:
        return sa
    if isinstance(e, ir.Compare):
        for side in (e.left, e.right):
            if isinstance(side, ir.Field) and side.name in STATEFUL:
                raise Untranslatable(f"`{side.name}` {STATEFUL[side.name]}")
        if e.op not in ("==", "!="):
            raise Untranslatable(f"`{e.op}` compares amounts, which this translation does not state")
        for side in (e.left, e.right):
            if isinstance(side, ir.Lit) and side.value is None:
                return "false"  # a comparison with none is false (language.md)
        a, b = value(e.left), value(e.right)
        return _and(a.present, b.present, f"{a.value} {e.op} {b.value}")
    if isinstance(e, ir.Contains):
        item = value(e.item)
        c = e.container
        if isinstance(c, ir.Field) and c.name == "groups":
            return _and(item.present, f"has({GROUPS})", f"{item.value} in {GROUPS}")
        if isinstance(c, ir.Field) and c.name in ("labels", "annotations", "namespace.labels"):
            return _and(item.present, _map_guard(c.name), f"{item.value} in {_map(c.name)}")
        raise Untranslatable("`in` on this container is not translated to CEL")
    if isinstance(e, ir.Field) and e.name == "serviceaccount":
        raise Untranslatable("`serviceaccount` used as a truth value is not translated")
    if isinstance(e, ir.Field) and e.name in STATEFUL:
        raise Untranslatable(f"`{e.name}` {STATEFUL[e.name]}")
    raise Untranslatable(f"{type(e).__name__.lower()} expression is not translated to CEL")


def _serviceaccount_compare(e: ir.Expr) -> str | None:
    """`serviceaccount ==/!= "ns/name"` as a username test (exact for names whose NS has no colon)."""
    if not (isinstance(e, ir.Compare) and e.op in ("==", "!=")):
        return None
    for a, b in ((e.left, e.right), (e.right, e.left)):
        if isinstance(a, ir.Field) and a.name == "serviceaccount" and isinstance(b, ir.Lit) and isinstance(b.value, str):
            ns, sep, name = b.value.partition("/")
            present = f"(has({USER}) && {USER}.matches({cel_string(SA_RE)}))"
            if not sep or not ns or not name or ":" in ns:
                return "false" if e.op == "==" else present  # no service account has that name
            return f"({present} && {USER} {e.op} {cel_string(SA_PREFIX + ns + ':' + name)})"
    return None


def _hole(e: ir.Expr) -> str:
    """A message hole as CEL text, rendered as the engine's render_value does for strings ("none" when absent)."""
    if e.type not in (ir.Type.STRING, ir.Type.BOOL):
        raise Untranslatable(f"the message shows a {e.type.value}, rendered by the engine's number formats")
    if isinstance(e, ir.Field) and e.name in _FLAGS:
        return f"({_FLAGS[e.name]} ? \"true\" : \"false\")"
    v = value(e)
    return v.value if v.present == "true" else f"({v.present} ? {v.value} : \"none\")"


def message(tpl: ir.Template | None, prefix: str, suffix: str, default: str = "") -> str:
    """A messageExpression: `prefix` + the rendered template (or `default` when empty) + `suffix`."""
    parts = [cel_string(prefix)]
    if tpl is None or not tpl.parts:
        parts.append(cel_string(default))
    else:
        for p in tpl.parts:
            parts.append(cel_string(p) if isinstance(p, str) else _hole(p))
    parts.append(cel_string(suffix))
    merged: list[str] = []
    for p in parts:  # join adjacent literals: one string where the message has no holes
        if merged and p.startswith('"') and merged[-1].startswith('"') and p.endswith('"') and merged[-1].endswith('"'):
            merged[-1] = cel_string(json.loads(merged[-1]) + json.loads(p))
        else:
            merged.append(p)
    return " + ".join(merged)
