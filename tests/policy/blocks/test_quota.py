"""Quota semantics: nominal, cohort borrowing with borrowingLimit / lendingLimit, exact boundaries, the ledger."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from tests.policy.engine.engine_builders import ns_is, pod, policy, quota

from policy.admission import wrap_manifest
from policy.cluster.snapshot import ClusterSnapshot
from policy.engine import Engine
from policy.blocks.quota import RESERVATION_TTL

G = 1000  # milli-GPU per GPU

# team-a and team-b as in the contract; team-c may never borrow; solo has no cohort.
QUOTAS = [
    quota("team-a", selector=ns_is("team-a"), cohort="research", gpus=32 * G, borrow=8 * G),
    quota("team-b", selector=ns_is("team-b"), cohort="research", gpus=16 * G, lend=8 * G),
    quota("team-c", selector=ns_is("team-c"), cohort="research", gpus=8 * G, borrow=0),
    quota("solo", selector=ns_is("solo"), gpus=4 * G),
]


def running(name: str, namespace: str, gpus: int, phase: str = "Running") -> dict:
    """A live pod bound to a node holding `gpus` whole GPUs."""
    p = pod(name, namespace, gpus=gpus)
    p["spec"]["nodeName"] = "node-1"
    p["status"] = {"phase": phase}
    return p


def cluster(**used: int) -> ClusterSnapshot:
    """A snapshot whose live pods use `used[namespace]` GPUs per namespace (one pod each)."""
    return ClusterSnapshot.from_objects([running(f"u-{ns}", ns.replace("_", "-"), n) for ns, n in used.items() if n])


def create(namespace: str, gpus: int, name: str = "new", dry_run: bool = False) -> dict:
    """The AdmissionReview request of a pod CREATE."""
    req = wrap_manifest(pod(name, namespace, gpus=gpus), user="alice", groups=[], operation="CREATE")["request"]
    req["dryRun"] = dry_run
    return req


@dataclass
class Case:
    name: str
    used: dict
    ns: str
    gpus: int
    want_allowed: bool
    want_borrowable: int | None = None  # in whole GPUs, checked on denials


CASES = [
    Case("fits exactly at nominal", {"team_a": 28}, "team-a", 4, True),
    Case("one over nominal borrows idle lent quota", {"team_a": 28}, "team-a", 5, True),
    Case("borrows exactly up to borrow limit", {"team_a": 32}, "team-a", 8, True),
    Case("one over the borrow limit", {"team_a": 32}, "team-a", 9, False, 8),
    Case("lend caps what team-b's idle quota gives", {"team_a": 32, "team_b": 10, "team_c": 8}, "team-a", 6, True),
    Case("lend cap boundary + 1", {"team_a": 32, "team_b": 10, "team_c": 8}, "team-a", 7, False, 6),
    Case("team-c idle adds to the pool", {"team_a": 32, "team_b": 16}, "team-a", 8, True),
    Case("nothing idle: borrowable 0", {"team_a": 32, "team_b": 16, "team_c": 8}, "team-a", 1, False, 0),
    Case("unset borrow = any idle quota", {"team_a": 20, "team_b": 16, "team_c": 8}, "team-b", 12, True),
    Case("unset borrow boundary + 1", {"team_a": 20, "team_b": 16, "team_c": 8}, "team-b", 13, False, 12),
    Case("borrow 0 forbids borrowing", {"team_c": 8}, "team-c", 1, False, 0),
    # team-a already borrows 1 of team-c's 4 idle GPUs: 3 are left for team-b.
    Case("others' borrowing shrinks the pool", {"team_a": 33, "team_b": 16, "team_c": 4}, "team-b", 3, True),
    Case("others' borrowing boundary + 1", {"team_a": 33, "team_b": 16, "team_c": 4}, "team-b", 4, False, 3),
    Case("others' borrowing exceeds idle: pool 0", {"team_a": 36, "team_b": 16, "team_c": 6}, "team-b", 1, False, 0),
    Case("no cohort: nominal only", {"solo": 3}, "solo", 1, True),
    Case("no cohort: over", {"solo": 3}, "solo", 2, False, 0),
    Case("unmatched namespace is not charged", {"team_a": 40}, "elsewhere", 100, True),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_quota_fit_arithmetic(case: Case):
    engine = Engine(policy(quotas=QUOTAS))
    d = engine.decide(create(case.ns, case.gpus), cluster(**case.used), 0.0, reserve=False)
    assert d.allowed is case.want_allowed, d.reasons
    if not case.want_allowed:
        (r,) = d.denials
        assert r.code == "QuotaExceeded"
        assert r.data["borrowable"] == case.want_borrowable * G
        assert r.data["requested"] == case.gpus * G


def test_denial_message_carries_the_arithmetic():
    engine = Engine(policy(quotas=QUOTAS))
    d = engine.decide(create("team-a", 9), cluster(team_a=32), 0.0)
    (r,) = d.denials
    assert r.message == "team-a: 32 in use + 9 requested > 32 nominal + 8 borrowable"
    assert r.block == "quota team-a" and r.location == "t.policy:1:1"
    assert dict(r.data) == {"used": 32000, "requested": 9000, "nominal": 32000, "borrowable": 8000}


def test_fractional_amounts_are_exact():
    # Four 0.25 shares count as one GPU: 3.75 used + 0.25 fits 4, + 0.5 does not.
    engine = Engine(policy(quotas=[quota("solo", selector=ns_is("solo"), gpus=4 * G)]))
    w_small = engine.enrich(_shared_workload(250))
    w_big = engine.enrich(_shared_workload(500))
    snap = ClusterSnapshot()
    ledger = engine.state_for(snap).quota
    ledger.used[0] = 3750
    assert engine.evaluate(w_small, snap, 0.0, reserve=False).allowed
    assert not engine.evaluate(w_big, snap, 0.0, reserve=False).allowed


def _shared_workload(milli: int):
    from tests.policy.engine.engine_builders import workload

    return workload(namespace="solo", gpus=milli, fraction=milli)


PER_MODEL = [
    quota("team-a", selector=ns_is("team-a"), gpus=32 * G, per_model=[("h100", 16 * G)], gpu_memory=2 * 2**40),
]


def _h100_pod(name: str, namespace: str, gpus: int, live: bool) -> dict:
    p = running(name, namespace, gpus) if live else pod(name, namespace, gpus=gpus)
    p["spec"]["nodeSelector"] = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    return p


@pytest.mark.parametrize(
    "used, want, want_allowed, want_code",
    [
        (12, 4, True, None),
        (12, 5, False, "QuotaModelExceeded"),
        (0, 16, True, None),
    ],
)
def test_per_model_quota(used, want, want_allowed, want_code):
    engine = Engine(policy(quotas=PER_MODEL))
    snap = ClusterSnapshot.from_objects([_h100_pod("u", "team-a", used, live=True)] if used else [])
    req = wrap_manifest(_h100_pod("new", "team-a", want, live=False), user="u", groups=[], operation="CREATE")["request"]
    d = engine.decide(req, snap, 0.0, reserve=False)
    assert d.allowed is want_allowed
    assert [r.code for r in d.denials] == ([want_code] if want_code else [])


def test_gpu_memory_quota_charges_model_memory_times_gpus():
    # h100 = 80Gi per device; 2Ti = 25.6 devices: 24 used + 2 more = 26 x 80Gi = 2080Gi > 2048Gi.
    engine = Engine(policy(quotas=[quota("m", selector=ns_is("team-a"), gpu_memory=2 * 2**40)]))
    snap = ClusterSnapshot.from_objects([_h100_pod("u", "team-a", 24, live=True)])
    ok = wrap_manifest(_h100_pod("n1", "team-a", 1, live=False), user="u", groups=[], operation="CREATE")["request"]
    over = wrap_manifest(_h100_pod("n2", "team-a", 2, live=False), user="u", groups=[], operation="CREATE")["request"]
    assert engine.decide(ok, snap, 0.0, reserve=False).allowed
    d = engine.decide(over, snap, 0.0, reserve=False)
    assert [r.code for r in d.denials] == ["QuotaMemoryExceeded"]
    assert d.denials[0].message == "m: 1920Gi GPU memory in use + 160Gi requested > 2Ti nominal"


def test_ledger_follows_snapshot_events():
    engine = Engine(policy(quotas=QUOTAS))
    snap = cluster(team_a=10)
    ledger = engine.state_for(snap).quota
    assert ledger.used[0] == 10 * G
    snap.apply("ADDED", running("p2", "team-a", 4))
    assert ledger.used[0] == 14 * G
    snap.apply("MODIFIED", running("p2", "team-a", 4, phase="Succeeded"))  # finished pods hold nothing
    assert ledger.used[0] == 10 * G
    snap.apply("DELETED", running("u-team_a", "team-a", 10))
    assert ledger.used[0] == 0


def test_reservation_holds_until_seen_or_expired():
    engine = Engine(policy(quotas=QUOTAS))
    snap = cluster(solo=2)
    first = engine.decide(create("solo", 2, name="r1"), snap, 100.0)
    assert first.allowed
    second = engine.decide(create("solo", 1, name="r2"), snap, 101.0)
    assert not second.allowed, "the first admission's charge must be held"
    # The pod shows up: its live charge replaces the reservation (usage stays 4, not 6).
    snap.apply("ADDED", running("r1", "solo", 2))
    assert engine.state_for(snap).quota.used[3] == 4 * G
    snap.apply("DELETED", running("r1", "solo", 2))
    assert engine.decide(create("solo", 2, name="r3"), snap, 102.0).allowed
    # r3 never shows up: after the TTL its hold expires.
    assert not engine.decide(create("solo", 1, name="r4"), snap, 103.0, reserve=False).allowed
    assert engine.decide(create("solo", 1, name="r5"), snap, 102.0 + RESERVATION_TTL, reserve=False).allowed


@pytest.mark.parametrize("dry_run, mutate", [(True, False), (False, True)])
def test_dry_run_and_mutating_side_never_reserve(dry_run, mutate):
    engine = Engine(policy(quotas=QUOTAS))
    snap = cluster(solo=2)
    assert engine.decide(create("solo", 2, dry_run=dry_run), snap, 0.0, mutate=mutate).allowed
    assert engine.state_for(snap).quota.used[3] == 2 * G


def test_update_and_delete_are_not_charged():
    engine = Engine(policy(quotas=QUOTAS))
    obj = pod("x", "solo", gpus=50)
    for op in ("UPDATE", "DELETE"):
        req = wrap_manifest(obj, user="u", groups=[], operation=op)["request"]
        assert engine.decide(req, ClusterSnapshot(), 0.0).allowed


def test_a_dropped_engine_stops_following_the_snapshot():
    import gc
    import weakref

    snap = cluster(team_a=1)
    engine = Engine(policy(quotas=QUOTAS))
    ledger = weakref.ref(engine.state_for(snap).quota)
    del engine
    gc.collect()
    assert ledger() is None, "a reloaded-away engine must not be kept alive by its subscription"
    snap.apply("ADDED", running("later", "team-a", 1))  # the quiet forwarder does not fail
