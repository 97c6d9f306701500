"""Escrow: replicas claim slices of a quota's free capacity and admit inside them with no write per pod.

Through the API double and the real `kubernetes` client, like tests/webhook/server/test_ledger.py;
the replicas run with ALLOT_LEDGER_ESCROW=1.
"""

from __future__ import annotations

import asyncio
import time

import orjson
import pytest

from tests.webhook.server.test_ledger import NS, SHARD, commit_unanswered, post, until_ready
from tests.webhook.server.test_ledger import replica as plain_replica
from tests.webhook.wh_harness import make_pki, pod, review, running
from webhook.bench.apidouble import ApiDouble
from webhook.server.ledger import ESCROW_PREFIX

QUOTA = 64


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture()
def policy_dir(tmp_path):
    (tmp_path / "q.policy").write_text(f'quota team-a {{\n  for namespace matches "team-a*"\n  gpus {QUOTA}\n}}\n')
    return tmp_path


@pytest.fixture(autouse=True)
def escrow_on(monkeypatch):
    monkeypatch.setenv("ALLOT_LEDGER_ESCROW", "1")


def shard_entries(double: ApiDouble) -> dict:
    cm = next((o for o in double.items("configmaps", NS) if o["metadata"]["name"] == SHARD), None)
    return orjson.loads(cm["data"]["holds"]) if cm is not None else {}


def pods_held(double: ApiDouble) -> dict[str, int]:
    return {k: sum(h[1] for h in e[1]) for k, e in shard_entries(double).items() if not k.startswith(ESCROW_PREFIX)}


def slices_held(double: ApiDouble) -> dict[str, int]:
    return {k: sum(h[1] for h in e[1]) for k, e in shard_entries(double).items() if k.startswith(ESCROW_PREFIX)}


async def wave(clients, names) -> int:
    """One 1-GPU pod CREATE per name, all at once, round-robin over the replicas; how many were allowed."""

    async def one(i, name):
        url, session = clients[i % len(clients)]
        status, doc = await post(session, f"{url}/validate?timeout=10s", review(pod(name, gpus=1)))
        assert status == 200
        return doc["response"]["allowed"]

    return sum(await asyncio.gather(*(one(i, n) for i, n in enumerate(names))))


async def until(cond, what, timeout=15.0):
    end = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < end, what
        await asyncio.sleep(0.05)


def test_three_replicas_admit_exactly_the_quota_mostly_inside_slices(pki, policy_dir):
    async def scenario():
        double = ApiDouble()
        url = await double.start()
        try:
            states = [plain_replica(policy_dir, url) for _ in range(3)]
            assert all(s.ledger.escrow for s in states)
            async with running(states[0], pki, tasks=(states[0].ledger.run,)) as (u0, s0, _), \
                    running(states[1], pki, tasks=(states[1].ledger.run,)) as (u1, s1, _), \
                    running(states[2], pki, tasks=(states[2].ledger.run,)) as (u2, s2, _):
                for s in states:
                    await until_ready(s)
                clients = [(u0, s0), (u1, s1), (u2, s2)]
                admitted = 0
                for w in range(12):  # waves of 9: slices are claimed by the first writes, then spent without writes
                    admitted += await wave(clients, [f"w{w}-{i}" for i in range(9)])
                    assert admitted <= QUOTA  # never more, at any point
                assert sum(s.ledger.slice_admits for s in states) > 0  # the slices did admit, unwritten
                # An admission the other replicas' slices kept out comes back once those slices return
                # (idle for SLICE_IDLE, noticed within the prune interval): then the rest, and no more.
                await until(lambda: not slices_held(double), "idle slices were never returned")
                admitted += await wave(clients, [f"r{i}" for i in range(QUOTA)])
                assert admitted == QUOTA
                await until(lambda: not any(s.ledger.shards[SHARD].unrecorded for s in states),
                            "pods admitted inside a slice were never recorded")
                held = pods_held(double)
                assert len(held) == QUOTA and sum(held.values()) == QUOTA * 1000  # every "allowed" is now a hold in the API
        finally:
            await double.stop()

    asyncio.run(scenario())


def test_a_replica_dead_with_a_slice_costs_it_until_expiry_then_the_rest_is_admitted(pki, policy_dir):
    async def scenario():
        double = ApiDouble()
        url = await double.start()
        try:
            dead = plain_replica(policy_dir, url)
            await dead.ledger.start()
            await commit_unanswered(dead, 8)
            assert dead.ledger.slice_admits == 7  # the first claimed the slice in its write; 7 more inside it
            await asyncio.sleep(0.2)
            assert set(pods_held(double)) == {"team-a/ghost0"}  # 7 admitted pods the API knows only as slice
            dead_slice = slices_held(double)[f"{ESCROW_PREFIX}{dead.ledger.replica}"]
            assert dead_slice >= 7000
            b = plain_replica(policy_dir, url)
            async with running(b, pki, tasks=(b.ledger.run,)) as (ub, sb, _):
                await until_ready(b)
                first = await wave([(ub, sb)], [f"q{i}" for i in range(QUOTA)])
                assert first + 8 <= QUOTA  # the ghosts could be real pods: counted through the slice
                assert dead_slice % 1000 == 0 and first == QUOTA - 1 - dead_slice // 1000  # exactly what the dead replica did not hold
                # The dead replica's slice and hold expire (rewritten rather than waited for).
                cm = next(o for o in double.items("configmaps", NS) if o["metadata"]["name"] == SHARD)
                entries = orjson.loads(cm["data"]["holds"])
                for key, entry in entries.items():
                    if entry[2] == dead.ledger.replica:
                        entry[0] = time.time() - 1
                double.put("configmaps", {**cm, "data": {"holds": orjson.dumps(entries).decode()}})
                await until(lambda: b.snapshot.reservations.totals()["quota team-a"][0] == first * 1000,
                            "the watch never showed b the dead replica's expiry")
                second = await wave([(ub, sb)], [f"r{i}" for i in range(QUOTA)])
                assert first + second == QUOTA  # the quota is whole again, and exact
                await until(lambda: not b.ledger.shards[SHARD].unrecorded, "b's slice pods were never recorded")
                held = pods_held(double)
                assert not any(k.startswith("team-a/ghost") for k in held) and len(held) == QUOTA
                assert f"{ESCROW_PREFIX}{dead.ledger.replica}" not in shard_entries(double)
        finally:
            await double.stop()

    asyncio.run(scenario())


def test_a_slice_admits_only_while_its_pods_would_be_recorded_or_seen_before_it_expires():
    from webhook.server.escrow import SLICE_MARGIN, SLICE_RENEW, SLICE_TTL
    from webhook.server.ledger import SETTLE

    assert SLICE_MARGIN >= SETTLE + 5.0  # every replica's watch shows an admitted pod before its slice stops counting
    assert 0 < SLICE_RENEW < SLICE_TTL - SLICE_MARGIN
