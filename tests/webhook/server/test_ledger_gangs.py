"""Gang holds in the cluster ledger: two replicas over real HTTPS, one API double, the real `kubernetes` client.

A gang's domain and held slots are written to the `allot-ledger-gangs` shard before
"allowed", so the other replica holds the same slots (a second gang cannot land in
them) and pins the gang's later members to the same domain.
"""

from __future__ import annotations

import asyncio
import base64
import time

import orjson
import pytest

from policy.cluster.snapshot import ClusterSnapshot
from tests.policy.blocks.gang.gangs_builders import CONTRACT_GANG, DECLS, bound, kueue_member, node, rack_of
from tests.webhook.server.test_ledger import NS, on_two_replicas, pki, post, until, until_ready  # noqa: F401 (pki: a fixture)
from tests.webhook.wh_harness import review, running
from webhook.bench.apidouble import ApiDouble, api_client
from webhook.server.decisionlog import DecisionLog
from webhook.ledger.cluster import ClusterLedger
from webhook.ledger.gangs import SHARD
from webhook.server.reload import PolicyReloader, PolicySource
from webhook.server.state import State, warm_engine

NAMESPACE = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "train"}}
_NO_SHARD = type("NoShard", (), {"entries": {}})  # a shard not read yet


@pytest.fixture(scope="module")
def policy_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("policy")
    (d / "decls.policy").write_text(DECLS)
    (d / "gang.policy").write_text(CONTRACT_GANG)
    return d


def replica(policy_dir, url: str, objects: list) -> State:
    """A server state as `allot serve --ledger` builds it, over a snapshot of `objects` and the double."""
    state = State(on_error="deny", log=DecisionLog(None))
    assert PolicyReloader(state, PolicySource(str(policy_dir))).load_now()
    state.swap_snapshot(ClusterSnapshot.from_objects([NAMESPACE, *objects]), source="file", synced=True)
    state.ledger = ClusterLedger(api_client(url), NS, state=state)
    warm_engine(state.engine, state.snapshot)
    return state


def gangs_in(double: ApiDouble) -> dict:
    cm = next((o for o in double.items("configmaps", NS) if o["metadata"]["name"] == SHARD), None)
    return orjson.loads(cm["data"]["holds"]) if cm is not None else {}


def planned(state, key: str):
    planner = state.engine.state_for(state.snapshot).planner()
    return planner.recall(key, time.time())


async def answer(session, url, obj, endpoint="validate") -> dict:
    status, doc = await post(session, f"{url}/{endpoint}?timeout=10s", review(obj))
    assert status == 200, doc
    return doc["response"]


def patched_rack(resp: dict):
    assert resp["allowed"], resp
    return rack_of(orjson.loads(base64.b64decode(resp["patch"])))


def two_replicas(policy_dir, pki, objects, scenario):
    on_two_replicas(lambda url: replica(policy_dir, url, objects), pki, scenario)


# Rack r1: two empty 8-GPU nodes. Rack r2: two nodes whose GPUs are all in use.
ONE_FREE_RACK = [node("n1", "r1"), node("n2", "r1"), node("n3", "r2"), node("n4", "r2"),
                 bound("busy3", "n3", 8), bound("busy4", "n4", 8)]


def test_two_gangs_for_the_one_free_rack_on_two_replicas_admit_exactly_one(pki, policy_dir):
    async def scenario(double, A, B):
        (a, ua, sa), (b, ub, sb) = A, B
        first, second = await asyncio.gather(answer(sa, ua, kueue_member("g-0", "g", 8, 2)),
                                             answer(sb, ub, kueue_member("o-0", "other", 8, 2)))
        assert [first["allowed"], second["allowed"]].count(True) == 1, (first, second)
        loser = second if first["allowed"] else first
        assert "room for 0 of 2 pods" in loser["status"]["message"]  # the winner's slots count on the loser's replica
        entries = gangs_in(double)
        assert len(entries) == 1  # the winner's gang, written before its "allowed"
        (key, entry), = entries.items()
        plan = entry[4]["gang"]
        assert plan["domain"] == "r1" and sorted(s[1] for s in plan["slots"]) == ["n1", "n2"]
        # both replicas now hold the winner's slots: a third gang is denied on either
        for s, u in ((sa, ua), (sb, ub)):
            assert not (await answer(s, u, kueue_member("t-0", "third", 8, 2)))["allowed"]

    for _ in range(3):  # every run, not most runs
        two_replicas(policy_dir, pki, ONE_FREE_RACK, scenario)


# Rack r1: 16 free GPUs (the best fit for a 2 x 8 gang); rack r2: 24.
TWO_FREE_RACKS = [node("n1", "r1"), node("n2", "r1"), node("n3", "r2"), node("n4", "r2"), node("n5", "r2")]


def test_a_gang_placed_on_one_replica_pins_its_members_on_the_other_and_keeps_other_gangs_out(pki, policy_dir):
    async def scenario(double, A, B):
        (a, ua, sa), (b, ub, sb) = A, B
        assert patched_rack(await answer(sa, ua, kueue_member("g-0", "g", 8, 2), "mutate")) == ["r1"]
        assert "gang:train/g" in gangs_in(double)  # written before the pinned answer left
        await until("b to hold a's gang", lambda: planned(b, "train/g") is not None)  # b's watch brings a's gang into b's planner
        held = b.engine.state_for(b.snapshot).planner().index.reservations.get("train/g")
        assert held is not None and sorted(n for n, _ in held.slots.values()) == ["n1", "n2"]  # the same slots
        # another gang asked on b does not land in the slots a holds ...
        assert patched_rack(await answer(sb, ub, kueue_member("o-0", "other", 8, 2), "mutate")) == ["r2"]
        # ... and a later member of a's gang, answered by b, goes where its gang went
        assert patched_rack(await answer(sb, ub, kueue_member("g-1", "g", 8, 2), "mutate")) == ["r1"]
        assert (await answer(sb, ub, kueue_member("g-1", "g", 8, 2)))["allowed"]  # validated on b too
        await until("a to hold b's gang", lambda: planned(a, "train/other") is not None)  # b's gang reaches a as well
        assert patched_rack(await answer(sa, ua, kueue_member("o-1", "other", 8, 2), "mutate")) == ["r2"]

    two_replicas(policy_dir, pki, TWO_FREE_RACKS, scenario)


def test_a_gang_read_before_the_cluster_state_is_listed_is_held_once_it_is(pki, policy_dir):
    async def scenario():
        double = ApiDouble()
        url = await double.start()
        try:
            a = replica(policy_dir, url, TWO_FREE_RACKS)
            async with running(a, pki, tasks=(a.ledger.run,)) as (ua, sa, _):
                await until_ready(a)
                assert patched_rack(await answer(sa, ua, kueue_member("g-0", "g", 8, 2), "mutate")) == ["r1"]
            b = replica(policy_dir, url, [])  # starting: its cluster watch has not listed the nodes yet
            b.cluster.synced = False
            await b.ledger.start()
            assert b.ledger.deferred == {"gang:train/g"} and planned(b, "train/g") is None  # no node to hold slots on yet
            for obj in TWO_FREE_RACKS:
                b.snapshot.apply("ADDED", obj)
            b.cluster.synced = True
            view = b.ledger.generation
            b.ledger._mirror_deferred()  # (the next commit or idle tick does this)
            assert planned(b, "train/g") is not None and b.ledger.generation > view  # decisions made before are stale
            held = b.engine.state_for(b.snapshot).planner().index.reservations.get("train/g")
            assert sorted(n for n, _ in held.slots.values()) == ["n1", "n2"]
        finally:
            await double.stop()

    asyncio.run(scenario())


def test_one_gang_planned_on_two_replicas_at_once_keeps_the_first_written(pki, policy_dir):
    from webhook.server import review as rv

    async def scenario(double, A, B):
        (a, ua, sa), (b, ub, sb) = A, B
        now = time.time()
        ra, rb = (rv.decode(orjson.dumps(review(kueue_member(n, "g", 8, 2))), s) for n, s in (("g-0", a), ("g-1", b)))
        assert rv.decide(ra, mutate=True, state=a, now=now).allowed  # each plans the gang itself, before either writes
        assert rv.decide(rb, mutate=True, state=b, now=now).allowed
        assert await a.ledger.commit(ra.taken, 5.0, ra.view)
        await until("b to read a's gang", lambda: "gang:train/g" in b.ledger.shards.get(SHARD, _NO_SHARD).entries)
        assert "gang:train/g" in b.ledger.clashes  # b held its own plan of it when a's arrived
        assert await b.ledger.commit(rb.taken, 5.0, rb.view) is False  # refused: not written over a's
        b.ledger.undo(rb.taken)
        assert gangs_in(double)["gang:train/g"][2] == a.ledger.replica
        assert planned(b, "train/g") is b.ledger.mirrored["gang:train/g"]  # b now holds a's plan of the gang
        assert patched_rack(await answer(sb, ub, kueue_member("g-1", "g", 8, 2), "mutate")) == ["r1"]

    two_replicas(policy_dir, pki, TWO_FREE_RACKS, scenario)


def _jobset_review(obj: dict, operation: str = "CREATE") -> dict:
    gvk = {"group": "jobset.x-k8s.io", "version": "v1alpha2", "kind": "JobSet"}
    gvr = {"group": "jobset.x-k8s.io", "version": "v1alpha2", "resource": "jobsets"}
    body = {"object": None, "oldObject": obj} if operation == "DELETE" else {}
    return review(obj, kind=gvk, requestKind=gvk, resource=gvr, requestResource=gvr, operation=operation,
                  options=None, **body)


def training_jobset(name: str = "a", uid: str = "js-uid-1") -> dict:
    """A 2 x 8-GPU JobSet the contract gang block selects (`acme.io/workload: training`; 16 GPUs > 8: rack required)."""
    from tests.policy.blocks.gang.test_workload_domains import jobset

    js = jobset(name, uid=uid)
    js["metadata"]["labels"] = {"acme.io/workload": "training"}
    return js


async def admit_jobset(session, url: str, js: dict, operation: str = "CREATE") -> None:
    status, doc = await post(session, f"{url}/validate?timeout=10s", _jobset_review(js, operation))
    assert status == 200 and doc["response"]["allowed"], doc


def test_a_jobset_held_on_one_replica_keeps_other_gangs_out_and_pins_its_pods_on_the_other(pki, policy_dir):
    from tests.policy.blocks.gang.test_workload_domains import js_pod

    key = "wl:train/JobSet/a"

    async def scenario(double, A, B):
        (a, ua, sa), (b, ub, sb) = A, B
        await admit_jobset(sa, ua, training_jobset())
        entry = gangs_in(double).get(f"gang:{key}")  # written before the JobSet's "allowed"
        assert entry is not None and entry[4]["gang"]["domain"] == "r1"
        await until("b to hold a's JobSet domain", lambda: planned(b, key) is not None)  # b's watch of the gangs shard brings the JobSet's rack in
        assert key in b.engine.state_for(b.snapshot).planner().workloads
        # on b: the JobSet's pod is pinned to r1 and named its reservation; another JobSet cannot have r1
        resp = await answer(sb, ub, js_pod(), "mutate")
        assert patched_rack(resp) == ["r1"]
        assert key in base64.b64decode(resp["patch"]).decode()
        await admit_jobset(sb, ub, training_jobset("b", uid="js-uid-b"))
        assert gangs_in(double)[f"gang:wl:train/JobSet/b"][4]["gang"]["domain"] == "r2"

    two_replicas(policy_dir, pki, TWO_FREE_RACKS, scenario)


def test_a_deleted_jobset_leaves_the_gangs_shard_and_every_replica_lets_go_of_its_rack(pki, policy_dir):
    """(Before, the entry stayed until its expiry: a replica started meanwhile held the rack of a JobSet long gone.)"""
    key = "wl:train/JobSet/a"

    async def scenario(double, A, B):
        (a, ua, sa), (b, ub, sb) = A, B
        await admit_jobset(sa, ua, training_jobset())
        assert f"gang:{key}" in gangs_in(double)
        await until("b to hold a's JobSet domain", lambda: planned(b, key) is not None)
        await admit_jobset(sb, ub, training_jobset(), "DELETE")
        await until(lambda: (gangs_in(double), planned(a, key)), lambda: f"gang:{key}" not in gangs_in(double) and planned(a, key) is None)  # written after the answer, not awaited
        assert planned(b, key) is None
        # A replica that reads the shard now holds nothing of it: a new JobSet may have r1 on a, b and it.
        c = replica(policy_dir, double.url, TWO_FREE_RACKS)
        await c.ledger.start()
        assert planned(c, key) is None
        await admit_jobset(sa, ua, training_jobset("c", uid="js-uid-c"))
        assert gangs_in(double)["gang:wl:train/JobSet/c"][4]["gang"]["domain"] == "r1"

    two_replicas(policy_dir, pki, TWO_FREE_RACKS, scenario)
