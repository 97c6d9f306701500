"""Denied reviews over the policy library, and hypothesis strategies that corrupt one part of them structurally.

The invariant they serve (issue 12): a request Allot cannot read completely is never
allowed by a deny rule's silence — the answer is HTTP 400 or `allowed: false`.
"""

from __future__ import annotations

import copy
import pathlib

import orjson
from hypothesis import strategies as st

ROOT = pathlib.Path(__file__).resolve().parents[2]
CLUSTER = ROOT / "policies" / "fixtures" / "cluster.yaml"
AGENT = "system:serviceaccount:agents-sandbox:bot"


def _review(obj, *, kind="Pod", group="", version="v1", resource="pods", namespace="team-a", name=None,
            operation="CREATE", user="alice", groups=("dev",), sub=None) -> dict:
    """An AdmissionReview v1 as the API server sends it (object, options, userInfo, matching namespace)."""
    req = {
        "uid": f"malformed-{kind.lower()}-{operation.lower()}",
        "kind": {"group": group, "version": version, "kind": kind},
        "resource": {"group": group, "version": version, "resource": resource},
        "requestKind": {"group": group, "version": version, "kind": kind},
        "requestResource": {"group": group, "version": version, "resource": resource},
        "name": name if name is not None else ((obj or {}).get("metadata") or {}).get("name", ""),
        "namespace": namespace,
        "operation": operation,
        "userInfo": {"username": user, "uid": "u-1", "groups": list(groups)},
        "object": obj,
        "oldObject": None,
        "dryRun": False,
        "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
    }
    if sub is not None:
        req["subResource"] = req["requestSubResource"] = sub
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": req}


def _pod(name, namespace, gpus, labels, *, privileged=False, priority_class="batch") -> dict:
    """A pod as the API server hands it to webhooks: requests defaulted from limits, the GPU toleration added."""
    res = {"limits": {"nvidia.com/gpu": gpus, "cpu": "8", "memory": "64Gi"}, "requests": {"nvidia.com/gpu": gpus, "cpu": "8", "memory": "64Gi"}}
    container = {"name": "main", "image": "nvcr.io/nvidia/pytorch:24.10-py3", "resources": res}
    if privileged:
        container["securityContext"] = {"privileged": True}
    spec = {
        "containers": [container],
        "priorityClassName": priority_class,
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
    }
    meta = {"name": name, "namespace": namespace, "labels": dict(labels)}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def _pinned(pod: dict) -> dict:
    """The pod asking its GPU model twice over: a nodeSelector and a required node affinity (the product readers)."""
    product = {"key": "nvidia.com/gpu.product", "operator": "In", "values": ["NVIDIA-H100-80GB-HBM3"]}
    pod["spec"]["nodeSelector"] = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    pod["spec"]["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [product]}]}}}
    return pod


def bases() -> dict[str, dict]:
    """Reviews the library denies, each for a different reason (quota, tier rule, agents, escalation, label rule)."""
    group = {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
        "metadata": {"name": "g", "namespace": "train", "labels": {"acme.io/workload": "distributed", "team": "research"}},
        "spec": {"minMember": 16, "minResources": {"nvidia.com/gpu": "128"}, "scheduleTimeoutSeconds": 600},
    }
    exec_options = {"apiVersion": "v1", "kind": "PodExecOptions", "stdin": True, "tty": True, "container": "main", "command": ["sh"]}
    return {
        "quota: 64 GPUs in team-a": _review(_pinned(_pod("big", "team-a", "64", {"team": "team-a"}))),
        "tier rule: a 128-GPU batch PodGroup": _review(
            group, kind="PodGroup", group="scheduling.x-k8s.io", version="v1alpha1", resource="podgroups", namespace="train"),
        "agents: exec into a sandbox pod": _review(
            exec_options, kind="PodExecOptions", namespace="agents-sandbox", name="agent-7f3c", operation="CONNECT",
            user=AGENT, groups=("system:serviceaccounts",), sub="exec"),
        "agents: a privileged sandbox pod": _review(
            _pod("tool", "agents-sandbox", "0", {"team": "agents"}, privileged=True), namespace="agents-sandbox", user=AGENT),
        "label rule: a hibernated agent holding a GPU": _review(
            _pod("napper", "agents-sandbox", "1", {"agents.acme.io/state": "hibernated"}), namespace="agents-sandbox"),
    }


BASES = bases()

# One value of every JSON type but null (null reads as absent, as the API server reads it).
# Strings and numbers are not swapped for each other: "64" -> 3 is a different request, not a malformed one.
_OTHER = {
    "string": st.one_of(st.just(""), st.text(max_size=4)),
    "number": st.one_of(st.just(0), st.integers(-2, 10**6), st.floats(allow_nan=False, allow_infinity=False)),
    "boolean": st.booleans(),
    "list": st.one_of(st.just([]), st.lists(st.one_of(st.text(max_size=3), st.integers(0, 3), st.just({})), max_size=2)),
    "object": st.one_of(st.just({}), st.dictionaries(st.text(max_size=4), st.text(max_size=4), max_size=2)),
}
_NOT_SWAPPED = {"string": {"number"}, "number": {"string"}}


def jtype(value) -> str:
    """The JSON type of a decoded value."""
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    return "string" if isinstance(value, str) else "list" if isinstance(value, list) else "object"


def paths(value, prefix=()):
    """Every path to a non-null value below `value`."""
    if isinstance(value, dict):
        items = value.items()
    elif isinstance(value, list):
        items = enumerate(value)
    else:
        return
    for k, v in items:
        if v is not None:
            yield prefix + (k,)
            yield from paths(v, prefix + (k,))


def at(doc, path):
    """The value at `path`."""
    for step in path:
        doc = doc[step]
    return doc


def put(doc, path, value) -> None:
    """Set the value at `path`."""
    at(doc, path[:-1])[path[-1]] = value


def _envelope_spoilers(doc: dict) -> list[tuple[str, object]]:
    """(name, function of a copy) for the contradictions a real API server never sends."""
    req = doc["request"]
    connect = req["operation"] == "CONNECT"
    out = [
        ("kind in lower case", lambda d: put(d, ("request", "kind", "kind"), req["kind"]["kind"].lower())),
        ("namespace of another team", lambda d: put(d, ("request", "namespace"), "default")),
        ("no userInfo", lambda d: d["request"].pop("userInfo")),
        ("username null", lambda d: put(d, ("request", "userInfo", "username"), None)),
        ("username empty", lambda d: put(d, ("request", "userInfo", "username"), "")),
    ]
    if connect:
        out.append(("CONNECT without a sub-resource", lambda d: d["request"].pop("subResource")))
        out.append(("exec as a CREATE", lambda d: put(d, ("request", "operation"), "CREATE")))
    else:
        out += [
            ("no object", lambda d: d["request"].pop("object")),
            ("object null", lambda d: put(d, ("request", "object"), None)),
            ("object empty", lambda d: put(d, ("request", "object"), {})),
            ("object kind in lower case", lambda d: put(d, ("request", "object", "kind"), req["object"]["kind"].lower())),
            ("exec on a CREATE", lambda d: put(d, ("request", "subResource"), "exec")),
        ]
    return out


def _dump(value, target: tuple, last, here=()) -> bytes:
    """JSON of `value` with the key at `target` written twice: the real value first, then `last` (orjson keeps the last)."""
    if isinstance(value, dict):
        parts = []
        for k, v in value.items():
            parts.append(orjson.dumps(k) + b":" + _dump(v, target, last, here + (k,)))
            if here + (k,) == target:
                parts.append(orjson.dumps(k) + b":" + orjson.dumps(last))
        return b"{" + b",".join(parts) + b"}"
    if isinstance(value, list):
        return b"[" + b",".join(_dump(v, target, last, here + (i,)) for i, v in enumerate(value)) + b"]"
    return orjson.dumps(value)


def _gpu_free(value):
    """What a duplicate key would say instead: no GPUs."""
    if isinstance(value, dict):
        return {}
    if isinstance(value, list):
        return []
    return "0"


def _governed(path: tuple) -> bool:
    """Keys on the way to a GPU amount: a duplicate of one of them can hide the GPUs."""
    return bool(path) and path[0] == "request" and any(
        isinstance(s, str) and (s.startswith(("nvidia.com/", "amd.com/")) or s in ("object", "spec", "containers", "resources", "limits", "requests", "minResources"))
        for s in path[-1:])


@st.composite
def corrupted(draw) -> tuple[str, str, bytes]:
    """(base name, corruption, body): a denied base review with exactly one structural corruption."""
    name = draw(st.sampled_from(sorted(BASES)))
    doc = copy.deepcopy(BASES[name])
    how = draw(st.sampled_from(["retype", "retype", "envelope", "duplicate"]))
    if how == "duplicate":
        targets = [p for p in paths(doc) if isinstance(p[-1], str) and _governed(p)]
        if targets:
            path = draw(st.sampled_from(targets))
            return name, f"duplicate {'.'.join(map(str, path))}", _dump(doc, path, _gpu_free(at(doc, path)))
        how = "envelope"
    if how == "envelope":
        label, spoil = draw(st.sampled_from(_envelope_spoilers(doc)))
        spoil(doc)
        return name, label, orjson.dumps(doc)
    path = draw(st.sampled_from(list(paths(doc))))
    was = jtype(at(doc, path))
    kinds = sorted(k for k in _OTHER if k != was and k not in _NOT_SWAPPED.get(was, ()))
    kind = draw(st.sampled_from(kinds))
    value = draw(_OTHER[kind])
    put(doc, path, copy.deepcopy(value))
    return name, f"{'.'.join(map(str, path))} as {kind} {value!r}", orjson.dumps(doc)


def _spoiled(base: str, *edits) -> bytes:
    doc = copy.deepcopy(BASES[base])
    for path, value in edits:
        if value is KeyError:
            at(doc, path[:-1]).pop(path[-1])
        else:
            put(doc, path, value)
    return orjson.dumps(doc)


_QUOTA, _GROUP, _EXEC = "quota: 64 GPUs in team-a", "tier rule: a 128-GPU batch PodGroup", "agents: exec into a sandbox pod"
_C0 = ("request", "object", "spec", "containers", 0)


def issue_cases() -> list[dict]:
    """The eight cases of issue 12, each once: what used to be allowed, with the answer it gets now."""
    dup = orjson.dumps(BASES[_QUOTA]).replace(b'"limits":{"nvidia.com/gpu":"64"', b'"limits":{"nvidia.com/gpu":"64","nvidia.com/gpu":"0"', 1)
    bad_request = [
        ("1 object removed", _spoiled(_QUOTA, (("request", "object"), KeyError)), "request.object is missing"),
        ("1 object null", _spoiled(_QUOTA, (("request", "object"), None)), "request.object is null"),
        ("1 object {}", _spoiled(_QUOTA, (("request", "object"), {})), "request.object is empty"),
        ("3 kind pod", _spoiled(_QUOTA, (("request", "kind", "kind"), "pod")), "request.kind.kind 'pod' contradicts request.object.kind 'Pod'"),
        ("3 exec on a CREATE", _spoiled(_QUOTA, (("request", "subResource"), "exec")), "request.subResource 'exec' belongs to CONNECT requests"),
        ("4 namespace default", _spoiled(_QUOTA, (("request", "namespace"), "default")),
         "request.namespace 'default' contradicts request.object.metadata.namespace 'team-a'"),
    ]
    denied = [
        ("2 containers a string", _spoiled(_QUOTA, (_C0[:-1], "x")), "MalformedObject", "spec.containers: expected a list of objects, got string"),
        ("2 containers a map", _spoiled(_QUOTA, (_C0[:-1], {"main": {}})), "MalformedObject", "spec.containers: expected a list of objects, got object"),
        ("2 containers ['x']", _spoiled(_QUOTA, (_C0[:-1], ["x"])), "MalformedObject", "spec.containers[0]: expected an object, got string"),
        ("2 resources a string", _spoiled(_QUOTA, (_C0 + ("resources",), "nvidia.com/gpu=64")), "MalformedObject",
         "spec.containers[0].resources: expected an object, got string"),
        ("2 limits a string", _spoiled(_QUOTA, (_C0 + ("resources",), {"limits": "nvidia.com/gpu=64"})), "MalformedObject",
         "spec.containers[0].resources.limits: expected an object, got string"),
        ("2 spec a list", _spoiled(_QUOTA, (("request", "object", "spec"), [])), "MalformedObject", "spec: expected an object, got list"),
        ("5 requests 0 beside limits 64", _spoiled(_QUOTA, (_C0 + ("resources", "requests", "nvidia.com/gpu"), "0")), "MalformedResourceRequests",
         "spec.containers[0].resources.requests[nvidia.com/gpu]: '0' differs from limits '64'"),
        ("5 NVIDIA.COM/GPU", _spoiled(_QUOTA, (_C0 + ("resources",), {"limits": {"NVIDIA.COM/GPU": "64"}})), "MalformedResourceName",
         "spec.containers[0].resources.limits[NVIDIA.COM/GPU]: 'NVIDIA.COM/GPU' is not a valid resource name"),
        ("5 the GPU key twice", dup, "MalformedDuplicateKey",
         "request.object.spec.containers[0].resources.limits: key 'nvidia.com/gpu' appears twice ('64', then '0')"),
        ("6 exec without userInfo", _spoiled(_EXEC, (("request", "userInfo"), KeyError)), "UnknownIdentity", "by a requester without a username"),
        ("6 exec with username null", _spoiled(_EXEC, (("request", "userInfo", "username"), None)), "UnknownIdentity", "by a requester without a username"),
        ("7 minResources '128'", _spoiled(_GROUP, (("request", "object", "spec", "minResources"), "128")), "MalformedObject",
         "spec.minResources: expected an object, got string"),
        ("7 minResources a list", _spoiled(_GROUP, (("request", "object", "spec", "minResources"), [{"nvidia.com/gpu": "128"}])), "MalformedObject",
         "spec.minResources: expected an object, got list"),
        ("8 PodGroup labels a string", _spoiled(_GROUP, (("request", "object", "metadata", "labels"), "x")), "MalformedObject",
         "metadata.labels: expected an object of strings, got string"),
        ("8 PodGroup labels a list", _spoiled(_GROUP, (("request", "object", "metadata", "labels"), ["x"])), "MalformedObject",
         "metadata.labels: expected an object of strings, got list"),
        ("8 PodGroup labels a number", _spoiled(_GROUP, (("request", "object", "metadata", "labels"), 3)), "MalformedObject",
         "metadata.labels: expected an object of strings, got number"),
    ]
    return ([{"name": n, "body": b, "want_status": 400, "want_code": "InvalidRequest", "want_text": t} for n, b, t in bad_request]
            + [{"name": n, "body": b, "want_status": 200, "want_code": c, "want_text": t} for n, b, c, t in denied])


ISSUE_CASES = issue_cases()
