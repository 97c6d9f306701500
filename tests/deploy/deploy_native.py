"""The library's test cases as the native policies see them: the CEL of a ValidatingAdmissionPolicy evaluated in cel-python.

Shared by the offline table test (test_deploy_native.py) and the e2e differential test.
"""

from __future__ import annotations

import copy
import dataclasses
import pathlib

import celpy

from policy.admission import denial_message
from policy.manifests import native
from policy.testing.cases import build_review
from webhook.testing.runner import (
    Run,
    _Clusters,
    _Sets,
    find_targets,
    policy_files,
    read_test_file,
)

ROOT = pathlib.Path(__file__).resolve().parents[2]
ENV = celpy.Environment()
EXCLUDED = ("allot-system", "kube-system")


def library_cases():
    """(test file, case, policy set, cluster objects) of every library case whose request is a Pod CREATE/UPDATE."""
    run, clusters = Run(), _Clusters()
    sets = _Sets(run)
    out = []
    for target in find_targets([str(ROOT / "policies")]):
        tf = read_test_file(target.path).tests
        policy_set, problem = sets.get(policy_files(target), target)
        assert problem is None, problem
        for case in tf.cases:
            req = build_review(case)["request"]
            kind = (req.get("kind") or {}).get("kind")
            if kind != "Pod" or req.get("operation") not in ("CREATE", "UPDATE") or req.get("subResource"):
                continue
            if (req.get("namespace") or "default") in EXCLUDED or case.before:
                continue
            spec = case.cluster if case.cluster is not None else tf.cluster
            out.append((target.path.relative_to(ROOT), case, policy_set, clusters.objects(spec, target.path.parent)))
    return out


def _program(expression: str):
    return ENV.program(ENV.compile(expression))


def native_verdict(policy: dict, request: dict, namespace: dict | None) -> str | None:
    """The message a ValidatingAdmissionPolicy denies `request` with, or None when it admits (or does not match)."""
    activation = {
        "request": celpy.json_to_cel({k: v for k, v in request.items() if k not in ("object", "oldObject")}),
        "object": celpy.json_to_cel(request.get("object")),
        "oldObject": celpy.json_to_cel(request.get("oldObject")),
        "namespaceObject": celpy.json_to_cel(namespace),
    }
    spec = policy["spec"]
    for cond in spec.get("matchConditions", []):
        ok = _program(cond["expression"]).evaluate(activation)
        assert isinstance(ok, celpy.celtypes.BoolType), f"{cond['expression']}: {ok!r}"
        if not ok:
            return None
    for v in spec["validations"]:
        ok = _program(v["expression"]).evaluate(activation)
        assert isinstance(ok, celpy.celtypes.BoolType), f"{v['expression']}: {ok!r}"
        if not ok:
            return str(_program(v["messageExpression"]).evaluate(activation))
    return None


def webhook_verdict(engine, snapshot, request: dict, block: str, now: float, native_denies=None) -> str | None:
    """The words the webhook's validating side gives for `block` alone on `request` (any mode), or None when it finds nothing."""
    decision = engine.decide(copy.deepcopy(request), snapshot, now, mutate=False, reserve=False)
    # An agents block is native for its leading translatable denies only (`native_denies`: their locations);
    # its default deny (AgentNotAllowed) and later denies are the webhook's.
    reasons = [r for r in decision.reasons if r.block == block and (
        native_denies is None or (r.code == "AgentDenied" and r.location in native_denies))]
    if not reasons:
        return None
    # denial_message words enforcing reasons; a warn/audit rule's reason is worded the same way.
    return denial_message(dataclasses.replace(decision, reasons=tuple(dataclasses.replace(r, mode="enforce") for r in reasons)))


def agent_deny_locations(plan) -> dict[str, set[str]]:
    """Per agents block, the `path:line:col` of each deny the native policy judges."""
    from policy.context import where

    return {a.block.id: {where(d.span) for d in a.block.denies[:len(a.denies)]} for a in plan.agents}


def plans(policy_set):
    """The native plan of a policy set, and its policies by block id."""
    plan = native.plan(policy_set)
    by_block = {}
    for obj in native.validating_policies(plan, EXCLUDED):
        if obj["kind"] == "ValidatingAdmissionPolicy":
            by_block[obj["metadata"]["name"]] = obj
    ids = [v.rule.id for v in plan.validations] + [a.block.id for a in plan.agents]
    return plan, {b: by_block[native.policy_name(b)] for b in ids}
