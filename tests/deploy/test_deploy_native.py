"""Native policies (ValidatingAdmissionPolicy) give the webhook's verdict and words on every library case they judge.

Offline: the emitted CEL runs in cel-python over each case's request; the engine decides the
same request; for every natively compiled rule the deny and its message are equal. The e2e
test (tests/e2e/test_e2e_native.py) repeats it against the real API server.
"""

import copy

import deploy_native as dn
import kubernetes_validate
import pytest

from lang import compile_policies
from policy.cluster.snapshot import ClusterSnapshot
from policy.engine import Engine
from policy.manifests import native
from policy.testing.cases import build_review

CASES = dn.library_cases()


def _namespace(snapshot, name: str) -> dict:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": dict(snapshot.namespace_labels(name))}}


@pytest.mark.parametrize("path,case,policy_set,objects", CASES, ids=[f"{p}::{c.name}" for p, c, _, _ in CASES])
def test_native_policy_gives_the_webhooks_verdict_and_message(path, case, policy_set, objects):
    plan, policies = dn.plans(policy_set)
    agents = dn.agent_deny_locations(plan)
    request = build_review(case)["request"]
    snapshot = ClusterSnapshot.from_objects(copy.deepcopy(objects))
    engine = Engine(policy_set)
    ns = request.get("namespace") or "default"
    for block, policy in policies.items():
        want = dn.webhook_verdict(engine, snapshot, request, block, 0.0, agents.get(block))
        got = dn.native_verdict(policy, request, _namespace(snapshot, ns))
        assert got == want, f"{block}: native {got!r} != webhook {want!r}"


def test_the_library_has_native_rules_and_cases_they_deny():
    """The table above would pass vacuously if nothing compiled or nothing was denied."""
    denied = 0
    for _path, case, policy_set, objects in CASES:
        _plan, policies = dn.plans(policy_set)
        request = build_review(case)["request"]
        snapshot = ClusterSnapshot.from_objects(copy.deepcopy(objects))
        ns = request.get("namespace") or "default"
        denied += sum(dn.native_verdict(p, request, _namespace(snapshot, ns)) is not None for p in policies.values())
    assert denied >= 2


@pytest.mark.parametrize("version", ["1.30.0", kubernetes_validate.latest_version()])
def test_every_native_object_validates_against_the_openapi_schema(version):
    sets = {id(ps): ps for _p, _c, ps, _o in CASES}
    objects = [o for ps in sets.values() for o in native.validating_policies(native.plan(ps))]
    assert objects
    for obj in objects:
        kubernetes_validate.validate(obj, version, strict=True)


def _set(text: str):
    ps, diags = compile_policies([("t.policy", text)])
    assert ps is not None, diags
    return ps


@pytest.mark.parametrize("text,where,reason", [
    ('rule r { for namespace == "a" deny "no" }', native.SPLIT, "workload objects"),
    ('rule r { for kind == "Pod" and namespace == "a" deny "no" }', native.NATIVE, None),
    ('rule r { for gpus > 0 deny "no" }', native.WEBHOOK, "`gpus` reads GPU amounts"),
    ('rule r { for kind == "Pod" deny "asks {gpus}" }', native.WEBHOOK, "number formats"),
    ('rule r { for kind == "Pod" and operation == "DELETE" deny "no" }', native.WEBHOOK, "DELETE"),
    ('rule r { set labels["a"] = "b" }', native.NATIVE, None),
    ('quota q { gpus 4 }', native.WEBHOOK, "reads usage"),
])
def test_every_block_says_where_it_runs_and_why(text, where, reason):
    plan = native.plan(_set(text))
    (placement,) = plan.placements
    assert placement.where == where
    if reason:
        assert any(reason in r for r in placement.reasons), placement.reasons
    else:
        assert placement.reasons == ()


def test_before_1_30_every_deny_falls_back_to_the_webhook_and_says_why():
    ps = _set('rule r { for kind == "Pod" deny "no" }')
    assert native.plan(ps, (1, 30)).validations
    old = native.plan(ps, (1, 29))
    assert not old.validations and old.placements[0].where == native.WEBHOOK
    assert "GA from 1.30" in old.placements[0].reasons[0]
    assert any("MutatingAdmissionPolicy is GA from 1.36" in n for n in native.plan(ps, (1, 35)).notes)


@pytest.mark.parametrize("expr,user,groups,holds", [
    ('serviceaccount == "ns/sa"', "system:serviceaccount:ns:sa", [], True),
    ('serviceaccount == "ns/sa"', "system:serviceaccount:ns:other", [], False),
    ('has(serviceaccount) and serviceaccount != "ns/sa"', "alice", [], False),
    ('has(serviceaccount)', "system:serviceaccount:ns:sa", [], True),
    ('has(serviceaccount)', "system:serviceaccount:ns", [], False),
    ('"g" in groups', "x", ["g"], True),
    ('user matches "bot-*"', "bot-1", [], True),
    ('not (user matches "bot-*")', "alice", [], True),
])
def test_identity_atoms_translate_exactly(expr, user, groups, holds):
    ps = _set(f'rule r {{ for kind == "Pod" and {expr} deny "no" }}')
    engine = Engine(ps)
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "a"}, "spec": {"containers": [{"name": "c", "image": "i"}]}}
    from policy.admission import wrap_manifest

    request = wrap_manifest(pod, user=user, groups=tuple(groups), operation="CREATE", namespace="a")["request"]
    (policy,) = [o for o in native.validating_policies(native.plan(ps)) if o["kind"] == "ValidatingAdmissionPolicy"]
    snapshot = ClusterSnapshot.from_objects([])
    want = dn.webhook_verdict(engine, snapshot, request, "rule r", 0.0)
    assert (want is not None) == holds
    assert dn.native_verdict(policy, request, None) == want


MUTATING = '''rule tag-owner {
  for kind == "Pod" and namespace == "team-x"
  set annotations["acme.io/owner"] = "platform"
  set labels["acme.io/ns"] = namespace
}
'''


def test_a_set_known_in_the_request_becomes_a_mutating_admission_policy_and_leaves_the_webhook():
    from policy.manifests import configurations

    ps = _set(MUTATING)
    plan = native.plan(ps)
    assert plan.placements[0].where == native.NATIVE and plan.placements[0].native == ("set on Pods",)
    policy, binding = native.mutating_policies(plan)
    for obj in (policy, binding):
        kubernetes_validate.validate(obj, kubernetes_validate.latest_version(), strict=True)
    expr = policy["spec"]["mutations"][0]["applyConfiguration"]["expression"]
    assert expr == 'Object{metadata: Object.metadata{labels: {"acme.io/ns": request.namespace}, annotations: {"acme.io/owner": "platform"}}}'
    assert binding["spec"] == {"policyName": "allot-rule-tag-owner"}
    hooks = configurations.mutating_configuration(ps, native=plan.native_set_blocks)["webhooks"]
    assert [w["name"] for w in hooks] == []
    assert [w["name"] for w in configurations.mutating_configuration(ps)["webhooks"]] == ["pods.mutate.allot.io"]


@pytest.mark.parametrize("text,reason", [
    (MUTATING, "MutatingAdmissionPolicy is GA from 1.36"),  # at 1.35
    (MUTATING.replace("rule tag-owner {", "rule tag-owner {\n  mode warn"), "reports the change"),
    ('rule r { for kind == "Pod" set labels["a"] = "b" set labels["t"] = namespace.labels["t"] }', "may be none"),
    ('rule r { for kind == "Pod" set limits["nvidia.com/gpu"] = requests["nvidia.com/gpu"] }', "GPU dialects"),
])
def test_a_set_that_cannot_be_made_natively_says_why(text, reason):
    plan = native.plan(_set(text), (1, 35) if "GA from" in reason else native.NEWEST)
    assert not plan.mutations
    assert plan.placements[0].where == native.WEBHOOK
    assert any(reason in r for r in plan.placements[0].reasons), plan.placements[0].reasons


def test_a_single_set_of_a_value_that_may_be_none_matches_only_when_it_is_present():
    plan = native.plan(_set('rule r { for kind == "Pod" set labels["t"] = namespace.labels["t"] }'))
    (m,) = plan.mutations
    policy = {"spec": {"matchConditions": [{"name": "c", "expression": m.condition}], "validations": [
        {"expression": "false", "messageExpression": '"matched"'}]}}
    request = {"namespace": "a", "name": "p", "userInfo": {"username": "u"}, "object": {"metadata": {"name": "p"}}}
    labelled = {"metadata": {"name": "a", "labels": {"t": "x"}}}
    assert dn.native_verdict(policy, request, labelled) == "matched"
    assert dn.native_verdict(policy, request, {"metadata": {"name": "a", "labels": {}}}) is None
    assert dn.native_verdict(policy, request, {"metadata": {"name": "a"}}) is None


def test_compile_explain_json_lists_every_governing_block(tmp_path, capsys):
    import json

    from webhook.cli import main

    assert main(["compile", "--policy", str(dn.ROOT / "policies"), "-o", str(tmp_path), "--explain", "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    ps, _ = compile_policies([(str(p), p.read_text()) for p in sorted((dn.ROOT / "policies").rglob("*.policy"))])
    governing = {b.id for b in (*ps.quotas, *ps.fractions, *ps.gangs, *ps.agents, *ps.rules)}
    listed = {b["block"] for b in out["blocks"]}
    assert governing <= listed
    assert {b["runs"] for b in out["blocks"]} >= {"webhook", "split"}
    assert all(b["webhook"] for b in out["blocks"] if b["runs"] != "native"), "every fallback says why"
    assert "validating-policies.yaml" in out["files"]


@pytest.mark.parametrize("version", ["1.x", "latest", "2"])
def test_a_bad_kube_version_is_a_usage_error(tmp_path, capsys, version):
    from webhook.cli import main

    assert main(["compile", "--policy", str(dn.ROOT / "policies"), "-o", str(tmp_path), "--kube-version", version]) == 2
    assert "--kube-version" in capsys.readouterr().err


def test_compile_for_1_29_writes_no_native_policies_and_says_so(tmp_path, capsys):
    from webhook.cli import main

    assert main(["compile", "--policy", str(dn.ROOT / "policies"), "-o", str(tmp_path), "--kube-version", "1.29"]) == 0
    assert not (tmp_path / "validating-policies.yaml").exists()
    assert "ValidatingAdmissionPolicy is GA from 1.30" in capsys.readouterr().out


AGENTS = '''agents bots {
  identity user matches "bot-*"
  allow create pods when namespace == "a"
  deny when host_network "bots stay off the host network"
  deny when privileged "bots run unprivileged"
  deny when namespace == "a" and gpus > 0 "no GPUs for bots"
  deny when host_path "never judged natively: after a deny that is not"
}
'''


@pytest.mark.parametrize("user,labels,spec,denied", [
    ("bot-1", None, {"hostNetwork": True}, True),
    ("alice", {"agents.acme.io/state": "on"}, {"hostNetwork": True}, True),  # marked by an agents.* label
    ("alice", {"allot.dev/agent": "true"}, {"hostNetwork": True}, True),
    ("alice", {"allot.dev/agent": "false"}, {"hostNetwork": True}, False),
    ("alice", {"agents.acme.io": "on"}, {"hostNetwork": True}, False),  # no domain slash: not a mark
    ("bot-1", None, {"hostNetwork": True, "containers": [{"name": "c", "image": "i", "securityContext": {"privileged": True}}]}, True),
    ("bot-1", None, {"containers": [{"name": "c", "image": "i", "securityContext": {"privileged": True}}]}, True),
    ("bot-1", None, {"volumes": [{"name": "v", "hostPath": {"path": "/"}}]}, False),  # the webhook's deny
    ("bot-1", None, {}, False),
])
def test_an_agents_blocks_leading_denies_are_judged_natively_as_the_webhook_does(user, labels, spec, denied):
    from policy.admission import wrap_manifest

    ps = _set(AGENTS)
    plan = native.plan(ps)
    assert plan.placements[0].where == native.SPLIT
    meta = {"name": "p", "namespace": "a", **({"labels": labels} if labels else {})}
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
           "spec": {"containers": [{"name": "c", "image": "i"}], **spec}}
    request = wrap_manifest(pod, user=user, groups=(), operation="CREATE", namespace="a")["request"]
    (policy,) = [o for o in native.validating_policies(plan) if o["kind"] == "ValidatingAdmissionPolicy"]
    want = dn.webhook_verdict(Engine(ps), ClusterSnapshot.from_objects([]), request, "agents bots", 0.0,
                              dn.agent_deny_locations(plan)["agents bots"])
    got = dn.native_verdict(policy, request, None)
    assert got == want
    assert (got is not None) == denied
