"""Workload holds in the cluster ledger: two replicas over real HTTPS, one API double, the real `kubernetes` client.

An admitted Deployment holds its whole quota in the shard, so the other replica counts
it; a member pod answered by either replica takes its share from that shared entry in
the same compare-and-swap as its own hold; releases on one replica reach the other.
"""

from __future__ import annotations

import asyncio
import copy
import time
import uuid

import orjson

from tests.webhook.server.test_ledger import NS, SHARD, burst, on_two_replicas, policy_dir, pki, post, replica, until, until_ready  # noqa: F401
from tests.webhook.wh_harness import pod
from webhook.bench.apidouble import ApiDouble

KEY = "wl:team-a/Deployment/{}"


def deployment(name: str, replicas: int, uid: str | None = None) -> dict:
    """A Deployment in team-a of `replicas` one-GPU pods."""
    tpl = pod(name, gpus=1)
    labels = {"app": name}
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "namespace": "team-a", "uid": uid or str(uuid.uuid4())},
            "spec": {"replicas": replicas, "selector": {"matchLabels": labels},
                     "template": {"metadata": {"labels": labels}, "spec": tpl["spec"]}}}


def member(dep: str, i: int) -> dict:
    """Pod `i` of Deployment `dep` as its ReplicaSet makes it (owner reference, pod-template-hash)."""
    p = pod(f"{dep}-7c9f8-{i}", gpus=1, labels={"app": dep, "pod-template-hash": "7c9f8"})
    p["metadata"]["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": f"{dep}-7c9f8",
                                         "uid": "rs", "controller": True}]
    return p


def dep_review(operation: str, obj: dict | None = None, old: dict | None = None) -> dict:
    o = obj or old
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": str(uuid.uuid4()), "kind": {"group": "apps", "version": "v1", "kind": "Deployment"},
        "resource": {"group": "apps", "version": "v1", "resource": "deployments"},
        "name": o["metadata"]["name"], "namespace": "team-a", "operation": operation,
        "userInfo": {"username": "alice", "groups": ["system:authenticated"]},
        "object": obj, "oldObject": old, "dryRun": False,
        "options": {"apiVersion": "meta.k8s.io/v1", "kind": f"{operation.title()}Options"}}}


def pod_review(obj: dict) -> dict:
    from tests.webhook.wh_harness import review

    return review(obj)


def shard_entries(double: ApiDouble) -> dict:
    cm = next((o for o in double.items("configmaps", NS) if o["metadata"]["name"] == SHARD), None)
    return orjson.loads(cm["data"]["holds"]) if cm is not None else {}


def shard_gpus(double: ApiDouble) -> int:
    """Milli-GPU the shard holds in all, pods and workloads."""
    now = time.time()
    return sum(h[1] for e in shard_entries(double).values() if e[0] > now for h in e[1])


def held(state, key: str) -> int:
    h = state.snapshot.reservations.holds.get(key)
    return sum(x[1] for x in h[1]) if h else 0


def total(state) -> int:
    return state.snapshot.reservations.totals().get("quota team-a", (0,))[0]


async def allowed(session, url, body) -> bool:
    status, doc = await post(session, f"{url}/validate?timeout=10s", body)
    assert status == 200, doc
    return doc["response"]["allowed"]


def two_replicas(policy_dir, pki, scenario):
    on_two_replicas(lambda url: replica(policy_dir, url), pki, scenario)


def test_a_workload_held_on_one_replica_is_counted_by_the_other(pki, policy_dir):
    async def scenario(double, A, B):
        (a, ua, sa), (b, ub, sb) = A, B
        d1 = deployment("d1", 24)
        assert await allowed(sa, ua, dep_review("CREATE", d1))
        entry = shard_entries(double)[KEY.format("d1")]  # written before "allowed", with what a release needs
        assert sum(h[1] for h in entry[1]) == 24_000 and entry[4]["uid"] == d1["metadata"]["uid"]
        assert entry[4]["demand"] == [24_000, 0]
        await until("b counts d1's hold", lambda: held(b, KEY.format("d1")) == 24_000)
        assert not await allowed(sb, ub, dep_review("CREATE", deployment("d2", 16)))  # fits only without a's hold
        assert await allowed(sb, ub, dep_review("CREATE", deployment("d3", 8)))  # 24 + 8 = the quota
        assert not await allowed(sa, ua, pod_review(pod("extra", gpus=1)))
        await until("a counts d3's hold", lambda: held(a, KEY.format("d3")) == 8_000)
        assert not await allowed(sb, ub, pod_review(pod("extra2", gpus=1)))
        assert shard_gpus(double) == 32_000

    two_replicas(policy_dir, pki, scenario)


def test_member_pods_answered_by_either_replica_take_from_the_shared_hold(pki, policy_dir):
    async def scenario(double, A, B):
        (a, ua, sa), (b, ub, sb) = A, B
        assert await allowed(sa, ua, dep_review("CREATE", deployment("d1", 8)))
        await until("b counts d1's hold", lambda: held(b, KEY.format("d1")) == 8_000)

        async def one(i):
            s, u = ((sa, ua), (sb, ub))[i % 2]
            return await allowed(s, u, pod_review(member("d1", i)))

        assert all(await asyncio.gather(*(one(i) for i in range(8))))
        assert shard_gpus(double) == 8_000  # the workload's demand, moved to its pods: not charged twice
        entries = shard_entries(double)
        assert sum(h[1] for h in entries.get(KEY.format("d1"), [0, []])[1]) == 0
        assert sum(1 for k in entries if k.startswith("team-a/d1-")) == 8
        await until("both replicas count 8 GPUs", lambda: total(a) == 8_000 and total(b) == 8_000)
        rest = await burst((sa, sb), (ua, ub), [f"p{i}" for i in range(30)])
        assert sum(rest) == 24  # the rest of the quota, and no more
        assert shard_gpus(double) == 32_000

    two_replicas(policy_dir, pki, scenario)


def test_concurrent_takes_on_two_replicas_never_exceed_the_hold(pki, policy_dir):
    async def scenario(double, A, B):
        (a, ua, sa), (b, ub, sb) = A, B
        assert sum(await burst((sa, sb), (ua, ub), [f"f{i}" for i in range(26)])) == 26  # 26 of 32 in use
        assert await allowed(sa, ua, dep_review("CREATE", deployment("d1", 4)))  # 4 more held: 30
        await until("b counts d1's hold", lambda: held(b, KEY.format("d1")) == 4_000)

        async def one(i):
            s, u = ((sa, ua), (sb, ub))[i % 2]
            return await allowed(s, u, pod_review(member("d1", i)))

        results = await asyncio.gather(*(one(i) for i in range(10)))
        # 4 covered by the hold + the 2 GPUs left: a take counted twice would have admitted more
        assert sum(results) == 6, results
        assert shard_gpus(double) == 32_000
        entries = shard_entries(double)
        assert sum(h[1] for h in entries.get(KEY.format("d1"), [0, []])[1]) == 0
        await until("both replicas count the whole quota", lambda: total(a) == 32_000 and total(b) == 32_000)

    for _ in range(3):  # every run, not most runs
        two_replicas(policy_dir, pki, scenario)


def test_releases_on_one_replica_reach_the_other(pki, policy_dir):
    async def scenario(double, A, B):
        (a, ua, sa), (b, ub, sb) = A, B
        d1 = deployment("d1", 24)
        assert await allowed(sa, ua, dep_review("CREATE", d1))
        await until("b counts d1's hold", lambda: held(b, KEY.format("d1")) == 24_000)
        smaller = copy.deepcopy(d1)
        smaller["spec"]["replicas"] = 8
        assert await allowed(sa, ua, dep_review("UPDATE", smaller, d1))  # scale down: 16 released
        await until("b sees the scale down", lambda: held(b, KEY.format("d1")) == 8_000)
        assert shard_entries(double)[KEY.format("d1")][4]["demand"] == [8_000, 0]
        # the same scale decided again on b (the API server's re-invocation) releases nothing more
        assert await allowed(sb, ub, dep_review("UPDATE", smaller, d1))
        await asyncio.sleep(0.2)
        assert held(a, KEY.format("d1")) == 8_000 and held(b, KEY.format("d1")) == 8_000
        assert await allowed(sb, ub, dep_review("CREATE", deployment("d2", 24)))  # 8 + 24
        assert not await allowed(sa, ua, pod_review(pod("x", gpus=1)))
        assert await allowed(sb, ub, dep_review("DELETE", old=smaller))  # deleted on b
        await until("a sees the delete", lambda: held(a, KEY.format("d1")) == 0)
        assert KEY.format("d1") not in shard_entries(double)
        assert sum(await burst((sa, sb), (ua, ub), [f"p{i}" for i in range(12)])) == 8

    two_replicas(policy_dir, pki, scenario)


def test_a_workload_deleted_in_the_watch_is_pruned_from_the_shard(pki, policy_dir):
    async def scenario(double, A, B):
        (a, ua, sa), (b, ub, sb) = A, B
        d1 = deployment("d1", 24)
        assert await allowed(sa, ua, dep_review("CREATE", d1))
        await until("b counts d1's hold", lambda: held(b, KEY.format("d1")) == 24_000)
        for state in (a, b):  # each replica's cluster watch shows the Deployment, then its deletion
            state.snapshot.apply("ADDED", d1)
            state.snapshot.apply("DELETED", d1)
        assert held(a, KEY.format("d1")) == 0 and held(b, KEY.format("d1")) == 0
        await until("a prune drops d1 from the shard", lambda: KEY.format("d1") not in shard_entries(double), timeout=12)
        assert held(a, KEY.format("d1")) == 0 and held(b, KEY.format("d1")) == 0  # not brought back by the shard

    two_replicas(policy_dir, pki, scenario)


def test_a_scale_down_only_the_watch_saw_is_written_for_every_replica(pki, policy_dir):
    """The webhook never saw the scale down (it failed open, or was down): each replica's watch does, and the
    shard's entry shrinks once, so every replica, and any other writer, counts the smaller hold."""
    async def scenario(double, A, B):
        (a, ua, sa), (b, ub, sb) = A, B
        d1 = deployment("d1", 24)
        d1["metadata"]["generation"] = 1
        assert await allowed(sa, ua, dep_review("CREATE", d1))
        await until("b counts d1's hold", lambda: held(b, KEY.format("d1")) == 24_000)
        smaller = copy.deepcopy(d1)
        smaller["spec"]["replicas"], smaller["metadata"]["generation"] = 8, 2
        for state in (a, b):  # each replica's cluster watch shows the Deployment, then the scale down
            state.snapshot.apply("ADDED", d1)
            state.snapshot.apply("MODIFIED", smaller)
        await until("the shard's entry shrinks", lambda: sum(h[1] for h in shard_entries(double)[KEY.format("d1")][1]) == 8_000)
        entry = shard_entries(double)[KEY.format("d1")]
        assert entry[4]["demand"] == [8_000, 0]  # what the next scale is measured against, everywhere
        await asyncio.sleep(0.3)  # both replicas' shrinks landed: the second released nothing more
        assert sum(h[1] for h in shard_entries(double)[KEY.format("d1")][1]) == 8_000
        await until("both count the smaller hold", lambda: held(a, KEY.format("d1")) == held(b, KEY.format("d1")) == 8_000)
        assert await allowed(sb, ub, dep_review("CREATE", deployment("d2", 24)))  # 8 + 24: the quota, on the other replica

    two_replicas(policy_dir, pki, scenario)


def test_an_old_entry_without_workload_fields_still_parses():
    from webhook.ledger.cluster import _entries

    now = time.time() + 30
    text = orjson.dumps({"team-a/p": [now, [["quota team-a", 1000, 0, None, 1000]], "r", None],
                         "wl:team-a/Deployment/d": [now, [["quota team-a", 2000, 0, None, 2000]], "r", None,
                                                    {"uid": "u", "demand": [2000, 0], "seq": {"r": 3}}],
                         "wl:team-a/Deployment/bad": [now, [], "r", None, {"uid": 5}]}).decode()
    assert set(_entries(text)) == {"team-a/p", "wl:team-a/Deployment/d"}


def test_a_take_the_shard_no_longer_covers_is_refused_and_given_back(pki, policy_dir):
    from webhook.server import review as rv

    async def scenario(double, A, B):
        (a, ua, sa), (b, ub, sb) = A, B
        d1 = deployment("d1", 4)
        assert await allowed(sa, ua, dep_review("CREATE", d1))
        await until("b counts d1's hold", lambda: held(b, KEY.format("d1")) == 4_000)
        r = rv.decode(orjson.dumps(pod_review(member("d1", 0))), b)  # b decides a member pod: it takes 1 GPU here
        assert rv.decide(r, mutate=False, state=b, now=time.time()).allowed
        assert held(b, KEY.format("d1")) == 3_000 and any(getattr(t, "op", None) == "take" for t in r.taken)
        gone = copy.deepcopy(d1)
        gone["spec"]["replicas"] = 0
        assert await allowed(sa, ua, dep_review("UPDATE", gone, d1))  # a scales it to 0 meanwhile: the hold is empty
        await until("b sees the scale down", lambda: shard_entries(double)[KEY.format("d1")][1] == [] and
                    b.ledger.shards[SHARD].entries[KEY.format("d1")][1] == [])
        assert r.view >= b.ledger.shards[SHARD].read_at  # a release does not make the decision stale: the take is checked
        assert await b.ledger.commit(r.taken, 5.0, r.view) is False  # refused: the entry no longer covers it
        assert b.metrics.value("allot_ledger_writes_total", {"result": "refused"}) == 1
        b.ledger.undo(r.taken)
        assert held(b, KEY.format("d1")) == 0 and "team-a/d1-7c9f8-0" not in b.snapshot.reservations.holds
        assert "team-a/d1-7c9f8-0" not in shard_entries(double)
        assert await allowed(sb, ub, pod_review(member("d1", 0)))  # decided again: charged in full, and it fits
        assert shard_gpus(double) == 1_000

    two_replicas(policy_dir, pki, scenario)


def test_a_pod_decided_twice_takes_from_its_workload_once():
    from lang import compile_policies
    from policy.cluster.snapshot import ClusterSnapshot
    from policy.engine import Engine
    from tests.webhook.wh_harness import review

    ps, diags = compile_policies([("q.policy", 'quota team-a { for namespace == "team-a"  gpus 8 }\n')])
    assert not [d for d in diags if d.severity == "error"]
    engine, snap = Engine(ps), ClusterSnapshot.from_objects([])
    assert engine.decide(dep_review("CREATE", deployment("d1", 4))["request"], snap, 0.0).allowed
    for _ in range(3):  # the API server's retry, a re-invocation: the same pod key each time
        taken: list = []
        assert engine.decide(review(member("d1", 0))["request"], snap, 0.0, taken=taken).allowed
        assert [t.op for t in taken if hasattr(t, "op")][-1] == "take"
    assert held_in(snap, KEY.format("d1")) == 3_000
    assert snap.reservations.totals()["quota team-a"][0] == 4_000  # the workload's demand, not more, not less


def held_in(snap, key: str) -> int:
    h = snap.reservations.holds.get(key)
    return sum(x[1] for x in h[1]) if h else 0
