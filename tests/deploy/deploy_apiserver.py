"""What the API server does before calling a webhook: match rules, namespaceSelector, then matchConditions (CEL).

A small, real emulation for tests: CEL runs in cel-python, the rest follows the
admissionregistration.k8s.io/v1 matching rules for the fields Allot emits.
"""

from __future__ import annotations

import functools

import celpy

ENV = celpy.Environment()


@functools.lru_cache(maxsize=None)
def program(expression: str):
    """Compile a CEL expression (raises on a syntax error)."""
    return ENV.program(ENV.compile(expression))


def evaluate(expression: str, request: dict):
    """Evaluate a matchCondition over an AdmissionReview request, with `object`/`oldObject` bound as k8s does."""
    activation = {
        "request": celpy.json_to_cel({k: v for k, v in request.items() if k not in ("object", "oldObject")}),
        "object": celpy.json_to_cel(request.get("object")),
        "oldObject": celpy.json_to_cel(request.get("oldObject")),
    }
    return program(expression).evaluate(activation)


def _matches_rule(rule: dict, req: dict) -> bool:
    res = req["resource"]
    full = res["resource"] + (f"/{req['subResource']}" if req.get("subResource") else "")
    if req["operation"] not in rule["operations"] and "*" not in rule["operations"]:
        return False
    if "*" not in rule["apiGroups"] and res["group"] not in rule["apiGroups"]:
        return False
    if "*" not in rule["apiVersions"] and res["version"] not in rule["apiVersions"]:
        return False
    scope = rule.get("scope", "*")
    if scope == "Namespaced" and not req.get("namespace") or scope == "Cluster" and req.get("namespace"):
        return False
    for r in rule["resources"]:
        if r == full or r == "*/*" or (r == "*" and "/" not in full):
            return True
        if "/" in r and "/" in full:
            a, b = r.split("/", 1)
            fa, fb = full.split("/", 1)
            if (a == "*" or a == fa) and (b == "*" or b == fb):
                return True
    return False


def _matches_selector(selector: dict, labels: dict) -> bool:
    for e in selector.get("matchExpressions", []):
        present = e["key"] in labels
        if e["operator"] == "In" and not (present and labels[e["key"]] in e["values"]):
            return False
        if e["operator"] == "NotIn" and present and labels[e["key"]] in e["values"]:
            return False
    return all(labels.get(k) == v for k, v in selector.get("matchLabels", {}).items())


def intercepting(config: dict, req: dict) -> list[str]:
    """Names of the webhook entries of `config` the API server would call for `req`."""
    hits = []
    ns = req.get("namespace")
    ns_labels = {"kubernetes.io/metadata.name": ns} if ns else None
    for hook in config.get("webhooks") or []:
        if not any(_matches_rule(r, req) for r in hook["rules"]):
            continue
        # namespaceSelector applies to namespaced requests only (and to Namespace objects themselves).
        if ns_labels is not None and not _matches_selector(hook.get("namespaceSelector", {}), ns_labels):
            continue
        if all(bool(evaluate(c["expression"], req)) for c in hook.get("matchConditions", [])):
            hits.append(hook["name"])
    return hits
