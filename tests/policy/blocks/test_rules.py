"""Rules (deny, set, interpolation, RFC 6901 keys) and the three modes plus the serve-time override."""

from __future__ import annotations

import re
from dataclasses import replace

import jsonpatch
import pytest
from tests.policy.engine.engine_builders import cmp, field, gpus_gt, index, lit, policy, quota, ns_is, rule, tpl, workload

from lang import ir
from lang.span import Span
from policy.engine import Engine
from policy.cluster.snapshot import ClusterSnapshot

S = Span("t.policy", 1, 1, 1, 2)
SLEEPING = rule(
    "sleeping-agents-hold-no-gpus",
    selector=cmp("==", index("labels", "agents.acme.io/state"), lit("sleeping", ir.Type.STRING)),
    when=gpus_gt(0),
    actions=[ir.Deny(tpl("a sleeping agent holds ", field("gpus"), " GPUs; release them"), S)],
)
VRAM = rule(
    "inference-declares-vram",
    mode="warn",
    selector=cmp("==", index("labels", "app.kubernetes.io/component"), lit("inference", ir.Type.STRING)),
    when=ir.And((gpus_gt(0), ir.Not(ir.Has(index("annotations", "acme.io/vram-floor"), S), S)), S),
    actions=[ir.Deny(tpl("inference pods should declare acme.io/vram-floor"), S)],
)
LABEL_TEAM = rule(
    "label-team",
    selector=ir.And((gpus_gt(0), ir.Not(ir.Contains(lit("team", ir.Type.STRING), field("labels"), S), S)), S),
    actions=[ir.SetField("labels", "team", index("namespace.labels", "team"), S)],
)


def run(rules, w, *, mutate=False, mode_override=None):
    engine = Engine(policy(rules=rules), mode_override=mode_override)
    return engine.evaluate(engine.enrich(w), ClusterSnapshot(), 0.0, mutate=mutate)


def test_deny_interpolates_fields():
    d = run([SLEEPING], workload(gpus=1500, labels={"agents.acme.io/state": "sleeping"}))
    (r,) = d.denials
    assert r.code == "RuleDenied" and r.message == "sleeping-agents-hold-no-gpus: a sleeping agent holds 1.5 GPUs; release them"


@pytest.mark.parametrize(
    "labels, gpus, want_allowed, want_matched",
    [
        ({"agents.acme.io/state": "sleeping"}, 0, True, True),  # selected, `when` false
        ({"agents.acme.io/state": "working"}, 1000, True, False),
        ({}, 1000, True, False),
    ],
)
def test_rule_selection(labels, gpus, want_allowed, want_matched):
    d = run([SLEEPING], workload(gpus=gpus, labels=labels))
    assert d.allowed is want_allowed
    assert ("rule sleeping-agents-hold-no-gpus" in d.blocks) is want_matched


def test_warn_mode_becomes_a_warning_not_a_denial():
    d = run([VRAM], workload(gpus=1000, labels={"app.kubernetes.io/component": "inference"}))
    assert d.allowed and d.denials == ()
    assert d.warnings == ("rule inference-declares-vram: inference pods should declare acme.io/vram-floor",)
    ok = run([VRAM], workload(gpus=1000, labels={"app.kubernetes.io/component": "inference"}, annotations={"acme.io/vram-floor": "20Gi"}))
    assert ok.warnings == ()


@pytest.mark.parametrize(
    "override, want_allowed, want_warnings, want_audit",
    [
        (None, False, 0, 0),
        ("warn", True, 1, 0),
        ("audit", True, 0, 1),
    ],
)
def test_mode_override(override, want_allowed, want_warnings, want_audit):
    d = run([SLEEPING], workload(gpus=1000, labels={"agents.acme.io/state": "sleeping"}), mode_override=override)
    assert d.allowed is want_allowed
    assert len(d.warnings) == want_warnings and len(d.audit) == want_audit
    assert [r.mode for r in d.reasons] == [override or "enforce"]


def test_audit_keys_are_qualified_names():
    audited = rule("x y/z!" * 12, selector=gpus_gt(0), actions=[ir.Deny(tpl("m"), S)], mode="audit")
    d = run([audited, replace(SLEEPING, mode="audit")], workload(gpus=1000, labels={"agents.acme.io/state": "sleeping"}))
    assert d.allowed and len(d.audit) == 2
    for key in d.audit:
        assert re.fullmatch(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?", key) and len(key) <= 63, key
    assert d.audit["rule.sleeping-agents-hold-no-gpus"].startswith("sleeping-agents-hold-no-gpus: a sleeping agent")


def test_warnings_are_cut_to_120_characters():
    long = rule("long", selector=gpus_gt(0), actions=[ir.Deny(tpl("x" * 300), S)], mode="warn")
    (warning,) = run([long], workload(gpus=1000)).warnings
    assert len(warning) == 120 and warning.endswith("...")


def _pod(labels=None, annotations=None):
    meta = {"name": "p", "namespace": "team-a"}
    if labels is not None:
        meta["labels"] = labels
    if annotations is not None:
        meta["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": {"containers": []}}


@pytest.mark.parametrize(
    "obj, want_patch",
    [
        (_pod(), [{"op": "add", "path": "/metadata/labels", "value": {"team": "alpha"}}]),
        (_pod(labels={"app": "x"}), [{"op": "add", "path": "/metadata/labels/team", "value": "alpha"}]),
        (_pod(labels={"team": "beta"}), []),  # `for` excludes pods that already have a team
    ],
)
def test_set_label_patch_applies_cleanly(obj, want_patch):
    w = workload(gpus=1000, obj=obj, labels=obj["metadata"].get("labels", {}), namespace_labels={"team": "alpha"})
    d = run([LABEL_TEAM], w, mutate=True)
    assert list(d.patch) == want_patch
    patched = jsonpatch.apply_patch(obj, list(d.patch))
    assert patched["metadata"]["labels"]["team"] == obj["metadata"].get("labels", {}).get("team", "alpha")


def test_set_escapes_keys_per_rfc6901():
    sets = [
        ir.SetField("annotations", "acme.io/vram-floor", lit("20Gi", ir.Type.STRING), S),
        ir.SetField("annotations", "odd~key/x", lit(2 * 2**30, ir.Type.BYTES), S),
    ]
    obj = _pod(annotations={"keep": "1"})
    d = run([rule("set", actions=sets)], workload(obj=obj, annotations={"keep": "1"}), mutate=True)
    assert [op["path"] for op in d.patch] == ["/metadata/annotations/acme.io~1vram-floor", "/metadata/annotations/odd~0key~1x"]
    patched = jsonpatch.apply_patch(obj, list(d.patch))
    assert patched["metadata"]["annotations"] == {"keep": "1", "acme.io/vram-floor": "20Gi", "odd~key/x": "2Gi"}


def test_set_of_a_missing_value_sets_nothing():
    w = workload(gpus=1000, obj=_pod(), namespace_labels={})
    d = run([LABEL_TEAM], w, mutate=True)
    assert d.allowed and d.patch == ()


def test_set_in_warn_mode_reports_instead_of_patching():
    w = workload(gpus=1000, obj=_pod(), namespace_labels={"team": "alpha"})
    d = run([LABEL_TEAM], w, mutate=True, mode_override="warn")
    assert d.patch == () and [r.code for r in d.reasons] == ["RuleWouldSet"]


def test_deny_overrides_across_blocks():
    # A warn-mode finding and an enforce-mode denial: the denial decides.
    blocks = dict(rules=[VRAM, SLEEPING], quotas=[quota("q", selector=ns_is("team-a"), gpus=100_000)])
    engine = Engine(policy(**blocks))
    w = workload(gpus=1000, labels={"app.kubernetes.io/component": "inference", "agents.acme.io/state": "sleeping"})
    d = engine.evaluate(engine.enrich(w), ClusterSnapshot(), 0.0)
    assert not d.allowed and len(d.warnings) == 1 and [r.code for r in d.denials] == ["RuleDenied"]
    assert set(d.blocks) == {"quota q", "rule inference-declares-vram", "rule sleeping-agents-hold-no-gpus"}


def test_evaluation_order_within_a_kind_and_namespace_indexing():
    # Within one kind, blocks naming no single namespace run first, then the namespace's own.
    keyed = rule("only-team-a", selector=ns_is("team-a"), actions=[ir.Deny(tpl("a"), S)])
    other = rule("only-team-b", selector=ns_is("team-b"), actions=[ir.Deny(tpl("b"), S)])
    shared = rule("everyone", selector=gpus_gt(0), actions=[ir.Deny(tpl("c"), S)])
    q = quota("q", selector=ns_is("team-a"), gpus=0)
    engine = Engine(policy(rules=[keyed, other, shared], quotas=[q]))
    d = engine.evaluate(engine.enrich(workload(gpus=1000)), ClusterSnapshot(), 0.0)
    assert [r.block for r in d.reasons] == ["quota q", "rule everyone", "rule only-team-a"]
    d = engine.evaluate(engine.enrich(workload(gpus=1000, namespace="team-c")), ClusterSnapshot(), 0.0)
    assert [r.block for r in d.reasons] == ["rule everyone"]


@pytest.mark.parametrize("labels, want_codes", [({"team": "alpha"}, []), ({"team": "beta"}, ["RuleWouldSet"]), ({}, ["RuleWouldSet"])])
def test_warn_set_reports_only_a_change(labels, want_codes):
    set_team = rule("set", actions=[ir.SetField("labels", "team", lit("alpha", ir.Type.STRING), S)])
    w = workload(gpus=1000, obj=_pod(labels=labels), labels=labels)
    d = run([set_team], w, mutate=True, mode_override="warn")
    assert d.patch == () and [r.code for r in d.reasons] == want_codes
