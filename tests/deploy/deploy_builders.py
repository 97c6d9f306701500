"""Small builders of IR nodes and admission requests for the deploy tests (no parser needed)."""

from __future__ import annotations

from lang import ir
from lang.span import Span

S = Span("t.policy", 1, 1, 1, 2)


def field(name: str) -> ir.Field:
    return ir.Field(name, ir.SUBJECT_FIELDS[name], S)


def lit(value, type_: ir.Type = ir.Type.STRING) -> ir.Lit:
    return ir.Lit(value, type_, S)


def eq(name: str, value) -> ir.Compare:
    return ir.Compare("==", field(name), lit(value), S)


def cmp(name: str, op: str, value: int, type_: ir.Type = ir.Type.GPU) -> ir.Compare:
    return ir.Compare(op, field(name), lit(value, type_), S)


def matches(name: str, glob: str) -> ir.Matches:
    return ir.Matches(field(name), glob, S)


def in_groups(group: str) -> ir.Contains:
    return ir.Contains(lit(group), field("groups"), S)


def label(key: str) -> ir.Index:
    return ir.Index(field("labels"), key, S)


def any_of(*items) -> ir.Or:
    return ir.Or(tuple(items), S)


def all_of(*items) -> ir.And:
    return ir.And(tuple(items), S)


def not_(item) -> ir.Not:
    return ir.Not(item, S)


def quota(name: str, selector=None, mode="enforce") -> ir.Quota:
    return ir.Quota(name, selector, None, 32000, (), None, None, None, mode, S)


def fraction(name: str, selector=None, mode="enforce") -> ir.Fraction:
    return ir.Fraction(name, selector, 100, 500, None, 4, mode, S)


def gang(name: str, selector=None, topology=(), mode="enforce") -> ir.Gang:
    reqs = tuple(ir.TopologyRequirement("fabric", lvl, None, S) for lvl in topology)
    return ir.Gang(name, selector, True, reqs, "deny", mode, S)


def agents(identity, mode="enforce", name="agents") -> ir.Agents:
    allow = ir.AgentAllow(frozenset({"CREATE"}), frozenset({"pods"}), None, S)
    return ir.Agents(name, identity, (allow,), (), mode, S)


def deny_rule(name: str, selector=None, when=None, mode="enforce") -> ir.Rule:
    return ir.Rule(name, selector, when, (ir.Deny(ir.Template(("no",), S), S),), mode, S)


def set_rule(name: str, selector=None, when=None, mode="enforce") -> ir.Rule:
    return ir.Rule(name, selector, when, (ir.SetField("labels", "team", lit("x"), S),), mode, S)


def priority(name: str, value: int, preempts=False, default=False) -> ir.Priority:
    return ir.Priority(name, value, preempts, default, S)


AGENT_IDENTITY = any_of(matches("user", "system:serviceaccount:agents-*:*"), in_groups("acme:agents"))


def contract_set() -> ir.PolicySet:
    """The language draft's contract example, as the IR the compiler should produce."""
    return ir.PolicySet(
        priorities=(priority("critical", 1000, preempts=True), priority("prod", 500), priority("batch", 100, default=True)),
        quotas=(quota("team-a", matches("namespace", "team-a*")), quota("team-b", eq("namespace", "team-b"))),
        fractions=(fraction("shared-inference", matches("namespace", "inference-*")),),
        gangs=(gang("training", ir.Compare("==", label("acme.io/workload"), lit("training"), S), ("rack", "block")),),
        agents=(agents(AGENT_IDENTITY),),
        rules=(
            deny_rule("inference-declares-vram", ir.Compare("==", label("app.kubernetes.io/component"), lit("inference"), S),
                      all_of(cmp("gpus", ">", 0), not_(ir.Has(ir.Index(field("annotations"), "acme.io/vram-floor", S), S))),
                      mode="warn"),
            deny_rule("sleeping-agents-hold-no-gpus", ir.Compare("==", label("agents.acme.io/state"), lit("sleeping"), S),
                      cmp("gpus", ">", 0)),
            set_rule("label-team", all_of(cmp("gpus", ">", 0), not_(ir.Contains(lit("team"), field("labels"), S)))),
        ),
    )


# ---- admission requests ---------------------------------------------------------------


def pod(gpu: bool = False, annotations: dict | None = None, claims: bool = False, init_gpu: bool = False) -> dict:
    limits = {"cpu": "1", **({"nvidia.com/gpu": "1"} if gpu else {})}
    spec: dict = {"containers": [{"name": "main", "image": "x", "resources": {"limits": limits}}, {"name": "side", "image": "y"}]}
    if init_gpu:
        spec["initContainers"] = [{"name": "init", "image": "z", "resources": {"requests": {"nvidia.com/gpumem": "1000"}}}]
    if claims:
        spec["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "annotations": annotations or {}}, "spec": spec}


def request(operation="CREATE", namespace="team-a", obj=None, old=None, user="alice", groups=None,
            group="", resource="pods", subresource=None, kind="Pod") -> dict:
    """An AdmissionReview `request` as the API server sends it."""
    req = {
        "uid": "u-1",
        "kind": {"group": group, "version": "v1", "kind": kind},
        "resource": {"group": group, "version": "v1", "resource": resource},
        "namespace": namespace,
        "operation": operation,
        "userInfo": {"username": user, **({"groups": groups} if groups is not None else {})},
        "object": obj,
        "oldObject": old,
    }
    if subresource:
        req["subResource"] = subresource
    return req
