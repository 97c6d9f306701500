"""`allot serve --reclaim on|audit`: plans recorded at admission, carried out by the one replica holding the Lease.

- Every replica, on admitting (validating, not dryRun) a request with a plan, records it
  (records.py) before the answer leaves, so whichever replica leads finds it.
- Every replica runs for the Lease (lease.py); the leader lists open records every `poll`
  seconds (at once when it recorded one itself) and runs each through the executor.
- `audit`: the plan is logged (logger `allot.reclaim`, one JSON line) and nothing is written
  or evicted, so a team can see what reclaim would do before turning it on.
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import socket
import time

import orjson

from webhook.ledger.apiclient import ApiError
from webhook.reclaim.executor import Executor
from webhook.reclaim.kube import Kube
from webhook.reclaim.lease import LeaderElector
from webhook.reclaim.records import PlanStore, new_record

log = logging.getLogger("allot.reclaim")
MODES = ("off", "audit", "on")
RECORD_TIMEOUT = 2.0  # seconds an admission waits for its plan's record before answering anyway (the plan is then lost)


def identity() -> str:
    """This replica's name in the Lease: the Pod's (hostname), its pid, a random suffix (a restart is a new candidate)."""
    return f"{os.environ.get('POD_NAME') or socket.gethostname()}_{os.getpid()}_{secrets.token_hex(3)}"


class ReclaimController:
    """Records admitted plans and, while leading, carries them out (`mode` on) or only logs them (`audit`)."""

    def __init__(self, api, namespace: str, *, mode: str = "on", replan=None, lease_seconds: float = 15.0,
                 poll: float = 0.5, name: str | None = None, wall=time.time) -> None:
        if mode not in ("audit", "on"):
            raise ValueError(f"reclaim mode {mode!r}: audit or on")
        self.mode, self.namespace, self.poll, self.wall = mode, namespace, poll, wall
        self.kube = Kube(api)
        self.store = PlanStore(self.kube, namespace)
        self.elector = LeaderElector(self.kube, namespace, name or identity(), duration=lease_seconds,
                                     renew_deadline=lease_seconds * 2 / 3)
        self.retry = max(0.2, lease_seconds / 7.5)  # client-go's 15 s lease renews every 2 s
        pause = float(os.environ.get("ALLOT_RECLAIM_STEP_PAUSE") or 0)  # testing only: a window between steps
        self.executor = Executor(self.kube, self.store, self.elector, replan=replan, wall=wall, pause=pause)
        self.wake = asyncio.Event()
        self.recorded = 0
        self.failed_records = 0

    async def admitted(self, uid: str, request: dict | None, plan) -> None:
        """An admitted plan (validating, not dryRun): record it (`on`) or log it (`audit`); never raises."""
        doc = plan.to_json()
        if self.mode == "audit":
            log.info("reclaim audit: %s", orjson.dumps({"uid": uid, "plan": doc}).decode())
            return
        record = new_record(self.namespace, uid, doc, request, self.elector.identity, self.wall())
        try:
            await asyncio.wait_for(self.store.create(record), RECORD_TIMEOUT)
            self.recorded += 1
            self.wake.set()
        except ApiError as exc:
            if exc.status != 409:  # 409: recorded already (the API server retried this request)
                self.failed_records += 1
                log.error("reclaim: plan %s not recorded: %s %s", record.name, exc.status, exc.reason)
        except Exception as exc:  # noqa: BLE001 - the admission is answered regardless; the plan is then not carried out
            self.failed_records += 1
            log.error("reclaim: plan %s not recorded: %s: %s", record.name, type(exc).__name__, str(exc)[:200])

    async def step(self) -> int:
        """One round while leading: every open record moved as far as it goes; how many were looked at."""
        if self.mode != "on" or not self.elector.leading():
            return 0
        records = await self.store.open()
        for record in records:
            if not self.elector.leading():
                break
            await self.executor.run(record)
        return len(records)

    async def run(self) -> None:
        """The background task: run for the Lease, carry plans out while leading, until cancelled."""
        if self.mode != "on":
            return  # audit: nothing is led, written or evicted
        last_tick = -1e9
        self.kube.api.keep()
        try:
            while True:
                if time.monotonic() - last_tick >= self.retry:
                    last_tick = time.monotonic()
                    await self.elector.tick()
                try:
                    await self.step()
                except Exception as exc:  # noqa: BLE001 - an API error: the next round tries again
                    log.warning("reclaim round: %s: %s", type(exc).__name__, str(exc)[:300])
                self.wake.clear()
                try:
                    await asyncio.wait_for(self.wake.wait(), min(self.poll, self.retry))
                except TimeoutError:
                    pass
        finally:
            await self.elector.release()
            await self.kube.api.close()

    def detail(self) -> dict:
        """What `/readyz` shows: mode, the Lease holder as last read, whether this replica leads, what it did."""
        return {"mode": self.mode, "namespace": self.namespace, "identity": self.elector.identity,
                "leading": self.elector.leading(), "holder": self.elector.holder(), "recorded": self.recorded,
                "failed_records": self.failed_records, "evicted": len(self.executor.evicted),
                "suspended": len(self.executor.suspended)}
