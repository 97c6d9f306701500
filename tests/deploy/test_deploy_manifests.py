"""Webhook configurations: narrowed to what the policies govern, valid for the API server, CEL that compiles and evaluates."""

import fnmatch
import os
import re

import kubernetes_validate
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import deploy_apiserver as api
import deploy_builders as b
from lang import ir
from policy.manifests import configurations as m
from policy.manifests import cel
from policy.manifests.scope import NamespaceScope, eval_without_gpu, namespace_scope

EXAMPLES = int(os.environ.get("ALLOT_FUZZ_EXAMPLES", "80"))
K8S_VERSIONS = ("1.33.0", kubernetes_validate.latest_version())
AGENT_SA = "system:serviceaccount:agents-7:bot"


# ---- static analysis of blocks --------------------------------------------------------


@pytest.mark.parametrize(
    "expr, want",
    [
        (b.cmp("gpus", ">", 0), False),
        (b.cmp("gpus", ">=", 1000), False),
        (b.cmp("gpus", "<=", 250), True),  # 0 <= 0.25: a CPU pod matches
        (b.cmp("gpus", "==", 0), True),
        (ir.Compare("<", b.lit(0, ir.Type.GPU), b.field("total_gpus"), b.S), False),  # literal on the left
        (b.cmp("fraction", "<", 500, ir.Type.FRACTION), False),  # none compares false
        (b.cmp("gpu_memory", "<", 10, ir.Type.BYTES), None),  # none or 0 depending on dialect
        (b.not_(b.cmp("gpus", ">", 0)), True),
        (b.all_of(b.eq("namespace", "x"), b.cmp("gpus", ">", 0)), False),
        (b.any_of(b.eq("namespace", "x"), b.cmp("gpus", ">", 0)), None),
        (b.any_of(b.cmp("total_gpus", ">", 0), b.cmp("gpus", ">", 0)), False),
        (b.eq("namespace", "x"), None),
        (None, True),
    ],
)
def test_eval_without_gpu(expr, want):
    assert eval_without_gpu(expr) is want


@pytest.mark.parametrize(
    "expr, want_names, want_globs",
    [
        (b.eq("namespace", "team-b"), {"team-b"}, set()),
        (b.matches("namespace", "team-a*"), set(), {"team-a*"}),
        (b.matches("namespace", "plain"), {"plain"}, set()),
        (b.any_of(b.eq("namespace", "a"), b.matches("namespace", "b-*")), {"a"}, {"b-*"}),
        (b.all_of(b.cmp("gpus", ">", 0), b.eq("namespace", "a")), {"a"}, set()),
        (b.all_of(b.matches("namespace", "a*"), b.eq("namespace", "ab")), {"ab"}, set()),  # exact preferred
    ],
)
def test_namespace_scope_pins(expr, want_names, want_globs):
    assert namespace_scope(expr) == NamespaceScope(frozenset(want_names), frozenset(want_globs))


@pytest.mark.parametrize(
    "expr",
    [
        b.any_of(b.eq("namespace", "a"), b.cmp("gpus", ">", 0)),
        b.not_(b.eq("namespace", "a")),
        ir.Compare("!=", b.field("namespace"), b.lit("a"), b.S),
        b.cmp("gpus", ">", 0),
    ],
)
def test_namespace_scope_refuses_what_is_not_a_pin(expr):
    assert namespace_scope(expr) is None


# ---- glob -> RE2 ------------------------------------------------------------------------

GLOB_ALPHABET = st.sampled_from(list("ab-:.*?[]!^\\"))
NAME_ALPHABET = st.sampled_from(list("ab-:.[]!^\\\n"))


@settings(max_examples=EXAMPLES, deadline=None)
@given(glob=st.text(GLOB_ALPHABET, max_size=8), name=st.text(NAME_ALPHABET, max_size=8))
def test_glob_regex_agrees_with_fnmatch(glob, name):
    regex = cel.glob_to_re2(glob)
    assert regex.endswith("$")
    try:
        # RE2's `$` (no multi-line flag) is end of text; Python's also matches before a final
        # newline, so check RE2's meaning with Python's `\Z`.
        compiled = re.compile(regex[:-1] + r"\Z")
    except re.error:  # pragma: no cover - a failure here is the bug we look for
        pytest.fail(f"glob {glob!r} gave an invalid regex {cel.glob_to_re2(glob)!r}")
    assert bool(compiled.search(name)) == fnmatch.fnmatchcase(name, glob)


@pytest.mark.parametrize(
    "glob, want",
    [
        ("exact", 'u == "exact"'),
        ("team-*", 'u.startsWith("team-")'),
        ("*-bot", 'u.endsWith("-bot")'),
        ("a*b", 'u.matches("(?s)^a.*b$")'),
    ],
)
def test_glob_cel_prefers_plain_string_functions(glob, want):
    assert cel.glob_cel("u", glob) == want


# ---- CEL evaluation on sample requests ------------------------------------------------------


@pytest.mark.parametrize(
    "identity, user, groups, want",
    [
        (b.AGENT_IDENTITY, AGENT_SA, None, True),
        (b.AGENT_IDENTITY, "alice", ["acme:agents"], True),
        (b.AGENT_IDENTITY, "alice", ["system:authenticated"], False),
        (b.AGENT_IDENTITY, "alice", None, False),  # no groups field at all: no CEL error
        (b.AGENT_IDENTITY, "system:serviceaccount:default:bot", None, False),
        (b.eq("user", "robot"), "robot", None, True),
        (b.all_of(b.matches("user", "ci-*"), b.not_(b.in_groups("humans"))), "ci-1", ["humans"], False),
        (b.all_of(b.matches("user", "ci-*"), b.not_(b.in_groups("humans"))), "ci-1", [], True),
        # serviceaccount has no exact translation: over-approximated by the SA username prefix
        (b.eq("serviceaccount", "agents:bot"), AGENT_SA, None, True),
        (b.eq("serviceaccount", "agents:bot"), "alice", None, False),
        # an untranslatable test under `not` must not shrink the match
        (b.not_(b.eq("serviceaccount", "x")), "alice", None, True),
    ],
)
def test_identity_cel_matches_agents_and_only_agents(identity, user, groups, want):
    expression = cel.identity_cel(identity)
    req = b.request(user=user, groups=groups, obj=b.pod())
    assert bool(api.evaluate(expression, req)) is want


@pytest.mark.parametrize(
    "req, want",
    [
        (b.request(obj=b.pod(gpu=True)), True),
        (b.request(obj=b.pod()), False),
        (b.request(obj=b.pod(init_gpu=True)), True),  # HAMi memory on an init container
        (b.request(obj=b.pod(claims=True)), True),  # DRA claim
        (b.request(obj=b.pod(annotations={"gpu-fraction": "0.5"})), True),  # KAI
        (b.request(obj=b.pod(annotations={"team": "a"})), False),
        (b.request(operation="DELETE", obj=None, old=b.pod(gpu=True)), True),  # object is null on DELETE
        (b.request(operation="DELETE", obj=None, old=b.pod()), False),
        (b.request(operation="UPDATE", obj=b.pod(), old=b.pod(gpu=True)), True),
        (b.request(obj={"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "bare"}, "spec": {}}), False),
    ],
)
def test_gpu_pod_cel(req, want):
    assert bool(api.evaluate(cel.gpu_pod_cel(), req)) is want


def test_namespace_cel_covers_names_and_globs():
    expression = cel.namespace_cel(NamespaceScope(frozenset({"team-b"}), frozenset({"inference-*"})))
    got = {ns: bool(api.evaluate(expression, b.request(namespace=ns, obj=b.pod()))) for ns in ("team-b", "inference-7", "team-c")}
    assert got == {"team-b": True, "inference-7": True, "team-c": False}


# ---- who gets intercepted --------------------------------------------------------------------

CONTRACT = b.contract_set()
AGENTS_ONLY = ir.PolicySet(agents=(b.agents(b.AGENT_IDENTITY),))


def hits(ps: ir.PolicySet, req: dict) -> set[str]:
    return set(api.intercepting(m.validating_configuration(ps), req)) | set(api.intercepting(m.mutating_configuration(ps), req))


PODS_BOTH = {"pods.validate.allot.io", "pods.mutate.allot.io"}
AGENTS = {"agents.validate.allot.io"}


@pytest.mark.parametrize(
    "name, ps, req, want_hits",
    [
        ("gpu pod by a person", CONTRACT, b.request(obj=b.pod(gpu=True)), PODS_BOTH),
        ("cpu pod by a person", CONTRACT, b.request(obj=b.pod()), set()),
        ("cpu pod by an agent", CONTRACT, b.request(obj=b.pod(), user=AGENT_SA), AGENTS),
        ("gpu pod by an agent", CONTRACT, b.request(obj=b.pod(gpu=True), user=AGENT_SA), AGENTS | PODS_BOTH),
        ("agent via group", CONTRACT, b.request(obj=b.pod(), groups=["acme:agents"]), AGENTS),
        ("exec by an agent", CONTRACT,
         b.request(operation="CONNECT", subresource="exec", user=AGENT_SA, obj={"kind": "PodExecOptions"}), AGENTS),
        ("exec by a person", CONTRACT, b.request(operation="CONNECT", subresource="exec", obj={"kind": "PodExecOptions"}), set()),
        ("secret by an agent", CONTRACT,
         b.request(resource="secrets", kind="Secret", user=AGENT_SA, obj={"kind": "Secret"}), AGENTS),
        ("namespace (cluster-scoped) by an agent", CONTRACT,
         b.request(resource="namespaces", kind="Namespace", namespace="", user=AGENT_SA, obj={"kind": "Namespace"}), AGENTS),
        ("gpu pod in kube-system", CONTRACT, b.request(namespace="kube-system", obj=b.pod(gpu=True)), set()),
        ("gpu pod in allot-system", CONTRACT, b.request(namespace="allot-system", obj=b.pod(gpu=True)), set()),
        ("delete of a gpu pod (no block reads operation)", CONTRACT,
         b.request(operation="DELETE", obj=None, old=b.pod(gpu=True)), set()),
        ("podgroup", CONTRACT,
         b.request(group="scheduling.x-k8s.io", resource="podgroups", kind="PodGroup", obj={"kind": "PodGroup"}),
         {"groups.validate.allot.io"}),
        ("upstream podgroup without a class", CONTRACT,
         b.request(group="scheduling.k8s.io", resource="podgroups", kind="PodGroup", obj={"kind": "PodGroup", "spec": {}}),
         {"groups.validate.allot.io", "podgroups.mutate.allot.io"}),
        ("upstream podgroup naming a class", CONTRACT,
         b.request(group="scheduling.k8s.io", resource="podgroups", kind="PodGroup",
                   obj={"kind": "PodGroup", "spec": {"priorityClassName": "prod"}}),
         {"groups.validate.allot.io"}),
        ("cpu-only jobset (tests/deploy/test_deploy_workloads.py has the GPU ones)", CONTRACT,
         b.request(group="jobset.x-k8s.io", resource="jobsets", kind="JobSet", obj={"kind": "JobSet", "spec": {"replicatedJobs": []}}), set()),
        ("kubectl scale", CONTRACT,
         b.request(operation="UPDATE", group="apps", resource="deployments", subresource="scale", kind="Scale", obj={"kind": "Scale"}),
         {"workloads.validate.allot.io"}),
        ("job in kube-system", CONTRACT,
         b.request(namespace="kube-system", group="batch", resource="jobs", kind="Job", obj={"kind": "Job"}), set()),
        ("agents only: job by a person", AGENTS_ONLY, b.request(group="batch", resource="jobs", kind="Job", obj={"kind": "Job"}), set()),
        ("agents only: gpu pod by a person", AGENTS_ONLY, b.request(obj=b.pod(gpu=True)), set()),
        ("agents only: cpu pod by a person", AGENTS_ONLY, b.request(obj=b.pod()), set()),
        ("agents only: pod by an agent", AGENTS_ONLY, b.request(obj=b.pod(), user=AGENT_SA), AGENTS),
    ],
)
def test_who_is_intercepted(name, ps, req, want_hits):
    assert hits(ps, req) == want_hits, name


def test_agents_only_set_has_no_pod_or_group_webhooks():
    validating, mutating = m.validating_configuration(AGENTS_ONLY), m.mutating_configuration(AGENTS_ONLY)
    assert [w["name"] for w in validating["webhooks"]] == ["agents.validate.allot.io"]
    assert mutating["webhooks"] == []


def test_a_rule_that_may_act_on_cpu_pods_drops_the_gpu_condition():
    ps = ir.PolicySet(rules=(b.deny_rule("no-latest", b.eq("namespace", "prod")),))
    assert hits(ps, b.request(namespace="prod", obj=b.pod())) == {"pods.validate.allot.io"}
    assert hits(ps, b.request(namespace="dev", obj=b.pod())) == set()


def test_exact_namespaces_narrow_by_selector_and_globs_by_condition():
    exact = m.validating_configuration(ir.PolicySet(quotas=(b.quota("b", b.eq("namespace", "team-b")),)))
    sel = exact["webhooks"][0]["namespaceSelector"]["matchExpressions"]
    assert {"key": m.NAME_LABEL, "operator": "In", "values": ["team-b"]} in sel
    assert exact["webhooks"][0]["matchConditions"][1] == {"name": "policy-selectors", "expression": 'request.namespace == "team-b"'}
    globbed = m.validating_configuration(ir.PolicySet(quotas=(b.quota("a", b.matches("namespace", "team-a*")),)))
    assert [c["name"] for c in globbed["webhooks"][0]["matchConditions"]] == ["gpu-pod", "policy-selectors"]
    assert hits(ir.PolicySet(quotas=(b.quota("a", b.matches("namespace", "team-a*")),)),
                b.request(namespace="team-z", obj=b.pod(gpu=True))) == set()


def test_one_unpinned_block_means_no_namespace_narrowing():
    ps = ir.PolicySet(quotas=(b.quota("b", b.eq("namespace", "team-b")), b.quota("all")))
    entry = m.validating_configuration(ps)["webhooks"][0]
    assert [e["operator"] for e in entry["namespaceSelector"]["matchExpressions"]] == ["NotIn"]


def test_a_rule_reading_operation_adds_delete_and_its_cel_survives_a_null_object():
    ps = ir.PolicySet(rules=(b.deny_rule("no-delete", None, b.all_of(b.eq("operation", "DELETE"), b.cmp("gpus", ">", 0))),))
    assert hits(ps, b.request(operation="DELETE", obj=None, old=b.pod(gpu=True))) == {"pods.validate.allot.io"}


@pytest.mark.parametrize(
    "mode, want_policy",
    [("enforce", "Fail"), ("warn", "Ignore"), ("audit", "Ignore")],
)
def test_failure_policy_follows_whether_any_block_enforces(mode, want_policy):
    ps = ir.PolicySet(quotas=(b.quota("a", mode=mode),), agents=(b.agents(b.AGENT_IDENTITY, mode=mode),))
    hooks = {w["name"]: w["failurePolicy"] for w in m.validating_configuration(ps)["webhooks"]}
    assert hooks.pop("workloads-release.validate.allot.io") == "Ignore"  # releasing a hold never blocks a DELETE
    assert set(hooks.values()) == {want_policy}


# ---- what the API server requires -------------------------------------------------------------

SETS = {"contract": CONTRACT, "agents-only": AGENTS_ONLY, "empty": ir.PolicySet()}
TARGET = m.Target(ca_bundle="Y2E=", digest="sha256:00")


def all_manifests(ps: ir.PolicySet, target: m.Target = TARGET) -> list[dict]:
    return [m.validating_configuration(ps, target), m.mutating_configuration(ps, target), *m.priority_classes(ps)]


@pytest.mark.parametrize("version", K8S_VERSIONS)
@pytest.mark.parametrize("set_name", sorted(SETS))
def test_every_emitted_manifest_validates_against_the_openapi_schema(set_name, version):
    for doc in all_manifests(SETS[set_name]):
        kubernetes_validate.validate(doc, version, strict=True)


def entries(ps: ir.PolicySet) -> list[tuple[str, dict]]:
    return [(c["kind"], w) for c in all_manifests(ps)[:2] for w in c["webhooks"]]


@pytest.mark.parametrize("set_name", sorted(SETS))
def test_webhook_entries_follow_the_api_server_rules_and_ours(set_name):
    seen = set()
    for kind, w in entries(SETS[set_name]):
        assert w["name"].count(".") >= 2 and w["name"] not in seen  # fully qualified, unique
        seen.add(w["name"])
        assert w["sideEffects"] == "NoneOnDryRun" and w["admissionReviewVersions"] == ["v1"]
        assert 1 <= w["timeoutSeconds"] <= 30 and w["failurePolicy"] in ("Fail", "Ignore")
        assert w["clientConfig"]["caBundle"] == "Y2E="
        assert w["clientConfig"]["service"] == {"name": "allot", "namespace": "allot-system",
                                                "path": w["clientConfig"]["service"]["path"], "port": 443}
        assert {"key": m.NAME_LABEL, "operator": "NotIn", "values": ["allot-system", "kube-system"]} in \
            w["namespaceSelector"]["matchExpressions"]
        assert (w.get("reinvocationPolicy") == "IfNeeded") is (kind == "MutatingWebhookConfiguration")
        conds = w.get("matchConditions", [])
        assert len(conds) <= 64 and len({c["name"] for c in conds}) == len(conds)
        for rule in w["rules"]:
            assert "*/*" not in rule["resources"] or rule["resources"] == ["*/*"]  # API server forbids overlap
            assert "CONNECT" not in rule["operations"] or w["name"] == "agents.validate.allot.io"


SAMPLES = [
    b.request(obj=b.pod(gpu=True)),
    b.request(operation="UPDATE", obj=b.pod(), old=b.pod(gpu=True)),
    b.request(operation="DELETE", obj=None, old=b.pod()),
    b.request(operation="CONNECT", subresource="attach", obj={"kind": "PodAttachOptions"}, user=AGENT_SA, groups=[]),
    b.request(resource="namespaces", namespace="", obj={"kind": "Namespace"}, user="", groups=None),
]


@pytest.mark.parametrize("set_name", sorted(SETS))
def test_every_match_condition_compiles_and_evaluates_to_a_bool_without_error(set_name):
    for _, w in entries(SETS[set_name]):
        for c in w.get("matchConditions", []):
            for req in SAMPLES:
                assert isinstance(bool(api.evaluate(c["expression"], req)), bool)


@pytest.mark.parametrize(
    "name, preempts, default, want_policy",
    [("critical", True, False, "PreemptLowerPriority"), ("prod", False, False, "Never"), ("batch", False, True, "Never")],
)
def test_priority_classes(name, preempts, default, want_policy):
    (pc,) = m.priority_classes(ir.PolicySet(priorities=(b.priority(name, 7, preempts, default),)))
    assert (pc["metadata"]["name"], pc["value"], pc["preemptionPolicy"], pc["globalDefault"]) == (name, 7, want_policy, False)
