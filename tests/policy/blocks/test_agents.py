"""Agents: default deny for every operation (incl. CONNECT) by an agent identity or of an agent-labelled workload."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from tests.policy.engine.engine_builders import agents, allow, cmp, deny, field as fld, lit, ns_is, pod, policy, tpl

from lang import ir
from lang.span import Span
from policy.admission import wrap_manifest
from policy.cluster.snapshot import ClusterSnapshot
from policy.engine import Engine

S = Span("t.policy", 1, 1, 1, 2)
IDENTITY = ir.Or(
    (
        ir.Matches(fld("user"), "system:serviceaccount:agents-*:*", S),
        ir.Contains(lit("acme:agents", ir.Type.STRING), fld("groups"), S),
    ),
    S,
)
SMALL = cmp("<=", fld("gpus"), lit(250, ir.Type.GPU))
BLOCK = agents(
    identity=IDENTITY,
    allows=[
        allow({"CREATE"}, {"pods"}, ir.And((ns_is("agents-sandbox"), SMALL), S)),
        allow({"DELETE"}, {"pods"}, ns_is("agents-sandbox")),
    ],
    denies=[deny(ir.Or((fld("privileged"), fld("host_path")), S), tpl("agents may not escalate"))],
)
AGENT = "system:serviceaccount:agents-42:runner"


@dataclass
class Case:
    name: str
    user: str
    op: str
    ns: str = "agents-sandbox"
    groups: list = field(default_factory=list)
    gpus: int | None = None
    labels: dict | None = None
    privileged: bool = False
    want_code: str | None = None


CASES = [
    Case("agent create in sandbox allowed", AGENT, "CREATE"),
    Case("agent create elsewhere denied by default", AGENT, "CREATE", ns="team-a", want_code="AgentNotAllowed"),
    Case("agent by group", "bob", "CREATE", ns="team-a", groups=["acme:agents"], want_code="AgentNotAllowed"),
    Case("agent update denied (no allow)", AGENT, "UPDATE", want_code="AgentNotAllowed"),
    Case("agent delete in sandbox allowed", AGENT, "DELETE"),
    Case("agent exec (CONNECT) denied", AGENT, "CONNECT", want_code="AgentNotAllowed"),
    Case("agent with a whole GPU denied", AGENT, "CREATE", gpus=1, want_code="AgentNotAllowed"),
    Case("deny beats allow: privileged", AGENT, "CREATE", privileged=True, want_code="AgentDenied"),
    Case("human create is not governed", "alice", "CREATE", ns="team-a"),
    Case("human exec is not governed", "alice", "CONNECT"),
    Case("agent-labelled workload by a human: governed", "alice", "CREATE", ns="team-a", labels={"agents.acme.io/state": "running"}, want_code="AgentNotAllowed"),
    Case("allot.dev/agent label", "alice", "CREATE", ns="team-a", labels={"allot.dev/agent": "true"}, want_code="AgentNotAllowed"),
    Case("label-marked pod allowed in sandbox", "alice", "CREATE", labels={"agents.acme.io/state": "sleeping"}),
    Case("label-marked pod deleted by GC: not governed", "system:serviceaccount:kube-system:generic-garbage-collector", "DELETE", ns="team-a", labels={"allot.dev/agent": "true"}),
]


def _pod(case: Case) -> dict:
    p = pod("a", case.ns, gpus=case.gpus, labels=case.labels)
    if case.privileged:
        p["spec"]["containers"][0]["securityContext"] = {"privileged": True}
    return p


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_agents(case: Case):
    obj = _pod(case)
    snap = ClusterSnapshot.from_objects([obj]) if case.op == "CONNECT" else ClusterSnapshot()
    req = wrap_manifest(obj, user=case.user, groups=case.groups, operation=case.op)["request"]
    d = Engine(policy(agents=[BLOCK])).decide(req, snap, 0.0)
    assert [r.code for r in d.denials] == ([case.want_code] if case.want_code else [])
    governed = case.want_code is not None or case.user == AGENT or bool(case.labels and case.op == "CREATE")
    assert ("agents agents" in d.blocks) is governed


def test_connect_denial_names_the_subresource():
    obj = pod("a", "agents-sandbox")
    req = wrap_manifest(obj, user=AGENT, groups=[], operation="CONNECT")["request"]
    (r,) = Engine(policy(agents=[BLOCK])).decide(req, ClusterSnapshot.from_objects([obj]), 0.0).denials
    assert "CONNECT pods/exec" in r.message and r.data["resource"] == "pods/exec"


def test_allow_connect_when_listed():
    block = agents(identity=IDENTITY, allows=[allow({"CONNECT"}, {"pods/exec"})])
    obj = pod("a", "agents-sandbox")
    req = wrap_manifest(obj, user=AGENT, groups=[], operation="CONNECT")["request"]
    assert Engine(policy(agents=[block])).decide(req, ClusterSnapshot.from_objects([obj]), 0.0).allowed


def test_agent_field_is_filled():
    engine = Engine(policy(agents=[BLOCK]))
    req = wrap_manifest(pod("a", "x"), user=AGENT, groups=[], operation="CREATE")["request"]
    from policy.subject.normalize import normalize

    assert engine.enrich(normalize(req, ClusterSnapshot())).agent is True
    req = wrap_manifest(pod("a", "x"), user="alice", groups=[], operation="CREATE")["request"]
    assert engine.enrich(normalize(req, ClusterSnapshot())).agent is False


@pytest.mark.parametrize("user_info", [None, {}, {"username": None, "groups": []}, {"username": "", "groups": ["acme:agents"]}],
                         ids=["userInfo omitted", "userInfo empty", "username null", "username empty"])
@pytest.mark.parametrize("op", ["CONNECT", "CREATE", "DELETE"])
def test_a_requester_without_a_username_is_not_an_ordinary_user(user_info, op):
    obj = pod("a", "agents-sandbox")
    req = wrap_manifest(obj, user="x", groups=[], operation=op)["request"]
    if user_info is None:
        del req["userInfo"]
    else:
        req["userInfo"] = user_info
    d = Engine(policy(agents=[BLOCK])).decide(req, ClusterSnapshot.from_objects([obj]), 0.0)
    assert not d.allowed and [r.code for r in d.denials] == ["UnknownIdentity"]
    assert "without a username" in d.denials[0].message and "agents agents" in d.blocks


def test_without_agents_blocks_a_missing_username_is_not_judged_by_identity():
    req = wrap_manifest(pod("a", "team-a"), user="x", groups=[], operation="CREATE")["request"]
    del req["userInfo"]
    assert Engine(policy()).decide(req, ClusterSnapshot(), 0.0).allowed
