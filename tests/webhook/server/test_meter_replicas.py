"""Two replicas share one budget meter through the `allot-meter` ConfigMap on the API double (real HTTP, real CAS).

Time is each replica's clock, set by the test (the API server's time, as webhook/meter/clock.py
reads it from `Date`); pods are real Pod shapes applied to each replica's own snapshot.
"""

from __future__ import annotations

import asyncio
import email.utils
import types

import orjson
from prometheus_client import CollectorRegistry

import lang
from policy.budget.calendar import days_from_civil
from policy.cluster.snapshot import ClusterSnapshot
from policy.engine import Engine
from tests.policy.builders import gpu_container, node, pod
from webhook.bench.apidouble import ApiDouble, api_client
from webhook.bench.budget_writes import SetClock
from webhook.meter import store
from webhook.meter.api import dated_api
from webhook.meter.clock import ServerClock
from webhook.meter.metrics import BudgetCollector
from webhook.meter.service import MeterService

NS = "allot-system"
JUNE = days_from_civil(2025, 6, 1) * 86_400_000
S = 1000  # ms
POLICY = 'budget research {\n  for namespace == "research"\n  gpu_hours 1000\n  period month\n}\n'


# SetClock: the API server's time as the test sets it (the offset machinery is tested on its own below).


def running(name: str, gpus: str) -> dict:
    p = pod(name, "research", containers=[gpu_container(gpus)])
    p["spec"]["nodeName"] = "n1"
    p["status"] = {"phase": "Running", "startTime": "2025-06-01T00:00:00Z"}
    return p


def replica(url: str, name: str, t: int, text: str = POLICY) -> MeterService:
    policy, _ = lang.compile_policies([("b.policy", text)])
    snap = ClusterSnapshot.from_objects([node("n1", gpus="16"), running("a", "8")])
    state = types.SimpleNamespace(engine=Engine(policy), snapshot=snap, gate=None)
    clock = SetClock(t)
    return MeterService(state, NS, dated_api(api_client(url), clock), clock, identity=name)


def used(r: MeterService) -> int:
    return r.meter.used_at(0, r.clock.now_ms())


def stored_used(double: ApiDouble) -> tuple[str, int]:
    cm = double.objects[("configmaps", NS, store.NAME)]
    return cm["data"]["writer"], orjson.loads(cm["data"]["budget.research"])["used_mgpu_ms"]


def at(rs, t: int) -> None:
    for r in rs:
        r.clock.t = t


def scenario(body):
    async def run():
        double = ApiDouble()
        url = await double.start()
        try:
            await body(double, url)
        finally:
            await double.stop()

    asyncio.run(run())


def test_one_writes_the_other_adopts_and_both_agree_exactly():
    async def body(double, url):
        t0 = JUNE + 3600 * S
        a = replica(url, "a", t0)
        assert await a.tick() == "wrote"
        short = running("short", "2")  # runs 5 s before b starts: only a's meter saw it
        a.state.snapshot.apply("ADDED", short)
        a.clock.t = t0 + 5 * S
        a.state.snapshot.apply("DELETED", short)
        b = replica(url, "b", t0 + 8 * S)
        new = running("b-pod", "4")
        for r in (a, b):  # the same watch event reaches both, at their own (server) time
            r.clock.t = t0 + 9 * S
            r.state.snapshot.apply("ADDED", new)
        at((a, b), t0 + 10 * S)
        assert await a.tick() == "wrote" and await b.tick() == "adopted"
        assert stored_used(double)[0] == "a"
        want = 8000 * (3600 + 10) * S + 2000 * 5 * S + 4000 * 1 * S
        assert used(a) == used(b) == want == stored_used(double)[1]
        assert a.writes["ok"] == 2 and b.writes["ok"] == 0
        registry = CollectorRegistry()
        registry.register(BudgetCollector(b))
        assert registry.get_sample_value("allot_budget_used_gpu_hours", {"budget": "research", "period": "2025-06"}) == want / 3_600_000_000
        assert registry.get_sample_value("allot_budget_burn_gpus", {"budget": "research"}) == 12
        assert registry.get_sample_value("allot_budget_meter_writer") == 0

    scenario(body)


def test_the_writer_writes_at_most_once_per_ten_seconds():
    async def body(double, url):
        t0 = JUNE + 3600 * S
        a, b = replica(url, "a", t0), replica(url, "b", t0)
        for k in range(61):  # a minute of rounds every second
            at((a, b), t0 + k * S)
            await a.tick()
            await b.tick()
        assert a.writes["ok"] == 7 and b.writes["ok"] == 0  # t0, +10 s, … +60 s

    scenario(body)


def test_a_killed_writer_is_replaced_after_its_lease_and_nothing_is_lost_or_counted_twice():
    async def body(double, url):
        t0 = JUNE + 3600 * S
        a, b = replica(url, "a", t0), replica(url, "b", t0)
        await a.tick()
        await b.tick()
        at((a, b), t0 + 10 * S)
        await a.tick()  # a's last write; then a is killed
        for k in range(11, 45):
            at((b,), t0 + k * S)
            if k == 20:
                b.state.snapshot.apply("DELETED", running("a", "8"))  # the pod ends while nobody writes
            await b.tick()
        writer, value = stored_used(double)
        assert writer == "b" and b.writes["ok"] >= 1
        assert value == used(b) == 8000 * (3600 + 20) * S  # exactly the pod's run, from the start of June to its end

    scenario(body)


def test_a_hand_edit_is_adopted_and_a_deleted_meter_is_written_again_without_a_reset():
    async def body(double, url):
        t0 = JUNE + 3600 * S
        a = replica(url, "a", t0)
        await a.tick()
        cm = double.objects[("configmaps", NS, store.NAME)]
        edited = {"metadata": {"name": store.NAME, "namespace": NS}, "data": dict(cm["data"])}
        edited["data"]["budget.research"] = orjson.dumps({"period": "2025-06", "used_mgpu_ms": 5 * 3_600_000_000}).decode()
        double.put("configmaps", edited)  # an operator's correction to 5 GPU-hours at t0
        at((a,), t0 + 10 * S)
        assert await a.tick() == "wrote"
        assert stored_used(double)[1] == used(a) == 5 * 3_600_000_000 + 8000 * 10 * S
        double.remove("configmaps", NS, store.NAME)
        at((a,), t0 + 20 * S)
        assert await a.tick() == "wrote"
        assert stored_used(double)[1] == 5 * 3_600_000_000 + 8000 * 20 * S

    scenario(body)


def test_a_renamed_budget_starts_from_the_pods_running_and_the_old_entry_is_kept_as_written():
    async def body(double, url):
        t0 = JUNE + 3600 * S
        a = replica(url, "a", t0)
        assert await a.tick() == "wrote"
        short = running("short", "2")
        a.state.snapshot.apply("ADDED", short)
        at((a,), t0 + 5 * S)
        a.state.snapshot.apply("DELETED", short)  # ran 5 s under the old name only
        at((a,), t0 + 10 * S)
        assert await a.tick() == "wrote"
        old = double.objects[("configmaps", NS, store.NAME)]["data"]["budget.research"]
        assert orjson.loads(old)["used_mgpu_ms"] == 8000 * (3600 + 10) * S + 2000 * 5 * S
        # the policy renames `research` to `lab`; a replica of it takes over once a's lease has run out
        c = replica(url, "c", t0 + 40 * S, POLICY.replace("budget research", "budget lab"))
        assert await c.tick() == "wrote"
        data = double.objects[("configmaps", NS, store.NAME)]["data"]
        assert data["budget.research"] == old  # kept as written: `allot usage` lists it, a rename of the key carries it over
        assert orjson.loads(data["budget.lab"])["used_mgpu_ms"] == 8000 * (3600 + 40) * S  # the pod running, from its start
        assert c.adoptions == {"unknown": 1}

    scenario(body)


def test_an_entry_that_does_not_read_is_reported_and_replaced():
    async def body(double, url):
        t0 = JUNE + 3600 * S
        a = replica(url, "a", t0)
        await a.tick()
        cm = double.objects[("configmaps", NS, store.NAME)]
        bad = {"metadata": {"name": store.NAME, "namespace": NS}, "data": {**cm["data"], "budget.research": "{oops"}}
        double.put("configmaps", bad)
        at((a,), t0 + 10 * S)
        assert await a.tick() == "wrote"
        assert a.problems == {"budget research": 1}
        assert stored_used(double)[1] == 8000 * (3600 + 10) * S  # its own value stood

    scenario(body)


def test_the_server_clock_follows_the_date_header_not_the_local_clock():
    clock = ServerClock()
    local = 1_748_736_000.0
    date = email.utils.formatdate(local + 120, usegmt=True)  # the API server is two minutes ahead
    clock.observe(date, local - 0.01, local + 0.01)
    assert 119_000 <= clock.offset <= 121_000
    clock.observe("not a date", local, local)
    assert len(clock.offsets) == 1
