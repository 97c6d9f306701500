"""Agents `allow` resources: a name no admission request carries is an error with the closest name; custom resources are named with their group."""

import pytest

import lang
from policy.admission import wrap_manifest
from policy.cluster.snapshot import ClusterSnapshot
from policy.engine import Engine

AGENT = "system:serviceaccount:sandbox:bot"


def block(resources: str) -> str:
    return f'agents a {{\n  identity user == "{AGENT}"\n  allow create, update, connect {resources}\n}}\n'


def diagnostics(resources: str):
    _, diags = lang.compile_policies([("t.policy", block(resources))])
    return [(d.code, d.message, d.help) for d in diags if d.severity == "error"]


@pytest.mark.parametrize("resources,code,hint", [
    ("jbos", "E0109", "did you mean `jobs`?"),
    ("pod", "E0109", "did you mean `pods`?"),
    ("Pods", "E0109", "did you mean `pods`?"),
    ("pods/exce", "E0115", "did you mean `pods/exec`?"),
    ("pods/staus", "E0115", "did you mean `pods/status`?"),
    ("pods/log", "E0115", "GET"),
    ("deployments/scael", "E0115", "did you mean `deployments/scale`?"),
    ("jbos.batch", "E0109", "did you mean `jobs.batch`?"),
    ("jobs.apps", "E0109", "a custom resource is named with its API group"),
    ("widgets.example.com/exec", "E0115", "its subresources: scale, status"),
])  # fmt: skip
def test_a_resource_no_request_carries_is_an_error(resources, code, hint):
    (got,) = diagnostics(resources)
    assert got[0] == code and hint in got[2]


@pytest.mark.parametrize("resources,lowered", [
    ("pods, pods/exec, pods/eviction", {"pods", "pods/exec", "pods/eviction"}),
    ("jobs, cronjobs/status, deployments/scale", {"jobs", "cronjobs/status", "deployments/scale"}),
    ("jobsets, rayjobs, pytorchjobs, workspaces, podgroups, workloads", {"jobsets", "rayjobs", "pytorchjobs", "workspaces", "podgroups", "workloads"}),
    ("widgets.example.com, widgets.example.com/status", {"widgets", "widgets/status"}),
    ("model-servers.serving.example.com", {"model-servers"}),
    ("jobs.batch, jobs.batch/status", {"jobs", "jobs/status"}),
    ("*", {"*"}),
])  # fmt: skip
def test_known_and_qualified_resources_lower_to_what_requests_carry(resources, lowered):
    ps, diags = lang.compile_policies([("t.policy", block(resources))])
    assert [d for d in diags if d.severity == "error"] == []
    assert set(ps.agents[0].allows[0].resources) == lowered


def test_a_custom_resource_named_with_its_group_is_allowed_by_the_engine():
    ps, _ = lang.compile_policies([("t.policy", block("widgets.example.com"))])
    obj = {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w", "namespace": "sandbox"}}
    req = wrap_manifest(obj, user=AGENT, groups=[], operation="CREATE")["request"]
    req["resource"] = {"group": "example.com", "version": "v1", "resource": "widgets"}
    assert Engine(ps).decide(req, ClusterSnapshot(), 0.0).allowed
    req["resource"] = {"group": "example.com", "version": "v1", "resource": "gadgets"}
    assert not Engine(ps).decide(req, ClusterSnapshot(), 0.0).allowed


def test_a_qualified_resource_formats_as_written():
    src = block("widgets.example.com, jobs.batch/status")
    assert lang.format_source(src, "t.policy") == src


@pytest.mark.parametrize("allow,warned", [
    ("allow create pods/exec", ["`pods/exec` is only reached by CONNECT (kubectl exec): write `connect pods/exec`"]),
    ("allow update pods/portforward", ["`pods/portforward` is only reached by CONNECT (kubectl port-forward)"]),
    ("allow connect pods/status", ["`pods/status` is written to, never connected to"]),
    ("allow connect, create pods/exec, pods/eviction", []),  # each resource has a verb that reaches it
    ("allow any pods/exec", []),
])  # fmt: skip
def test_an_allow_whose_verbs_never_reach_a_subresource_is_a_warning(allow, warned):
    src = f'agents a {{\n  identity user == "{AGENT}"\n  {allow}\n}}\n'
    ps, diags = lang.compile_policies([("t.policy", src)])
    assert ps is not None  # a warning: the set still compiles
    got = [d.help for d in diags if d.code == "W0307"]
    assert len(got) == len(warned) and all(g.startswith(w) for g, w in zip(got, warned))
