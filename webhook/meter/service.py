"""One meter for the cluster: every replica meters the same pods, one of them writes `allot-meter`, the others adopt it.

Each replica's BudgetMeter (policy/budget/meter.py) integrates the pods it watches, at the API
server's time (the `Date` of its answers: webhook/meter/clock.py). Every POLL seconds a replica
reads the meter object; whenever its resourceVersion is not the one this replica last wrote or
read, it adopts the stored values: each budget becomes the stored use at the stored time plus its
own exact accrual since (the meter keeps its recent rate changes), so nothing that ran around
the write is lost or counted twice. The object names its `writer`; that replica writes every
FLUSH seconds, conditional on the resourceVersion it read (compare-and-swap). A replica takes
over when the object is missing or its last write is older than LEASE; two taking over at once
race on the resourceVersion and one gets 409 and stands by. So the meter is written at most
once per FLUSH by its writer (every budget in one write), and a crash loses nothing while another
replica runs (it has metered the same pods all along); when every replica is down, pods that
ended meanwhile are not metered after the last write (docs/budgets.md, "What a crash loses").
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import uuid
from typing import Any

from webhook.ledger.apiclient import ApiError
from webhook.meter import store
from webhook.meter.clock import ServerClock

log = logging.getLogger("allot.meter")
FLUSH = 10.0  # seconds between the writer's writes: every budget at most once per FLUSH
POLL = 5.0  # seconds between reads of the meter object
LEASE = 30.0  # a writer silent this long is replaced
CALL_TIMEOUT = (3.0, 10.0)


class MeterService:
    """The loop task sharing this replica's budget meter through the `allot-meter` ConfigMap in `namespace`."""

    def __init__(self, state: Any, namespace: str, api: Any, clock: ServerClock, identity: str | None = None) -> None:
        self.state = state
        self.namespace = namespace
        self.api = api  # a webhook/meter/api.py DatedApi (or anything with get/create/replace_config_map)
        self.clock = clock
        self.identity = identity or f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        self.meter = None  # the BudgetMeter bound now
        self.bound: tuple = (None, None)  # (engine, snapshot) it was bound for
        self.seen_rv: str | None = None  # the object's resourceVersion this replica last wrote or adopted
        self.stored: store.Stored | None = None
        self.last_write = None  # server ms of this replica's last write
        self.writes = {"ok": 0, "conflict": 0, "error": 0}
        self.problems: dict[str, int] = {}
        self.adoptions: dict[str, int] = {}

    # -- binding to the engine serving now --

    def bind(self) -> bool:
        """Attach to the current engine's meter over the current snapshot (after a reload: it inherits the old one's use)."""
        engine, snapshot = self.state.engine, self.state.snapshot
        if (engine, snapshot) == self.bound:
            return self.meter is not None
        state_for = getattr(engine, "state_for", None)
        if state_for is None or snapshot is None:
            return False
        t = self.clock.now_ms()
        meter = state_for(snapshot).meter_at(t, clock=self.clock.now_ms)
        if meter is not None:
            meter.clock = self.clock.now_ms
            if self.meter is not None and self.meter is not meter:
                kept = meter.inherit(self.meter, t)
                log.info("budget meter: %d budget(s) kept across the policy reload", len(kept))
        self.meter, self.bound = meter, (engine, snapshot)
        self.seen_rv = None  # adopt the stored values again into the new meter
        return meter is not None

    # -- one round --

    async def run(self) -> None:
        """Read, adopt and write every POLL seconds until cancelled."""
        while True:
            try:
                await self.tick()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - API trouble: the local meter runs on; tried again next round
                self.writes["error"] += 1
                log.warning("budget meter: %s: %s", type(exc).__name__, str(exc)[:200])
            await asyncio.sleep(POLL)

    async def tick(self) -> str:
        """One round: what it did (`idle`, `adopted`, `wrote`, `conflict`, `standby`)."""
        if not self.bind():
            return "idle"
        stored = store.decode(await self.api.get_config_map(self.namespace, store.NAME, CALL_TIMEOUT))
        now = self.clock.now_ms()
        did = "standby"
        if stored is not None and stored.rv != self.seen_rv:
            if not self._gated(self._adopt, stored, now):
                return "idle"  # a decision thread holds the meter: next round
            did = "adopted"
        self.stored = stored
        if self.meter is None:
            return did
        mine = stored is None or stored.writer == self.identity or stored.at is None
        stale = stored is not None and stored.at is not None and now - stored.at >= LEASE * 1000
        due = self.last_write is None or now - self.last_write >= FLUSH * 1000
        if (mine or stale) and due:
            return await self._write(stored, now)
        return did

    def _gated(self, fn, *args) -> bool:
        gate = getattr(self.state, "gate", None)
        if gate is None:
            fn(*args)
            return True
        if not gate.try_enter():
            return False
        try:
            fn(*args)
        finally:
            gate.leave()
        return True

    def _adopt(self, stored: store.Stored, now: int) -> None:
        """Take every readable entry of `stored` into the meter (another replica's write, a hand edit, a restart)."""
        self.seen_rv = stored.rv
        for p in stored.problems:
            self.problems[p.split(":")[0]] = self.problems.get(p.split(":")[0], 0) + 1
            log.warning("budget meter object %s/%s: %s; this replica's value stands and the next write replaces it",
                        self.namespace, store.NAME, p)
        if self.meter is None or stored.at is None:
            return
        for name, e in stored.entries.items():
            how = self.meter.adopt(name, e.period, e.used, stored.at, now, e.previous)
            self.adoptions[how] = self.adoptions.get(how, 0) + 1
            if how == "unknown":
                log.info("budget meter: %s is in the meter object but no budget declares it (renamed or removed): kept as it is", name)

    async def _write(self, stored: store.Stored | None, now: int) -> str:
        values = {}
        if not self._gated(lambda: values.update(self.meter.snapshot_values(now))):
            return "idle"
        body = store.encode(self.namespace, self.identity, now, values, stored)
        try:
            if stored is None:
                if self.seen_rv is not None:
                    log.warning("budget meter object %s/%s is gone: written again from this replica's meter", self.namespace, store.NAME)
                out = await self.api.create_config_map(self.namespace, body, CALL_TIMEOUT)
            else:
                out = await self.api.replace_config_map(self.namespace, store.NAME, body, CALL_TIMEOUT)
        except ApiError as exc:
            if exc.status in (409, 404):  # another writer, a hand edit or a delete since the read: read again next round
                self.writes["conflict"] += 1
                return "conflict"
            raise
        self.writes["ok"] += 1
        self.seen_rv = (out.get("metadata") or {}).get("resourceVersion")
        self.stored = store.decode(out)
        self.last_write = now
        self._gated(self.meter.wrote, now)
        return "wrote"


def start_meter(state: Any, api_client: Any, namespace: str, tasks: list) -> MeterService | None:
    """Share the budget meter through `namespace` (serve --ledger): set `state.meter` and add its task; None when the client cannot."""
    from webhook.meter.api import dated_api

    clock = ServerClock()
    api = dated_api(api_client, clock)
    if api is None:
        return None
    api.keep()
    state.meter = MeterService(state, namespace, api, clock)
    tasks.append(state.meter.run)
    registry = getattr(getattr(state, "metrics", None), "registry", None)
    if registry is not None:
        from webhook.meter.metrics import BudgetCollector

        registry.register(BudgetCollector(state.meter))
    return state.meter
