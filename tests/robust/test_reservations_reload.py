"""Quota holds outlive a policy reload: any sequence of admit / observe / delete / advance / reload keeps
every quota's usage equal to a recomputation (live pods' charges plus the unexpired holds)."""

from __future__ import annotations

import os

from hypothesis import given, settings
from hypothesis import strategies as st

from policy.admission import wrap_manifest
from policy.cluster.snapshot import ClusterSnapshot
from policy.engine import Engine
from policy.blocks.quota import RESERVATION_TTL
from tests.policy.engine.engine_builders import ns_is, pod, policy, quota

EXAMPLES = int(os.environ.get("ALLOT_FUZZ_EXAMPLES", "120"))
G = 1000
NAMESPACES = ("team-a", "team-b")


def variant(which: int):
    """Two compiles of 'the same' quotas in different orders (so indexes differ), one with an extra quota."""
    a = quota("team-a", selector=ns_is("team-a"), gpus=10 * G)
    b = quota("team-b", selector=ns_is("team-b"), gpus=10 * G)
    return policy(quotas=[a, b]) if which == 0 else policy(quotas=[quota("other", selector=ns_is("x"), gpus=G), b, a])


def create(name: str, namespace: str, gpus: int) -> dict:
    return wrap_manifest(pod(name, namespace, gpus=gpus), user="alice", groups=[], operation="CREATE")["request"]


def live(name: str, namespace: str, gpus: int) -> dict:
    p = pod(name, namespace, gpus=gpus)
    p["spec"]["nodeName"] = "n1"
    p["status"] = {"phase": "Running"}
    return p


def usage_by_quota(engine: Engine, snap, now: float) -> dict[str, int]:
    ledger = engine.state_for(snap).quota
    ledger.expire(now)
    return {s.name: ledger.used[s.index] for s in ledger.specs}


def recomputed(snap, holds: dict, now: float) -> dict[str, int]:
    """Live pods' GPUs per namespace (= quota) plus the model's unexpired holds."""
    out = {ns: 0 for ns in NAMESPACES}
    for p in snap.pods():
        if ClusterSnapshot.is_live(p):
            out[p["metadata"]["namespace"]] += int(p["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"]) * G
    for at, ns, gpus in holds.values():
        if at > now:
            out[ns] += gpus * G
    return out


names = st.sampled_from(["p1", "p2", "p3"])
ops = st.one_of(
    st.tuples(st.just("admit"), names, st.sampled_from(NAMESPACES), st.integers(1, 3)),
    st.tuples(st.just("observe"), names, st.sampled_from(NAMESPACES), st.integers(1, 3)),
    st.tuples(st.just("delete"), names, st.sampled_from(NAMESPACES)),
    st.tuples(st.just("advance"), st.sampled_from([1.0, RESERVATION_TTL / 2, RESERVATION_TTL])),
    st.tuples(st.just("reload"), st.integers(0, 1)),
)


@settings(max_examples=EXAMPLES, deadline=None)
@given(st.lists(ops, max_size=14))
def test_usage_equals_a_recomputation_across_reloads(steps):
    snap, now = ClusterSnapshot(), 1000.0
    engine = Engine(variant(0))
    engine.warm(snap)
    holds: dict[str, tuple[float, str, int]] = {}  # the model: key -> (expires_at, namespace, gpus)
    for step in steps:
        if step[0] == "admit":
            _, name, ns, gpus = step
            key = f"{ns}/{name}"
            seen = snap.pod(ns, name)
            if engine.decide(create(name, ns, gpus), snap, now).allowed and not (seen and ClusterSnapshot.is_live(seen)):
                holds[key] = (now + RESERVATION_TTL, ns, gpus)
        elif step[0] == "observe":
            _, name, ns, gpus = step
            snap.apply("ADDED", live(name, ns, gpus))
            holds.pop(f"{ns}/{name}", None)
        elif step[0] == "delete":
            snap.apply("DELETED", live(step[1], step[2], 1))
        elif step[0] == "advance":
            now += step[1]
        else:
            engine = Engine(variant(step[1]))  # the old one may linger until the cyclic GC: its mirror is harmless
            engine.warm(snap)
        holds = {k: v for k, v in holds.items() if v[0] > now}
        got = usage_by_quota(engine, snap, now)
        assert {ns: got[ns] for ns in NAMESPACES} == recomputed(snap, holds, now), step


def test_a_reloaded_engine_denies_what_only_the_held_charge_explains():
    snap = ClusterSnapshot()
    first = Engine(variant(0))
    assert first.decide(create("big", "team-a", 8), snap, 0.0).allowed
    reloaded = Engine(variant(1))
    reloaded.warm(snap)
    assert not reloaded.decide(create("more", "team-a", 3), snap, 1.0).allowed  # 8 held + 3 > 10
    assert reloaded.decide(create("more", "team-a", 3), snap, 1.0 + RESERVATION_TTL).allowed  # the hold expired
    assert list(snap.reservations.holds) == ["team-a/more"]


def test_seeing_the_pod_releases_the_hold_for_every_engine():
    snap = ClusterSnapshot()
    old, new = Engine(variant(0)), Engine(variant(1))
    new.warm(snap)
    assert old.decide(create("big", "team-a", 8), snap, 0.0).allowed
    assert usage_by_quota(new, snap, 0.0)["team-a"] == 8 * G
    snap.apply("ADDED", live("big", "team-a", 8))
    assert snap.reservations.holds == {}
    assert usage_by_quota(old, snap, 0.0)["team-a"] == usage_by_quota(new, snap, 0.0)["team-a"] == 8 * G
