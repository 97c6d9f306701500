"""A rule that names a kind Allot does not read makes the webhook intercept that kind, so `deny what you cannot read` holds at admission."""

from __future__ import annotations

from lang import compile_policies
from policy.lint.scope import governed
from policy.manifests.configurations import validating_configuration

DENY_SPARK = 'rule deny-spark {\n  for kind == "SparkApplication"\n  when unread\n  deny "{kind} {name}: not readable"\n}\n'


def policy(text):
    ps, diags = compile_policies([("p.policy", text)])
    assert ps is not None and not [d for d in diags if d.severity == "error"], diags
    return ps


def hooks(ps):
    return {h["name"]: h for h in validating_configuration(ps)["webhooks"]}


def test_a_denying_rule_on_an_unread_kind_intercepts_its_resource_in_any_group():
    ps = policy(DENY_SPARK)
    named = hooks(ps)["named.validate.allot.io"]
    assert named["rules"] == [{"apiGroups": ["*"], "apiVersions": ["*"], "operations": ["CREATE", "UPDATE"],
                               "resources": ["sparkapplications"], "scope": "*"}]
    assert named["failurePolicy"] == "Fail"  # the rule enforces: a down webhook must not waive it
    assert governed(ps).covers("sparkoperator.k8s.io/v1beta2", "SparkApplication")


def test_no_entry_without_a_rule_naming_an_unread_kind():
    for text in ('rule deny-unread {\n  when unread\n  deny "no"\n}\n',  # no kind named: lint and eval only (docs/kinds.md)
                 'rule jobs {\n  for kind == "Job"\n  when total_gpus > 8\n  deny "too big"\n}\n',  # a kind Allot reads
                 'rule warn-spark {\n  for kind == "SparkApplication"\n  set labels["seen"] = "yes"\n}\n'):  # sets, denies nothing
        assert "named.validate.allot.io" not in hooks(policy(text)), text


def test_a_warn_mode_rule_fails_open():
    ps = policy(DENY_SPARK.replace("{\n", "{\n  mode warn\n", 1))
    assert hooks(ps)["named.validate.allot.io"]["failurePolicy"] == "Ignore"
