"""Pure lint helpers: field paths from problem messages, the reason table, cluster-dependent codes, governed kinds."""

from __future__ import annotations

import pytest
from tests.webhook.lint.lint_builders import POLICY

import lang
from policy.lint.fields import needs_cluster, parse_dotted, problem_path
from policy.lint.patches import Authors
from policy.lint.scope import governed


@pytest.mark.parametrize("text, want", [
    ("spec.containers[0].resources.limits[nvidia.com/gpu]", ("spec", "containers", "0", "resources", "limits", "nvidia.com/gpu")),
    ("metadata.annotations[kueue.x-k8s.io/total]", ("metadata", "annotations", "kueue.x-k8s.io/total")),
    ("spec", ("spec",)),
    ("", None),
    (".spec", None),
    ("spec[0", None),
])
def test_parse_dotted(text, want):
    assert parse_dotted(text) == want


@pytest.mark.parametrize("message, want", [
    ("spec.priority: 'x' is not an integer", ("spec", "priority")),
    ("pod set w (spec.replicatedJobs[0].template.spec.template.spec): spec.containers[0].resources.limits[nvidia.com/gpu]: '2x' is not a quantity",
     ("spec", "replicatedJobs", "0", "template", "spec", "template", "spec", "containers", "0", "resources", "limits", "nvidia.com/gpu")),
    ("pod names PodGroup a/b, which is not in the cluster state", None),
    ("request.object is missing: a CREATE must carry the object", None),
])
def test_problem_path(message, want):
    assert problem_path(message) == want


@pytest.mark.parametrize("code, data, want", [
    ("QuotaExceeded", {"used": 0}, False),  # over with nothing running: true on any cluster
    ("QuotaExceeded", {"used": 4000}, True),
    ("QuotaMemoryExceeded", {"used": 0}, False),
    ("GangUnplaceable", {}, True),
    ("FractionSharersExceeded", {}, True),
    ("RuleDenied", {}, False),
    ("MalformedQuantity", {}, False),
])
def test_needs_cluster(code, data, want):
    assert needs_cluster(code, data) is want


def _compiled(text):
    policy_set, diags = lang.compile_policies([("p.policy", text)])
    assert policy_set is not None, diags
    return policy_set


def test_governed_kinds_follow_the_webhook_configurations():
    g = governed(_compiled(POLICY))
    assert g.covers("apps/v1", "Deployment") and g.covers("batch/v1", "Job") and g.covers("jobset.x-k8s.io/v1alpha2", "JobSet")
    assert g.covers("v1", "Pod")
    assert not g.covers("v1", "ConfigMap") and not g.covers("v1", "Service")
    assert g.agents_any is False
    assert governed(_compiled('agents a {\n  identity user matches "ci:*"\n  allow create pods\n}\n')).agents_any is True


def test_patch_authors():
    authors = Authors(_compiled(POLICY + 'rule owner {\n  for gpus > 0\n  set labels["owner"] = "x"\n}\n'))
    who, keys = authors.of({"op": "add", "path": "/metadata/labels", "value": {"owner": "x"}})
    assert who.block == "rule owner" and keys == ("metadata", "labels")
    who, _ = authors.of({"op": "add", "path": "/spec/template/spec/priorityClassName", "value": "batch"})
    assert who.block == "priority batch" and who.location.startswith("p.policy:6:")
    assert authors.of({"op": "add", "path": "/spec/affinity", "value": {}})[0] is None
