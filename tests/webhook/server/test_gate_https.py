"""Over real HTTPS: decisions and loop-side updates of decision state never interleave (webhook/server/gate.py).

A decision held on a threading.Event stands for a slow one; no assertion depends on
timing: the test waits on events and on the gate's own queue.
"""

import asyncio
import io
import sys
import threading
import time

import orjson
import pytest

from lang import compile_policies
from policy.cluster.snapshot import ClusterSnapshot
from policy.decision import Decision
from policy.engine import Engine
from webhook.server.decisionlog import DecisionLog
from webhook.server.state import PROBATION, State
from webhook.server.watch import RESOURCES, ClusterWatcher

from tests.webhook.wh_harness import make_pki, pod, review, running
from tests.webhook.wh_standin import admission_module

NODES = tuple(r for r in RESOURCES if r.kind == "Node")


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"))


def node(name, rv, rack="r1"):
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "resourceVersion": str(rv), "labels": {"topology.acme.io/rack": rack}},
            "spec": {}, "status": {"allocatable": {"nvidia.com/gpu": "8"}, "conditions": [{"type": "Ready", "status": "True"}]}}


class HeldEngine:
    """The first decision blocks until `release` is set; every decision records its thread and the node n1 it saw."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()
        self.seen: list[tuple[str, str | None]] = []  # (thread name, n1's rack or None)

    def decide(self, request, snapshot, now, *, mutate):
        n1 = snapshot.node("n1")
        self.seen.append((threading.current_thread().name, None if n1 is None else n1["metadata"]["labels"]["topology.acme.io/rack"]))
        if len(self.seen) == 1:
            self.entered.set()
            self.release.wait(30)
        return Decision(allowed=True)


def make_state(engine, snapshot, **kw):
    state = State(engine=engine, snapshot=snapshot, admission=admission_module(), log=DecisionLog(io.BytesIO()), **kw)
    state.cluster.synced = True
    return state


async def post(session, url, body):
    async with session.post(url, data=orjson.dumps(body)) as resp:
        assert resp.status == 200
        return (await resp.json())["response"]


async def until(check, what: str) -> None:
    """Wait for `check()` by yielding to the loop (bounded by count, not by a clock)."""
    for _ in range(20000):
        if check():
            return
        await asyncio.sleep(0.001)
    raise AssertionError(f"never happened: {what}")


def test_updates_wait_for_a_deciding_thread_and_apply_in_order_before_the_next_decision(pki):
    async def scenario():
        engine = HeldEngine()
        snap = ClusterSnapshot.from_objects([])
        state = make_state(engine, snap)
        watcher = ClusterWatcher(state, None, resources=NODES)
        async with running(state, pki) as (base, session, _):
            watcher.loop = asyncio.get_running_loop()
            first = asyncio.ensure_future(post(session, base + "/validate", review()))  # on probation: a thread
            assert await asyncio.to_thread(engine.entered.wait, 10)
            # Two watch events from a watch thread while the decision thread holds the gate.
            poster = threading.Thread(target=lambda: [
                watcher._post(watcher._apply_event, NODES[0], "ADDED", node("n1", 1), time.perf_counter()),
                watcher._post(watcher._apply_event, NODES[0], "MODIFIED", node("n1", 2, rack="r2"), time.perf_counter())])
            poster.start()
            poster.join()
            await until(lambda: state.gate.detail()["deferred"] == 2, "both events queued")
            assert snap.node("n1") is None  # not applied under the deciding thread
            # The engine has proven fast: a request now would run inline, but the gate is taken: a thread instead.
            state.timer.count, state.timer.slowest = PROBATION, 0.0
            assert state.timer.inline_ok(9.0)
            second = asyncio.ensure_future(post(session, base + "/validate", review()))
            for _ in range(50):  # let the second request be read and sent on its way
                await asyncio.sleep(0)
            assert len(engine.seen) == 1 and snap.node("n1") is None and state.gate.detail()["deferred"] == 2
            detail = (await (await session.get(base + "/readyz")).json())["decisions"]
            assert detail["deferred"] == 2 and detail["busy"] is True and detail["oldest_wait_s"] > 0
            engine.release.set()
            answers = await asyncio.gather(first, second)
        assert [a["allowed"] for a in answers] == [True, True]
        assert engine.seen[0] == ("allot-decide_0", None)
        thread, rack = engine.seen[1]
        assert thread.startswith("allot-decide") and rack == "r2"  # decided after both events, applied in order
        assert snap.node("n1")["metadata"]["labels"]["topology.acme.io/rack"] == "r2"
        assert state.gate.detail()["deferred"] == 0 and state.gate.detail()["longest_wait_s"] > 0
        assert state.cluster.kinds["Node"]["resource_version"] == "2"

    asyncio.run(scenario())


def test_a_free_gate_applies_an_update_at_once_and_a_new_one_goes_behind_the_queue():
    from webhook.server.gate import DecisionGate

    gate, order = DecisionGate(), []
    gate.run(order.append, "now")
    assert order == ["now"] and gate.detail()["deferred"] == 0
    gate.lock.acquire()  # a decision thread
    gate.run(order.append, "a")
    gate.lock.release()
    gate.run(order.append, "b")  # the lock is free, but "a" came first
    assert order == ["now", "a", "b"]
    gate.lock.acquire()
    assert gate.try_enter() is False  # an inline decision never waits: it is sent to a thread
    gate.lock.release()
    assert gate.try_enter() is True
    gate.run(order.append, "nested")  # an update from inside the loop's own hold runs at once
    gate.leave()
    assert order == ["now", "a", "b", "nested"] and not gate.lock.locked()


def test_a_hung_decision_still_gets_the_on_error_answer_and_healthz_answers(pki):
    async def scenario():
        engine = HeldEngine()
        state = make_state(engine, ClusterSnapshot.from_objects([]), on_error="allow")
        watcher = ClusterWatcher(state, None, resources=NODES)
        async with running(state, pki) as (base, session, _):
            watcher.loop = asyncio.get_running_loop()
            hung = asyncio.ensure_future(post(session, base + "/validate?timeout=1s", review()))
            assert await asyncio.to_thread(engine.entered.wait, 10)
            threading.Thread(target=watcher._post, args=(watcher._apply_event, NODES[0], "ADDED", node("n1", 1),
                                                         time.perf_counter())).start()
            await until(lambda: state.gate.detail()["deferred"] == 1, "the event queued")
            async with session.get(base + "/healthz") as resp:
                assert resp.status == 200 and (await resp.json()) == {"ok": True}
            answer = await hung  # the decision is still held: this is the timeout's answer
            assert not engine.release.is_set()
            async with session.get(base + "/metrics") as resp:
                text = await resp.text()
            assert "allot_deferred_updates 1.0" in text
            engine.release.set()
            await until(lambda: state.gate.detail()["deferred"] == 0, "the event applied after the release")
        assert answer["allowed"] is True and answer["auditAnnotations"]["on-error"] == "allow: timeout"
        assert state.snapshot.node("n1") is not None

    asyncio.run(scenario())


QUOTA = 'quota team-a { for namespace == "team-a"  gpus 32 }\n'


def test_off_loop_decisions_admit_exactly_the_quota_while_watch_events_arrive(pki):
    ps, diags = compile_policies([("q.policy", QUOTA)])
    assert not [d for d in diags if d.severity == "error"]
    snap = ClusterSnapshot.from_objects([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a"}}])
    state = State(engine=Engine(ps), snapshot=snap, log=DecisionLog(io.BytesIO()))
    state.cluster.synced = True
    state.timer.inline_ok = lambda budget: False  # probation for good: every decision on a worker thread
    watcher = ClusterWatcher(state, None, resources=NODES)
    stop = threading.Event()

    def heartbeats():
        rv = 1
        while not stop.is_set():
            for i in range(4):
                rv += 1
                watcher._post(watcher._apply_event, NODES[0], "ADDED" if rv < 6 else "MODIFIED", node(f"n{i}", rv),
                              time.perf_counter())
            time.sleep(0.001)

    async def scenario():
        async with running(state, pki) as (base, session, _):
            watcher.loop = asyncio.get_running_loop()
            beat = threading.Thread(target=heartbeats)
            beat.start()
            try:
                bodies = [review(pod(name=f"p{i}", namespace="team-a", gpus=1)) for i in range(80)]
                return await asyncio.gather(*(post(session, base + "/validate", b) for b in bodies))
            finally:
                stop.set()
                beat.join()

    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as possible, so a split read-modify-write has its chance
    try:
        answers = asyncio.run(scenario())
    finally:
        sys.setswitchinterval(switch)
    assert sum(a["allowed"] for a in answers) == 32
    assert snap.reservations.totals()["quota team-a"][0] == 32_000
    assert state.metrics.value("allot_watch_events_total", {"kind": "Node", "type": "MODIFIED"}) > 0


def test_a_reload_and_a_ledger_update_wait_for_a_deciding_thread(tmp_path):
    from webhook.ledger import cluster as ledger
    from webhook.server.reload import PolicyReloader, PolicySource
    from webhook.server.state import PolicyStatus

    old, new = HeldEngine(), HeldEngine()
    state = make_state(old, ClusterSnapshot.from_objects([]))
    reloader = PolicyReloader(state, PolicySource(str(tmp_path)))

    class Mirror:  # a ClusterLedger method's shape: `_post` finds the gate through its `state`
        def __init__(self):
            self.state, self.calls = state, []

        def _event(self, kind, cm):
            self.calls.append((kind, state.engine is new))

    mirror = Mirror()

    async def scenario():
        loop = asyncio.get_running_loop()
        state.gate.loop = loop
        state.gate.lock.acquire()  # a decision thread is deciding
        reloader._install((new, PolicyStatus(generation=2, source="x")))
        await asyncio.to_thread(ledger._post, loop, mirror._event, "MODIFIED", {})
        await until(lambda: state.gate.detail()["deferred"] == 2, "swap and ledger event queued")
        held = (state.engine is old, state.policy.generation, list(mirror.calls))
        state.gate.lock.release()
        state.gate.drain()
        return held

    held = asyncio.run(scenario())
    assert held == (True, 1, [])
    assert state.engine is new and state.policy.generation == 2
    assert mirror.calls == [("MODIFIED", True)]  # after the swap: the order they came in
