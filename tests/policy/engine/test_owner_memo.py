"""The memos on a member pod's hot path never go stale: the controller-reference memo (policy/subject/workloads.py)
and the plain-label-key memo (policy/blocks/agents.py) remember only what depends on their key alone, so a hold
added, released or re-admitted, a reload and a new snapshot all answer as without them.

Each table runs its steps in order on one memo (cleared first): a memo keyed on less than it should be, or one
that remembered a hold itself, fails a later step.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from policy.blocks import agents
from policy.cluster.snapshot import ClusterSnapshot
from policy.subject import workloads
from policy.subject.normalize import normalize
from policy.subject.workloads import owner_hold_in, owner_keys

from tests.policy.engine.test_hold_release import dep, engine, review
from tests.policy.engine.test_workloads_decide import member

DEP = "wl:serving/Deployment/rerank"


@pytest.fixture(autouse=True)
def fresh_memos(monkeypatch):
    monkeypatch.setattr(workloads, "_REF_KEYS", {})
    monkeypatch.setattr(agents, "_PLAIN_KEYS", set())


def other_dep(replicas):
    d = dep(replicas, uid="uid-other")
    d["metadata"]["name"] = "other"
    return d


def pod_in(ns, i=0, **kw):
    p = member(i, **kw)
    p["metadata"]["namespace"] = ns
    return p


# ---- through the engine: holds come and go, the same member pod is charged as they stand ---------------------

@dataclass
class Step:
    name: str
    do: tuple  # ("admit", object) | ("delete", object) | ("reload",) | ("snapshot",) | ("none",)
    want_owner: str | None  # owner_hold_in of member pod 0 after the step
    want_allowed: bool  # member pod 0 decided (not reserving) after the step


STEPS = [
    Step("no holds: no owner, the pod fits the quota alone", ("none",), None, True),
    Step("its Deployment admitted (the whole quota): the pod takes from that hold", ("admit", dep(4)), DEP, True),
    Step("the Deployment deleted: the hold is gone", ("delete", dep(4)), None, True),
    Step("another Deployment holds the whole quota: the pod has no owner and does not fit", ("admit", other_dep(4)), None, False),
    Step("a reloaded engine on the same snapshot sees the same holds", ("reload",), None, False),
    Step("the other released, its own admitted again (after the reload)", ("swap",), DEP, True),
    Step("a new snapshot holds nothing", ("snapshot",), None, True),
    Step("admitted again on the new snapshot", ("admit", dep(4)), DEP, True),
]


def test_a_member_pod_follows_its_holds_through_admit_release_reload_and_a_new_snapshot():
    e, snap = engine(), ClusterSnapshot.from_objects([])
    pod = review(member(0))
    for step in STEPS:
        op = step.do[0]
        if op == "admit":
            assert e.decide(review(step.do[1]), snap, 0.0).allowed, step.name
        elif op == "delete":
            assert e.decide(review(None, "DELETE", old=step.do[1]), snap, 0.0).allowed, step.name
        elif op == "reload":
            e = engine()
        elif op == "swap":
            assert e.decide(review(None, "DELETE", old=other_dep(4)), snap, 0.0).allowed, step.name
            assert e.decide(review(dep(4)), snap, 0.0).allowed, step.name
        elif op == "snapshot":
            snap = ClusterSnapshot.from_objects([])
        w = normalize(pod, snap)
        assert owner_hold_in(w, snap.reservations.holds) == step.want_owner, step.name
        assert e.decide(pod, snap, 0.0, reserve=False).allowed is step.want_allowed, step.name


# ---- the controller-reference memo: every input it depends on is in its key ----------------------------------

@dataclass
class LookupCase:
    name: str
    pod: dict
    holds: tuple  # hold keys present
    want_owner: str | None


LOOKUPS = [
    LookupCase("a Deployment's pod: its hold", member(0), (DEP,), DEP),
    LookupCase("the same ReplicaSet name, another hash label: no Deployment (the hash is in the key)",
               member(1, hash_="zzzzz", owner="rerank-7c9f8"), (DEP,), None),
    LookupCase("the same again: still its ReplicaSet's own hold only", member(2, hash_="zzzzz", owner="rerank-7c9f8"),
               (DEP, "wl:serving/ReplicaSet/rerank-7c9f8"), "wl:serving/ReplicaSet/rerank-7c9f8"),
    LookupCase("the same names in another namespace: that namespace's hold (the namespace is in the key)",
               pod_in("team-x"), (DEP, "wl:team-x/Deployment/rerank"), "wl:team-x/Deployment/rerank"),
    LookupCase("owned by a Deployment-named Job: the kind is in the key", member(3, owner_kind="Job", owner="rerank-7c9f8"),
               (DEP, "wl:serving/Job/rerank-7c9f8"), "wl:serving/Job/rerank-7c9f8"),
    LookupCase("the first pod again, its hold released", member(0), (), None),
    LookupCase("the first pod again, held again", member(0), (DEP,), DEP),
]


def test_the_reference_memo_keys_on_namespace_kind_name_and_hash():
    for case in LOOKUPS:
        w = normalize(review(case.pod), None)
        holds = {k: (0.0, ()) for k in case.holds}
        assert owner_hold_in(w, holds) == case.want_owner, case.name
        assert owner_hold_in(w, holds) == next((k for k in owner_keys(w) if k in holds), None), case.name
    assert len(workloads._REF_KEYS) == 4  # one entry per distinct (namespace, kind, name, hash)


def test_the_reference_memo_starts_over_past_its_cap(monkeypatch):
    monkeypatch.setattr(workloads, "REF_KEYS_CAP", 3)
    for i in range(10):
        name = f"d{i}"
        w = normalize(review(member(i, owner=f"{name}-7c9f8")), None)
        assert owner_hold_in(w, {f"wl:serving/Deployment/{name}": (0.0, ())}) == f"wl:serving/Deployment/{name}"
        assert len(workloads._REF_KEYS) <= 3
    w = normalize(review(member(0, owner="d0-7c9f8")), None)  # forgotten by now: computed again, the same
    assert owner_hold_in(w, {"wl:serving/Deployment/d0": (0.0, ())}) == "wl:serving/Deployment/d0"


def test_a_reference_of_a_non_string_name_is_looked_up_but_not_remembered():
    """1 == True as dict keys: a name that is not a string must not answer for another."""
    for name, want in ((1, "wl:serving/Job/1"), (True, "wl:serving/Job/True")):
        meta = {"name": "p", "namespace": "serving", "ownerReferences": [{"kind": "Job", "name": name, "controller": True}]}
        w = normalize(review({"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": {"containers": []}}), None)
        assert owner_hold_in(w, {"wl:serving/Job/1": (0.0, ()), "wl:serving/Job/True": (0.0, ())}) == want
    assert workloads._REF_KEYS == {}


# ---- the plain-label-key memo: a key's verdict depends on the key alone, AGENT_LABEL's on its value -------------

@dataclass
class AgentCase:
    name: str
    labels: dict
    want_agent: bool


AGENT_STEPS = [
    AgentCase("plain labels: not an agent (remembered)", {"app": "x", "team": "t"}, False),
    AgentCase("the same keys again: not an agent (from the memo)", {"app": "y", "team": "u"}, False),
    AgentCase("a remembered key beside an agents.* one: an agent", {"app": "x", "agents.acme.io/state": "idle"}, True),
    AgentCase("allot.dev/agent false: not an agent", {"app": "x", "allot.dev/agent": "false"}, False),
    AgentCase("allot.dev/agent true after it was false: an agent (its value is never remembered)", {"app": "x", "allot.dev/agent": "true"}, True),
    AgentCase("alone and true", {"allot.dev/agent": "true"}, True),
    AgentCase("agents. without a domain path is not a marker", {"agents.acme": "x"}, False),
    AgentCase("an agents.* key alone", {"agents.x-k8s.io/sandbox": "s1"}, True),
    AgentCase("a non-string key is no marker (and no crash)", {1: "x", "app": "x"}, False),
    AgentCase("no labels", {}, False),
]


def test_the_agent_label_memo_never_hides_a_marker():
    for case in AGENT_STEPS:
        assert agents.is_marked_agent(case.labels) is case.want_agent, case.name
        assert agents.AGENT_LABEL not in agents._PLAIN_KEYS, case.name
    assert {"app", "team", "agents.acme"} <= agents._PLAIN_KEYS


def test_the_agent_label_memo_starts_over_past_its_cap(monkeypatch):
    monkeypatch.setattr(agents, "PLAIN_KEYS_CAP", 4)
    for i in range(10):
        assert agents.is_marked_agent({f"k{i}": "v", f"j{i}": "v"}) is False
        assert len(agents._PLAIN_KEYS) <= 4
    assert agents.is_marked_agent({"k9": "v", "agents.acme.io/x": "v"}) is True
