"""`quota.covered`: the idiom "deny GPUs that no quota covers", checked at check time and decided by the engine."""

import pytest

import lang
from policy.admission import wrap_manifest
from policy.cluster.snapshot import ClusterSnapshot
from policy.engine import Engine

QUOTAS = 'quota research {\n  for namespace == "research"\n  gpus 16\n}\n\nquota teams {\n  for namespace matches "team-*"\n  gpus 8\n}\n'
RULE = '\nrule gpus-need-a-quota {\n  when gpus > 0 and not quota.covered\n  deny "{namespace}: no quota covers GPUs here"\n}\n'


def diagnostics(src: str):
    _, diags = lang.compile_policies([("t.policy", src)])
    return [(d.code, d.span.line) for d in diags]


def test_the_idiom_checks_and_formats_as_written():
    assert diagnostics(QUOTAS + RULE) == []
    assert lang.format_source(QUOTAS + RULE, "t.policy") == QUOTAS + RULE


@pytest.mark.parametrize("src,want", [
    (RULE, [("W0306", 3)]),  # no quota: always false, so every GPU pod is denied
    ("quota all {\n  gpus 8\n}\n" + RULE, [("W0306", 6)]),  # a quota without `for` covers everything
    ('quota q {\n  for not quota.covered\n  gpus 8\n}\n', [("E0114", 2)]),  # circular
    ('rule r {\n  when quota.covered == 1\n  deny "x"\n}\n' + QUOTAS, [("E0201", 2)]),  # a boolean
    ('rule r {\n  when not has(quota.covered)\n  deny "x"\n}\n' + QUOTAS, [("E0301", 2)]),  # never absent
])  # fmt: skip
def test_check_time_validation(src, want):
    assert diagnostics(src) == want


def pod(namespace: str, gpus: str | None) -> dict:
    res = {"resources": {"limits": {"nvidia.com/gpu": gpus}}} if gpus else {}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": namespace}, "spec": {"containers": [{"name": "c", "image": "x", **res}]}}


@pytest.mark.parametrize("namespace,gpus,denied", [
    ("reserch", "8", True),   # the typo: no quota matches, so no GPUs
    ("research", "8", False),
    ("team-a", "4", False),
    ("reserch", None, False),  # no GPUs asked: nothing to cover
])  # fmt: skip
def test_the_engine_denies_gpus_no_quota_covers(namespace, gpus, denied):
    ps, _ = lang.compile_policies([("t.policy", QUOTAS + RULE)])
    req = wrap_manifest(pod(namespace, gpus), user="u", groups=[], operation="CREATE")["request"]
    d = Engine(ps).decide(req, ClusterSnapshot(), 0.0)
    assert [(r.code, r.block) for r in d.denials] == ([("RuleDenied", "rule gpus-need-a-quota")] if denied else [])
    if denied:
        assert d.denials[0].message == f"gpus-need-a-quota: {namespace}: no quota covers GPUs here"


def test_the_field_is_left_alone_by_sets_that_do_not_read_it():
    ps, _ = lang.compile_policies([("t.policy", QUOTAS)])
    from policy.subject.normalize import normalize

    req = wrap_manifest(pod("research", "8"), user="u", groups=[], operation="CREATE")["request"]
    assert Engine(ps).enrich(normalize(req, ClusterSnapshot())).quota_covered is False  # not computed: no cost
