"""The reclaim executor's state machine against the API double (a real HTTP server): plans the engine made, carried out.

Invariants checked in each test: every pod evicted is a pod of a plan victim, none twice, and
none of a workload within its own quota's nominal.
"""

from __future__ import annotations

import asyncio
import contextlib

from tests.webhook.reclaim.reclaim_world import (
    NS,
    ask,
    double_api,
    engine,
    gpu_node,
    job,
    pdb,
    plan_for,
    running,
    store,
)
from webhook.reclaim.controller import ReclaimController
from webhook.reclaim.executor import PLAN_TTL, WAIT_REQUESTER
from webhook.reclaim.records import new_record
from webhook.reclaim.replan import decide_without


def world(b2_job: bool = False) -> list[dict]:
    """n1, n2; team-b runs b1 (n1, older) and b2 (n2, newer; a Job's pod when `b2_job`): it borrows 8."""
    b2 = running("b2-x", "team-b", "n2", minute=2, job="b2") if b2_job else running("b2", "team-b", "n2", minute=2,
                                                                                   labels={"app": "b2"})
    objs = [gpu_node("n1"), gpu_node("n2"), running("b1", "team-b", "n1", minute=1, labels={"app": "b1"}), b2]
    return objs + ([job("b2", "team-b")] if b2_job else [])


def check_invariants(double, plan_pods: set[tuple[str, str]], nominal_pods: set[tuple[str, str]] = frozenset()) -> None:
    names = [(ns, name) for ns, name, _uid in double.evictions]
    assert len(names) == len(set(names)), f"a pod evicted twice: {names}"
    assert set(names) <= plan_pods, f"evicted outside the plan: {set(names) - plan_pods}"
    assert not set(names) & set(nominal_pods), "evicted a pod within its own quota's nominal"


def case(**kw):
    """(objects, request, the engine's plan): team-a asks 8 within its nominal while team-b borrows 8."""
    objs, req = world(**kw), ask()
    return objs, req, plan_for(objs, req)


@contextlib.asynccontextmanager
async def stocked(objs: list[dict]):
    """The double holding `objs` and the requesting pod; (double, api)."""
    async with double_api() as (double, api):
        store(double, objs)
        requester(double)
        yield double, api


def requester(double) -> None:
    """The requesting pod as the API server stored it after admission (Pending)."""
    double.put("pods", {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "new", "namespace": "team-a"}, "spec": {}})


async def controller(api, name: str = "r0", replan=None, now=None) -> ReclaimController:
    c = ReclaimController(api, NS, mode="on", lease_seconds=15.0, name=name, replan=replan,
                          **({"wall": now} if now else {}))
    assert await c.elector.tick()
    return c


async def record(c: ReclaimController, uid: str, req: dict, plan) -> None:
    await c.admitted(uid, req, plan)
    assert c.recorded == 1


def test_a_reclaim_plan_is_recorded_at_admission_and_the_leader_evicts_exactly_its_victim():
    objs, req, plan = case()
    assert [(v.kind, v.name, v.action) for v in plan.victims] == [("Pod", "b2", "evict")]  # the most recently admitted

    async def scenario():
        async with stocked(objs) as (double, api):
            c = await controller(api)
            await record(c, "uid-1", req, plan)
            assert await c.step() == 1
            check_invariants(double, {("team-b", "b2")}, nominal_pods={("team-b", "b1")})
            assert [(ns, n) for ns, n, _ in double.evictions] == [("team-b", "b2")]
            (rec,) = await c.store.all()
            assert rec.phase == "done" and [s["state"] for s in rec.steps] == ["done"]
            assert rec.steps[0]["by"] == c.elector.identity
            (event,) = double.items("events", "team-b")
            assert event["reason"] == "Reclaimed" and event["involvedObject"]["name"] == "b2"
            assert "Pod team-a/new" in event["message"] and "team-b borrows 8" in event["message"]
            assert await c.step() == 0  # done: listed no more, nothing evicted again
            assert len(double.evictions) == 1

    asyncio.run(scenario())


def test_a_job_victim_is_suspended_and_annotated_not_evicted():
    objs = world(b2_job=True)
    req = ask()
    plan = plan_for(objs, req)
    assert [(v.kind, v.name, v.action) for v in plan.victims] == [("Job", "b2", "suspend")]

    async def scenario():
        async with stocked(objs) as (double, api):
            c = await controller(api)
            await record(c, "uid-2", req, plan)
            await c.step()
            stored = double.objects[("jobs", "team-b", "b2")]
            assert stored["spec"]["suspend"] is True
            notes = stored["metadata"]["annotations"]
            assert notes["allot.dev/reclaimed-by"] == "Pod team-a/new (quota team-a, reclaim)"
            assert notes["allot.dev/reclaim-reason"] == "team-b borrows 8 beyond its nominal 8"
            assert notes["allot.dev/reclaim-plan"] == "allot-plan-uid-2"
            assert double.evictions == []  # the Job's controller removes its pods; nothing is evicted
            assert c.executor.suspended == [("Job", "team-b", "b2")]

    asyncio.run(scenario())


def test_a_leader_dead_mid_step_is_finished_by_the_next_without_evicting_anything_twice():
    # A gang victim of two pods; the first leader wrote `acting`, evicted one pod and died.
    objs = [gpu_node("n1"), gpu_node("n2"), running("b1", "team-b", "n1", minute=1, labels={"app": "b1"}),
            running("g-0", "team-b", "n2", minute=2, gang="g", gpus=4), running("g-1", "team-b", "n2", minute=2, gang="g", gpus=4)]
    req = ask()
    plan = plan_for(objs, req)
    assert [(v.kind, v.name, len(v.pods)) for v in plan.victims] == [("PodGroup", "g", 2)]

    async def scenario():
        async with stocked(objs) as (double, api):
            first = await controller(api, "first")
            await record(first, "uid-3", req, plan)
            (rec,) = await first.store.open()
            rec.status["phase"] = "running"
            rec.steps[0] = {"state": "acting", "by": "first", "epoch": 0}
            await first.store.swap(rec)
            assert await first.kube.evict("team-b", "g-0", "uid-team-b-g-0") == 201  # its one eviction, then it died
            first.elector.renewed_at = None  # dead: it renews no more
            now = [0.0]
            second = ReclaimController(api, NS, mode="on", lease_seconds=15.0, name="second")
            second.elector.clock = lambda: now[0]
            assert not await second.elector.tick()  # the first's claim is still fresh as seen here
            now[0] = 16.0
            assert await second.elector.tick() and second.elector.transitions == 1
            await second.step()
            check_invariants(double, {("team-b", "g-0"), ("team-b", "g-1")}, nominal_pods={("team-b", "b1")})
            assert sorted(n for _, n, _ in double.evictions) == ["g-0", "g-1"]
            (rec,) = await second.store.all()
            assert rec.phase == "done" and rec.steps[0]["by"] == "second" and rec.steps[0]["epoch"] == 1

    asyncio.run(scenario())


def test_two_replicas_that_both_think_they_lead_never_evict_a_pod_twice():
    objs, req, plan = case()

    async def scenario():
        async with stocked(objs) as (double, api):
            a = await controller(api, "a")
            b = ReclaimController(api, NS, mode="on", name="b")
            b.elector.renewed_at = b.elector.clock()  # a stale belief: b was leader moments ago
            await record(a, "uid-4", req, plan)
            await asyncio.gather(a.step(), b.step(), a.step(), b.step())
            check_invariants(double, {("team-b", "b2")}, nominal_pods={("team-b", "b1")})
            assert len(double.evictions) == 1

    asyncio.run(scenario())


def test_a_victim_a_pdb_protects_is_passed_over_and_the_plan_recomputed_without_it():
    objs = world()
    req = ask()
    eng = engine()
    plan = plan_for(objs, req, eng)
    assert plan.victims[0].name == "b2"
    asked = []

    async def replan(rec, excluded):
        asked.append(excluded)
        from tests.policy.builders import snapshot
        return decide_without(eng.policy_set, snapshot(*objs), rec.request, excluded, set(), 1000.0)

    async def scenario():
        async with double_api() as (double, api):
            store(double, [*objs, pdb("keep-b2", "team-b", {"app": "b2"})])
            requester(double)
            c = await controller(api, replan=replan)
            await record(c, "uid-5", req, plan)
            await c.step()
            assert asked == [{("team-b", "Pod", "b2")}]
            # b1 would leave team-b at its nominal 8 once b2 stays: the replan takes b1 instead.
            assert [(ns, n) for ns, n, _ in double.evictions] == [("team-b", "b1")]
            (rec,) = await c.store.all()
            assert [s["state"] for s in rec.steps] == ["unavailable", "done"] and rec.phase == "done"
            assert "PodDisruptionBudget" in rec.steps[0]["note"] and rec.status["replans"] == 1
            assert ("pods", "team-b", "b2") in double.objects

    asyncio.run(scenario())


def test_when_no_other_victim_lets_it_land_the_plan_fails_with_an_event_on_the_requester():
    objs, req, plan = case()

    async def no_plan(rec, excluded):
        return None, "no workload may give way"

    async def scenario():
        async with double_api() as (double, api):
            store(double, [*objs, pdb("keep-all", "team-b", {})])
            requester(double)
            c = await controller(api, replan=no_plan)
            await record(c, "uid-6", req, plan)
            await c.step()
            assert double.evictions == []
            (rec,) = await c.store.all()
            assert rec.phase == "failed" and "PodDisruptionBudget" in rec.status["message"]
            (event,) = double.items("events", "team-a")
            assert event["reason"] == "ReclaimFailed" and event["involvedObject"]["name"] == "new"

    asyncio.run(scenario())


def test_a_plan_whose_request_was_never_stored_is_abandoned_and_a_late_one_expires():
    objs, req, plan = case()
    clock = [1000.0]

    async def scenario():
        async with double_api() as (double, api):
            store(double, objs)
            c = await controller(api, now=lambda: clock[0])
            await record(c, "uid-7", req, plan)  # Pod team-a/new is never created
            await c.step()
            assert (await c.store.all())[0].phase == "pending"  # waits for it a while
            clock[0] += WAIT_REQUESTER + 1
            await c.step()
            assert (await c.store.all())[0].phase == "abandoned"
            late = new_record(NS, "uid-8", plan.to_json(), req, "r0", clock[0] - PLAN_TTL - 1)
            await c.store.create(late)
            await c.step()
            assert {r.name: r.phase for r in await c.store.all()}[late.name] == "expired"
            assert double.evictions == []

    asyncio.run(scenario())


def test_audit_mode_logs_the_plan_and_writes_nothing(caplog):
    objs, req, plan = case()

    async def scenario():
        async with stocked(objs) as (double, api):
            c = ReclaimController(api, NS, mode="audit", name="r0")
            writes = double.writes
            with caplog.at_level("INFO", logger="allot.reclaim"):
                await c.admitted("uid-9", req, plan)
                await c.run()  # returns at once: nothing to lead
            assert double.writes == writes and double.evictions == [] and double.items("leases") == []
            assert any("reclaim audit" in r.message and '"b2"' in r.message for r in caplog.records)

    asyncio.run(scenario())


def test_a_replica_that_does_not_lead_carries_nothing_out():
    objs, req, plan = case()

    async def scenario():
        async with stocked(objs) as (double, api):
            leader = await controller(api, "leader")
            other = ReclaimController(api, NS, mode="on", name="other")
            assert not await other.elector.tick()
            await other.admitted("uid-10", req, plan)  # any replica records
            assert await other.step() == 0 and double.evictions == []
            assert await leader.step() == 1 and len(double.evictions) == 1

    asyncio.run(scenario())
