"""The cluster reservation ledger: two replicas over real HTTPS, one API double speaking the Kubernetes protocol.

The replicas write their holds (over aiohttp, webhook/ledger/apiclient.py, or the real `kubernetes` client) to ConfigMaps in
the double (webhook/bench/apidouble.py), which answers 409 on a stale resourceVersion.
"""

from __future__ import annotations

import asyncio
import time

import orjson
import pytest

from policy.cluster.snapshot import ClusterSnapshot
from tests.webhook.wh_harness import make_pki, pod, review, running
from webhook.bench.apidouble import ApiDouble, api_client
from webhook.server import review as rv
from webhook.server.decisionlog import DecisionLog
from webhook.ledger.cluster import ClusterLedger, shard_name
from webhook.server.reload import PolicyReloader, PolicySource
from webhook.server.state import State, warm_engine

NS = "allot-system"
POLICY = """\
quota team-a {
  for namespace matches "team-a*"
  gpus 32
}
"""
CLUSTER = """\
apiVersion: v1
kind: List
items:
- {apiVersion: v1, kind: Namespace, metadata: {name: team-a}}
"""
SHARD = shard_name("quota team-a")


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def policy_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("policy")
    (d / "q.policy").write_text(POLICY)
    return d


@pytest.fixture(params=["aiohttp", "threads"])
def write_path(request, monkeypatch):
    """Both ways shards are read and written: on the loop (webhook/ledger/apiclient.py) and the threaded fallback."""
    if request.param == "threads":
        monkeypatch.setenv("ALLOT_LEDGER_HTTP", "threads")
    return request.param


def replica(policy_dir, url: str, lines: list | None = None) -> State:
    """A server state as `allot serve --ledger` builds it, over a file snapshot (no pods) and the double."""
    state = State(on_error="deny", log=DecisionLog(_Lines(lines) if lines is not None else None, buffered=False))
    assert PolicyReloader(state, PolicySource(str(policy_dir))).load_now()
    state.swap_snapshot(ClusterSnapshot.from_text(CLUSTER), source="file", synced=True)
    state.ledger = ClusterLedger(api_client(url), NS, state=state)
    warm_engine(state.engine, state.snapshot)
    return state


class _Lines:
    def __init__(self, out: list) -> None:
        self.out = out

    def write(self, data: bytes) -> None:
        self.out.extend(orjson.loads(x) for x in data.splitlines() if x)

    def flush(self) -> None:
        pass


async def until(what, cond, timeout: float = 10.0) -> None:
    """Wait until `cond()` holds (another replica's watch, a write behind an answer): failing, after `timeout`, with `what()` or `what`."""
    end = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < end, what() if callable(what) else f"never: {what}"
        await asyncio.sleep(0.01)


async def until_ready(state, timeout=10.0) -> None:
    await until(lambda: state.ready()[1]["problems"], lambda: state.ready()[0], timeout)


def on_two_replicas(make, pki, scenario) -> None:
    """Run `scenario(double, (a, url_a, session_a), (b, url_b, session_b))` on two ready replicas `make(url)` builds over one API double."""
    from tests.webhook.wh_harness import running

    async def main():
        double = ApiDouble()
        url = await double.start()
        try:
            a, b = make(url), make(url)
            async with running(a, pki, tasks=(a.ledger.run,)) as (ua, sa, _), running(b, pki, tasks=(b.ledger.run,)) as (ub, sb, _):
                await until_ready(a)
                await until_ready(b)
                await scenario(double, (a, ua, sa), (b, ub, sb))
        finally:
            await double.stop()

    asyncio.run(main())


async def post(session, url, body):
    async with session.post(url, data=orjson.dumps(body), headers={"Content-Type": "application/json"}) as resp:
        return resp.status, orjson.loads(await resp.read())


async def commit_unanswered(state, n: int) -> None:
    """`n` 1-GPU pods decided and committed by `state`, never answered: the process dies here."""
    now = time.time()
    for i in range(n):
        r = rv.decode(orjson.dumps(review(pod(f"ghost{i}", gpus=1))), state)
        decision = rv.decide(r, mutate=False, state=state, now=now)
        assert decision.allowed and r.taken
        assert await state.ledger.commit(r.taken, 5.0, r.view)


def held_gpus(double: ApiDouble) -> dict[str, int]:
    """Pod key -> milli-GPU held in the quota's shard, as stored in the API."""
    cm = next((o for o in double.items("configmaps", NS) if o["metadata"]["name"] == SHARD), None)
    if cm is None:
        return {}
    entries = orjson.loads(cm["data"]["holds"])
    return {k: sum(h[1] for h in e[1]) for k, e in entries.items()}


async def burst(sessions, urls, names, *, gpus=1) -> list[bool]:
    """One 1-GPU pod CREATE per name, all at once, alternating between the replicas."""

    async def one(i, name):
        status, doc = await post(sessions[i % 2], f"{urls[i % 2]}/validate?timeout=10s", review(pod(name, gpus=gpus)))
        assert status == 200
        return doc["response"]["allowed"]

    return await asyncio.gather(*(one(i, n) for i, n in enumerate(names)))


def test_two_replicas_admit_exactly_the_quota(pki, policy_dir, write_path):
    async def scenario():
        double = ApiDouble()
        url = await double.start()
        try:
            lines: list = []
            a, b = replica(policy_dir, url, lines), replica(policy_dir, url, lines)
            assert (a.ledger.api is None) == (write_path == "threads")
            async with running(a, pki, tasks=(a.ledger.run,)) as (ua, sa, _), running(b, pki, tasks=(b.ledger.run,)) as (ub, sb, _):
                await until_ready(a)
                await until_ready(b)
                results = await burst((sa, sb), (ua, ub), [f"p{i}" for i in range(300)])
                assert sum(results) == 32
                held = held_gpus(double)
                assert len(held) == 32 and sum(held.values()) == 32_000  # every "allowed" is a hold in the API
                assert double.conflicts > 0  # the two replicas did contend: the CAS decided, not luck
                _, ready = a.ready()
                assert ready["digest"] and ready["ledger"]["synced"]
                writes = double.writes
                for i, body in enumerate([review(pod("dry", gpus=1), dryRun=True), review(pod("cpu"))] * 10):
                    status, doc = await post((sa, sb)[i % 2], f"{(ua, ub)[i % 2]}/validate?timeout=10s", body)
                    assert status == 200
                assert double.writes == writes  # stateless decisions (dryRun, no GPU) write nothing
            allowed = [line for line in lines if line.get("result") == "allowed" and line["name"].startswith("p")]
            assert len(allowed) == 32 and all(line["ledger_attempts"] >= 1 and line["digest"] for line in allowed)
        finally:
            await double.stop()

    for _ in range(3):  # every run, not most runs
        asyncio.run(scenario())


def test_conflict_storm_never_over_admits_nor_leaks(pki, policy_dir, write_path):
    async def scenario():
        double = ApiDouble()
        url = await double.start()
        stop = asyncio.Event()

        async def storm():  # another writer touching the shard every few ms: every write races it
            while not stop.is_set():
                for cm in double.items("configmaps", NS):
                    double.put("configmaps", cm)
                await asyncio.sleep(0.003)

        try:
            a, b = replica(policy_dir, url), replica(policy_dir, url)
            assert (b.ledger.api is None) == (write_path == "threads")
            async with running(a, pki, tasks=(a.ledger.run,)) as (ua, sa, _), running(b, pki, tasks=(b.ledger.run,)) as (ub, sb, _):
                await until_ready(a)
                await until_ready(b)
                await burst((sa, sb), (ua, ub), ["warm"])  # the shard exists: the storm has something to touch
                task = asyncio.create_task(storm())
                first = await burst((sa, sb), (ua, ub), [f"s{i}" for i in range(200)])
                stop.set()
                await task
                assert double.conflicts > 0
                assert 1 + sum(first) <= 32
                assert sum(held_gpus(double).values()) == (1 + sum(first)) * 1000  # denied requests left no hold
                second = await burst((sa, sb), (ua, ub), [f"t{i}" for i in range(100)])
                assert 1 + sum(first) + sum(second) == 32  # once calm, the rest of the quota, and no more
        finally:
            await double.stop()

    asyncio.run(scenario())


def test_a_replica_dead_after_commit_leaves_holds_that_expire(pki, policy_dir):
    async def scenario():
        double = ApiDouble()
        url = await double.start()
        try:
            dead = replica(policy_dir, url)
            await dead.ledger.start()
            await commit_unanswered(dead, 8)
            assert len(held_gpus(double)) == 8
            b = replica(policy_dir, url)
            async with running(b, pki, tasks=(b.ledger.run,)) as (ub, sb, _):
                await until_ready(b)
                results = await burst((sb, sb), (ub, ub), [f"q{i}" for i in range(40)])
                assert sum(results) == 24  # the dead replica's holds count until they expire
                # Their expiry comes: the shard as it stands, its clock past the ghosts' expiry
                # (rewritten rather than waited for, so a slow machine cannot expire them mid-burst).
                cm = next(o for o in double.items("configmaps", NS) if o["metadata"]["name"] == SHARD)
                entries = orjson.loads(cm["data"]["holds"])
                for key in entries:
                    if key.startswith("team-a/ghost"):
                        entries[key][0] = time.time() - 1
                double.put("configmaps", {**cm, "data": {"holds": orjson.dumps(entries).decode()}})
                await until("the watch to show b the expiry", lambda: b.snapshot.reservations.totals()["quota team-a"][0] == 24_000)
                results = await burst((sb, sb), (ub, ub), [f"r{i}" for i in range(40)])
                assert sum(results) == 8  # expired: the quota is whole again, and exact
                held = held_gpus(double)
                assert not any(k.startswith("team-a/ghost") for k in held) and len(held) == 32
        finally:
            await double.stop()

    asyncio.run(scenario())


def test_unwritable_ledger_gives_the_on_error_decision_and_readyz_waits(pki, policy_dir):
    async def scenario():
        state = replica(policy_dir, "http://127.0.0.1:9")  # nothing listens: never read
        assert not state.ready()[0] and "reservation ledger not read yet" in state.ready()[1]["problems"][0]
        state.ledger.synced = True  # as if it had been read once, and the API then went away
        async with running(state, pki) as (url, session, _):
            status, doc = await post(session, f"{url}/validate?timeout=2s", review(pod("x", gpus=1)))
            assert status == 200 and doc["response"]["allowed"] is False
            assert "ledger" in doc["response"]["status"]["message"]
            status, doc = await post(session, f"{url}/validate?timeout=2s", review(pod("cpu")))
            assert doc["response"]["allowed"] is True  # a stateless decision writes nothing, so needs no ledger
        assert state.metrics.value("allot_failure_decisions_total", {"cause": "ledger_unavailable", "outcome": "deny"}) == 1
        assert not state.snapshot.reservations.holds  # the failed commit left no local hold

    asyncio.run(scenario())


def test_policy_digest_metric(policy_dir):
    state = State(on_error="deny", log=DecisionLog(None))
    assert PolicyReloader(state, PolicySource(str(policy_dir))).load_now()
    assert state.metrics.value("allot_policy_digest_info", {"digest": state.policy.digest}) == 1


def test_a_garbled_shard_is_read_without_crashing_and_its_bad_entries_ignored(policy_dir):
    async def scenario():
        double = ApiDouble()
        url = await double.start()
        try:
            good = [time.time() + 30, [["quota team-a", 3000, 0, None, 3000]], "other", None]
            bad = {"team-a/x": "nope", "team-a/y": [1, 2], "team-a/z": [time.time() + 30, [["q", 1.5, 0, None, 1]], "o", None],
                   "team-a/w": [time.time() + 30, [], "o", "yesterday"]}
            double.put("configmaps", {"metadata": {"name": SHARD, "namespace": NS, "labels": {"allot.dev/ledger": "reservations"}},
                                      "data": {"holds": orjson.dumps({"team-a/ok": good, **bad}).decode()}})
            double.put("configmaps", {"metadata": {"name": shard_name("quota other"), "namespace": NS,
                                                   "labels": {"allot.dev/ledger": "reservations"}}, "data": {"holds": "{not json"}})
            state = replica(policy_dir, url)
            await state.ledger.start()
            assert state.ledger.synced
            assert set(state.snapshot.reservations.holds) == {"team-a/ok"}  # another replica's valid hold counts
        finally:
            await double.stop()

    asyncio.run(scenario())


def test_a_replica_learns_the_other_replicas_holds_through_the_watch_not_a_conflict(pki, policy_dir):
    async def scenario():
        double = ApiDouble()
        url = await double.start()
        try:
            a, b = replica(policy_dir, url), replica(policy_dir, url)
            async with running(a, pki, tasks=(a.ledger.run,)) as (ua, sa, _), running(b, pki, tasks=(b.ledger.run,)) as (ub, sb, _):
                await until_ready(a)
                await until_ready(b)
                assert sum(await burst((sa, sa), (ua, ua), [f"a{i}" for i in range(20)])) == 20
                await until("the watch to bring a's holds to b", lambda: b.snapshot.reservations.totals().get("quota team-a", (0,))[0] == 20_000)  # no request to b yet
                conflicts = double.conflicts
                assert sum(await burst((sb, sb), (ub, ub), [f"b{i}" for i in range(20)])) == 12
                assert double.conflicts == conflicts  # b wrote against the version its watch showed: no 409
                assert len(held_gpus(double)) == 32
        finally:
            await double.stop()

    asyncio.run(scenario())


def test_a_watch_resumed_from_a_version_the_api_no_longer_keeps_relists(pki, policy_dir, monkeypatch):
    from webhook.bench import apidouble

    monkeypatch.setattr(apidouble, "HISTORY", 5)  # the double forgets all but the last 5 changes: a late watch gets 410

    async def scenario():
        double = ApiDouble()
        url = await double.start()
        try:
            a, b = replica(policy_dir, url), replica(policy_dir, url)
            await b.ledger.start()  # b has read the shards, but is not watching yet
            async with running(a, pki, tasks=(a.ledger.run,)) as (ua, sa, _):
                await until_ready(a)
                for i in range(8):  # one write each: b's resourceVersion falls out of the double's history
                    assert await burst((sa, sa), (ua, ua), [f"a{i}"]) == [True]
            task = asyncio.create_task(b.ledger.run())
            await until("b to relist after its watch expired", lambda: b.snapshot.reservations.totals().get("quota team-a", (0,))[0] == 8_000)
            assert b.ledger.relists == 2  # the first read, and the one after 410 Gone
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        finally:
            await double.stop()

    asyncio.run(scenario())
