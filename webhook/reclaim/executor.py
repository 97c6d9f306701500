"""The state machine a leader runs over one plan record (records.py): steps moved by compare-and-swap, acted on in between.

pending plan ─ its requester exists? ─ no, past WAIT_REQUESTER ─▶ abandoned (the create never happened)
     │ older than PLAN_TTL before it started ─▶ expired (admission stopped counting its victims as going)
     ▼
running: for each victim in order: step pending ─CAS▶ acting ─(act.py)▶ done | gone | unavailable ─CAS▶
     every step settled ─ some unavailable (a PDB forbade it) ─ replan without them ─▶ new victims appended
                                               └─ no plan without them ─▶ failed (Event on the requester)
     └─ otherwise ─▶ done

A step is written `acting` before its victim is touched, so a leader that dies between the two
leaves `acting`, which the next leader does again (idempotent); a step already settled is never
acted on again, so no victim is evicted twice across a leader change.
"""

from __future__ import annotations

import asyncio
import logging
import time

from webhook.ledger.apiclient import ApiError
from webhook.reclaim.act import Retry, carry_out
from webhook.reclaim.kube import RESOURCES, Kube, path
from webhook.reclaim.records import PlanRecord, PlanStore

log = logging.getLogger("allot.reclaim")
PLAN_TTL = 120.0  # policy/reclaim/settle.py PLAN_TTL: after this an unstarted plan's victims no longer count as going
WAIT_REQUESTER = 30.0  # seconds a plan waits for its requesting object to be stored (the API server may still refuse it)
SETTLED = ("done", "gone", "unavailable")


class Executor:
    """Carries plan records out while `elector` leads; `replan(record, excluded)` gives (plan dict or None, why)."""

    def __init__(self, kube: Kube, store: PlanStore, elector, *, replan=None, wall=time.time, pause: float = 0.0) -> None:
        self.kube, self.store, self.elector, self.replan, self.wall = kube, store, elector, replan, wall
        self.pause = pause  # seconds between steps (ALLOT_RECLAIM_STEP_PAUSE: the e2e kills a leader there, mid-plan)
        self.evicted: list[tuple] = []  # (namespace, name, uid) of every pod this replica evicted (metrics, tests)
        self.suspended: list[tuple] = []  # (kind, namespace, name) this replica suspended

    async def run(self, record: PlanRecord) -> PlanRecord | None:
        """Move `record` as far as it goes now; the record as last written (None: lost a race, read again later)."""
        try:
            return await self._run(record)
        except Retry as exc:
            log.info("reclaim plan %s: %s (tried again)", record.name, exc)
        except ApiError as exc:
            if exc.status != 409:
                log.warning("reclaim plan %s: %s %s", record.name, exc.status, exc.reason)
        return None

    async def _run(self, record: PlanRecord) -> PlanRecord | None:
        now = self.wall()
        if record.phase == "pending":
            age = now - float(record.status.get("recorded") or now)
            if age > PLAN_TTL:
                return await self._finish(record, "expired", f"not started within {PLAN_TTL:.0f}s of admission")
            exists = await self._requester_exists(record)
            if exists is False:
                if age > WAIT_REQUESTER:
                    return await self._finish(record, "abandoned", f"{record.plan.get('workload')} was never stored")
                return record
            record.status["phase"] = "running"
            record = await self.store.swap(record)
        while True:
            for i, victim in enumerate(record.plan.get("victims") or ()):
                if record.steps[i].get("state") in SETTLED:
                    continue
                if not self.elector.leading():
                    return record
                record.steps[i] = {"state": "acting", "by": self.elector.identity, "epoch": self.elector.transitions, "at": now}
                record = await self.store.swap(record)  # the fence: a 409 here means another leader moved the plan
                evicted: list = []
                state, note = await carry_out(self.kube, record, i, victim, self.elector.identity, self.wall(), evicted)
                self.evicted.extend(evicted)
                if state == "done" and victim.get("action") == "suspend":
                    self.suspended.append((victim.get("kind"), victim.get("namespace"), victim.get("name")))
                record = await self._settle(record, i, {"state": state, "by": self.elector.identity,
                                                        "epoch": self.elector.transitions, "at": self.wall(), "note": note})
                if self.pause:
                    await asyncio.sleep(self.pause)
            blocked = [i for i, s in enumerate(record.steps) if s.get("state") == "unavailable" and not s.get("replanned")]
            if not blocked:
                return await self._finish(record, "done", _summary(record))
            record = await self._replan(record, blocked)
            if record.phase != "running":
                return record

    async def _settle(self, record: PlanRecord, i: int, step: dict) -> PlanRecord:
        """Write a step's outcome; on a conflict read again and write it while that step is still `acting`."""
        for _ in range(5):
            record.steps[i] = step
            try:
                return await self.store.swap(record)
            except ApiError as exc:
                if exc.status != 409:
                    raise
            fresh = await self.store.read(record.name)
            if fresh is None or fresh.steps[i].get("state") != "acting":
                raise Retry(f"step {i} was settled by another leader")
            record = fresh
        raise Retry(f"step {i}: the record kept changing")

    async def _replan(self, record: PlanRecord, blocked: list[int]) -> PlanRecord:
        victims = record.plan.get("victims") or []
        excluded = {(v["namespace"], v["kind"], v["name"]) for v, s in zip(victims, record.steps) if s.get("state") == "unavailable"}
        names = ", ".join(f"{victims[i]['kind']} {victims[i]['namespace']}/{victims[i]['name']}" for i in blocked)
        plan, why = (None, "the admission request was not kept") if self.replan is None or record.request is None else \
            await self.replan(record, excluded)
        for i in blocked:
            record.steps[i]["replanned"] = True
        if plan is None or not plan.get("victims"):
            message = f"{names} may not be evicted (PodDisruptionBudget) and no other plan lets {record.plan.get('workload')} land: {why}"
            await self._requester_event(record, "ReclaimFailed", message)
            return await self._finish(record, "failed", message)
        fresh = plan["victims"]
        log.info("reclaim plan %s: %s unavailable, replanned with %d other victim(s)", record.name, names, len(fresh))
        record.plan["victims"] = victims + fresh
        record.plan["freed"] = int(record.plan.get("freed") or 0) + int(plan.get("freed") or 0)
        record.steps.extend({"state": "pending", "replaces": names} for _ in fresh)
        record.status["replans"] = int(record.status.get("replans") or 0) + 1
        return await self.store.swap(record)

    async def _finish(self, record: PlanRecord, phase: str, message: str) -> PlanRecord:
        record.status.update(phase=phase, message=message, finished=self.wall())
        log.info("reclaim plan %s %s: %s", record.name, phase, message)
        return await self.store.swap(record)

    async def _requester_exists(self, record: PlanRecord) -> bool | None:
        """Whether the object the plan admits is stored (None: it has no name to look up, e.g. generateName)."""
        req = record.request or {}
        obj = req.get("object") or {}
        name = req.get("name") or (obj.get("metadata") or {}).get("name")
        kind = (req.get("kind") or {}).get("kind") or obj.get("kind")
        if not name or kind not in RESOURCES:
            return None
        api_version, plural = RESOURCES[kind]
        return await self.kube.get(path(api_version, plural, req.get("namespace") or "default", name)) is not None

    async def _requester_event(self, record: PlanRecord, reason: str, message: str) -> None:
        req = record.request or {}
        obj = req.get("object") or {}
        name = req.get("name") or (obj.get("metadata") or {}).get("name")
        if not name:
            return
        ns = req.get("namespace") or "default"
        body = {"apiVersion": "v1", "kind": "Event", "metadata": {"name": f"{name[:180]}.{record.name[-40:]}-failed", "namespace": ns},
                "involvedObject": {"apiVersion": obj.get("apiVersion") or "v1", "kind": obj.get("kind") or "Pod", "namespace": ns,
                                   "name": name}, "reason": reason, "message": message[:1000], "type": "Warning", "count": 1,
                "source": {"component": "allot-reclaim"}, "reportingComponent": "allot.dev/reclaim",
                "reportingInstance": self.elector.identity[:128]}
        try:
            await self.kube.create(path("v1", "events", ns), body)
        except ApiError as exc:
            if exc.status != 409:
                log.warning("reclaim: event for %s/%s: %s", ns, name, exc.status)


def _summary(record: PlanRecord) -> str:
    counts: dict[str, int] = {}
    for s in record.steps:
        counts[s.get("state", "?")] = counts.get(s.get("state", "?"), 0) + 1
    return ", ".join(f"{n} {state}" for state, n in sorted(counts.items()))
