"""The reservation ledger in the Kubernetes API: quota holds committed with a compare-and-swap before "allowed".

Each replica keeps quota holds in the snapshot's `ReservationLedger` (policy/cluster/ledger.py);
alone, that makes one process exact. With several replicas, every hold a decision
takes is also written to a ConfigMap (`allot-ledger-<root>`, one per quota root: the
cohort, or the quota id of a quota outside any cohort) with `resourceVersion` set, so
the write succeeds only if nobody changed the shard since this replica last read it.
On a 409 the replica re-reads the shard, mirrors the other replicas' holds into its
own ledger, and the request is decided again. Concurrent requests' holds for one shard
are grouped into a single write (one in flight per shard; the rest queue behind it).

A hold is dropped from a shard when it expires (`RESERVATION_TTL`), or once the pod
exists and has for `SETTLE` seconds (time for every replica's watch to show it).
Holds written by a replica that died stay until then: nothing is leaked past expiry.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import re
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import orjson

log = logging.getLogger("allot.ledger")
PREFIX = "allot-ledger-"
LABEL = "allot.dev/ledger"
SETTLE = 15.0  # seconds a hold outlives the pod's appearance: every replica's watch shows the pod by then
MAX_HOLDS = 4000  # per shard: ~200 bytes each keeps a ConfigMap far below its 1 MiB limit
MAX_ATTEMPTS = 16  # decisions of one request before a conflict storm answers with --on-error
PRUNE_INTERVAL = 5.0
LINGER = 0.001  # seconds a write waits for more holds to group (a burst's requests are on the loop already)


class LedgerUnavailable(Exception):
    """A shard could not be written (API error, full shard); the request gets the --on-error decision."""


def shard_name(root: str) -> str:
    """The ConfigMap name of a quota root: readable where the id allows, always a valid DNS-1123 name."""
    slug = re.sub(r"[^a-z0-9-]+", "-", root.lower()).strip("-")[:40] or "x"
    digest = hashlib.sha256(root.encode()).hexdigest()[:8]
    return f"{PREFIX}{slug}-{digest}"


def quota_roots(engine: Any) -> dict[str, str]:
    """quota id (`quota NAME`) -> its root (`cohort NAME`, else the quota id) for `engine`'s policy set; {} for stand-in engines."""
    policy_set = getattr(engine, "policy_set", None)
    quotas = getattr(policy_set, "quotas", ()) or ()
    return {q.id: (f"cohort {q.cohort}" if q.cohort else q.id) for q in quotas}


@dataclass
class Shard:
    """One ConfigMap: its last known resourceVersion (None: not created yet) and holds by pod key."""

    name: str
    rv: str | None = None
    entries: dict[str, list] = field(default_factory=dict)  # key -> [expires_at, holds, replica, seen_at|None]
    pending: list = field(default_factory=list)  # (key, holds, expires_at, future)
    flushing: bool = False
    read_at: int = 0  # the ledger generation of the last read from the API
    pruned_at: float = 0.0  # when expired and settled holds were last looked for


class ClusterLedger:
    """Reads and writes the shards through a `kubernetes` ApiClient; mirrors other replicas' holds into `holds`."""

    def __init__(self, api_client: Any, namespace: str, *, state: Any, replica: str | None = None) -> None:
        import copy

        from kubernetes import client

        # Its own connection pool: the watcher's long-poll watches hold the shared client's
        # connections, and a ledger write must never wait for (or open) a connection.
        cfg = copy.copy(api_client.configuration)
        cfg.connection_pool_maxsize = 4
        self.core = client.CoreV1Api(client.ApiClient(cfg))
        self.namespace = namespace
        self.state = state
        self.replica = replica or uuid.uuid4().hex[:12]
        self.shards: dict[str, Shard] = {}
        self.remote: dict[str, dict[str, tuple]] = {}  # key -> shard name -> holds of another replica
        self.synced = False
        self.error: str | None = None
        self.roots: dict[str, str] = {}
        self._engine = None
        self.generation = 0  # bumped whenever a shard is read from the API: decisions older than a shard's read are stale

    # -- the view --

    @property
    def holds(self):
        """The snapshot's ReservationLedger every engine decides with."""
        return self.state.snapshot.reservations

    def root_of(self, qid: str) -> str:
        """The shard a quota's holds go to (the policy can change under a reload: recomputed per engine)."""
        engine = self.state.engine
        if engine is not self._engine:
            self.roots, self._engine = quota_roots(engine), engine
        return shard_name(self.roots.get(qid, qid))

    def _mirror(self, shard: Shard) -> None:
        """Make the local ledger hold what other replicas hold in `shard` (skipping pods the snapshot shows)."""
        ledger = self.holds
        snapshot = self.state.snapshot
        now = time.time()
        changed: set[str] = set()
        for key, (expires_at, holds, replica, _seen) in shard.entries.items():
            if replica == self.replica or expires_at <= now:
                continue
            per = self.remote.setdefault(key, {})
            held = tuple(tuple(h) for h in holds)
            if per.get(shard.name) != held:
                per[shard.name] = held
                changed.add(key)
        for key, per in list(self.remote.items()):
            entry = shard.entries.get(key)
            if shard.name in per and (entry is None or entry[2] == self.replica or entry[0] <= now):
                del per[shard.name]
                changed.add(key)
        for key in changed:
            per = self.remote.get(key) or {}
            if not per:
                self.remote.pop(key, None)
                ledger.release(key)
                continue
            ns, _, name = key.partition("/")
            if snapshot.pod(ns, name) is not None:
                continue  # the pod carries its own charge
            expires_at = min(self.shards[s].entries[key][0] for s in per)
            ledger.reserve(key, tuple(h for holds in per.values() for h in holds), expires_at)

    def _load(self, shard: Shard, cm: dict | None) -> None:
        self.generation += 1
        shard.read_at = self.generation
        if cm is None:
            shard.rv, shard.entries = None, {}
        else:
            shard.rv = (cm.get("metadata") or {}).get("resourceVersion")
            raw = (cm.get("data") or {}).get("holds") or "{}"
            try:
                entries = orjson.loads(raw)
            except orjson.JSONDecodeError:
                entries = {}
            shard.entries = {k: e for k, e in entries.items() if _well_formed(e)} if isinstance(entries, dict) else {}
        self._mirror(shard)

    # -- API calls (blocking client, run in threads) --

    def _get(self, name: str) -> dict | None:
        from kubernetes.client.rest import ApiException

        try:
            resp = self.core.read_namespaced_config_map(name, self.namespace, _preload_content=False)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return orjson.loads(resp.data)

    def _write(self, shard: Shard, entries: dict) -> dict:
        body = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": shard.name, "namespace": self.namespace, "labels": {LABEL: "reservations"}},
            "data": {"holds": orjson.dumps(entries).decode()},
        }
        if shard.rv is None:
            resp = self.core.create_namespaced_config_map(self.namespace, body, _preload_content=False)
        else:
            body["metadata"]["resourceVersion"] = shard.rv
            resp = self.core.replace_namespaced_config_map(shard.name, self.namespace, body, _preload_content=False)
        return orjson.loads(resp.data)

    async def start(self) -> None:
        """Read every shard once (readiness waits for it), retrying until the API answers."""
        while not self.synced:
            try:
                resp = await asyncio.to_thread(
                    self.core.list_namespaced_config_map, self.namespace, label_selector=f"{LABEL}=reservations",
                    _preload_content=False,
                )
                for cm in orjson.loads(resp.data).get("items") or []:
                    name = (cm.get("metadata") or {}).get("name", "")
                    self._load(self.shards.setdefault(name, Shard(name)), cm)
                self.synced, self.error = True, None
            except Exception as exc:  # noqa: BLE001 - not ready until read; retried
                self.error = f"{type(exc).__name__}: {exc}"[:300]
                log.warning("cannot read the reservation ledger: %s", self.error)
                await asyncio.sleep(1.0)

    async def run(self) -> None:
        """Background task: read the shards, then prune expired and settled holds while idle."""
        await self.start()
        while True:
            await asyncio.sleep(PRUNE_INTERVAL)
            now = time.time()
            for shard in list(self.shards.values()):
                if not shard.flushing and any(self._droppable(k, e, now) or self._newly_seen(k, e)
                                              for k, e in shard.entries.items()):
                    shard.pruned_at = 0.0
                    fut = asyncio.get_running_loop().create_future()
                    shard.pending.append((None, (), 0.0, fut, self.generation))
                    self._kick(shard)

    def _newly_seen(self, key: str, entry: list) -> bool:
        ns, _, name = key.partition("/")
        return (len(entry) < 4 or entry[3] is None) and self.state.snapshot.pod(ns, name) is not None

    def _droppable(self, key: str, entry: list, now: float) -> bool:
        if entry[0] <= now:
            return True
        seen = entry[3] if len(entry) > 3 else None
        return seen is not None and now - seen >= SETTLE

    def _pruned(self, shard: Shard, now: float) -> dict:
        """The shard's entries without expired holds and holds of pods shown for SETTLE seconds.

        A full pass (pod look-ups for every hold) runs at most once per PRUNE_INTERVAL per
        shard; in between a write only drops expired holds (a burst writes often).
        """
        if now - shard.pruned_at < PRUNE_INTERVAL:
            return {k: e for k, e in shard.entries.items() if e[0] > now}
        shard.pruned_at = now
        snapshot = self.state.snapshot
        out = {}
        for key, entry in shard.entries.items():
            if self._droppable(key, entry, now):
                continue
            ns, _, name = key.partition("/")
            if len(entry) < 4:
                entry = [*entry[:3], None]
            if entry[3] is None and snapshot.pod(ns, name) is not None:
                entry = [*entry[:3], now]  # first seen now: dropped SETTLE seconds later
            out[key] = entry
        return out

    # -- committing --

    async def commit(self, taken: list, timeout: float, view: int) -> bool:
        """Write `taken` [(key, holds, expires_at)] to their shards; True once all are in, False on a conflict.

        `view` is `generation` when the decision was made: a shard read since then holds
        holds the decision did not see, so it is answered False (decide again) unwritten.
        Raises LedgerUnavailable (or asyncio.TimeoutError) when a shard cannot be written in time.
        """
        if not self.synced:
            raise LedgerUnavailable("the reservation ledger has not been read yet")
        loop = asyncio.get_running_loop()
        by_shard: dict[str, dict[str, tuple]] = {}
        for key, holds, expires_at in taken:
            for h in holds:
                per = by_shard.setdefault(self.root_of(h[0]), {})
                old = per.get(key)
                per[key] = ((old[0] if old else ()) + (h,), expires_at)
        futures = []
        for name in sorted(by_shard):  # a fixed order: two requests spanning the same shards cannot starve each other
            shard = self.shards.setdefault(name, Shard(name))
            for key, (holds, expires_at) in by_shard[name].items():
                fut = loop.create_future()
                shard.pending.append((key, holds, expires_at, fut, view))
                futures.append(fut)
            self._kick(shard)
        results = await asyncio.wait_for(asyncio.gather(*futures), timeout)
        return all(results)

    def _kick(self, shard: Shard) -> None:
        if not shard.flushing:
            shard.flushing = True
            asyncio.get_running_loop().create_task(self._flush(shard))

    async def _flush(self, shard: Shard) -> None:
        """Write queued holds in groups, one write in flight per shard, until the queue is empty."""
        metrics = self.state.metrics
        try:
            while shard.pending:
                await asyncio.sleep(LINGER)  # requests already read decide meanwhile: their holds join this write
                batch, shard.pending = shard.pending, []
                stale = [b for b in batch if b[4] < shard.read_at]
                if stale:  # decided before the shard's last read: they did not see its holds
                    _settle(stale, False)
                    batch = [b for b in batch if b[4] >= shard.read_at]
                    if not batch:
                        continue
                now = time.time()
                entries = self._pruned(shard, now)
                for key, holds, expires_at, _, _ in batch:
                    if key is not None:
                        entries[key] = [expires_at, [list(h) for h in holds], self.replica, None]
                if len(entries) > MAX_HOLDS:
                    _settle(batch, LedgerUnavailable(f"ledger shard {shard.name} is full ({MAX_HOLDS} holds)"))
                    metrics.ledger_writes.labels("full").inc()
                    continue
                start = time.perf_counter()
                try:
                    cm = await asyncio.to_thread(self._write, shard, entries)
                except Exception as exc:  # noqa: BLE001 - classified below
                    status = getattr(exc, "status", None)
                    if status == 409:
                        metrics.ledger_writes.labels("conflict").inc()
                        try:
                            self._load(shard, await asyncio.to_thread(self._get, shard.name))
                        except Exception as reread:  # noqa: BLE001
                            log.warning("re-reading %s failed: %s", shard.name, reread)
                        _settle(batch, False)
                    else:
                        metrics.ledger_writes.labels("error").inc()
                        _settle(batch, LedgerUnavailable(f"writing {shard.name}: {type(exc).__name__}: {str(exc)[:200]}"))
                    continue
                metrics.ledger_writes.labels("ok").inc()
                metrics.ledger_write_seconds.observe(time.perf_counter() - start)
                shard.rv = (cm.get("metadata") or {}).get("resourceVersion")
                shard.entries = entries  # what was read plus this replica's holds: nothing to mirror
                _settle(batch, True)
        finally:
            shard.flushing = False


def _well_formed(entry: Any) -> bool:
    """An entry as `_flush` writes it; anything else (a hand edit, another version) is ignored, never a crash."""
    if not (isinstance(entry, list) and len(entry) == 4 and isinstance(entry[0], (int, float))
            and isinstance(entry[1], list) and isinstance(entry[2], str)):
        return False
    return all(isinstance(h, list) and len(h) == 5 and isinstance(h[0], str) and all(type(x) is int for x in (h[1], h[2], h[4]))
               and (h[3] is None or isinstance(h[3], str)) for h in entry[1])


def _settle(batch: list, result: Any) -> None:
    for *_, fut, _ in batch:
        if fut.done():
            continue
        if isinstance(result, BaseException):
            fut.set_exception(result)
        else:
            fut.set_result(result)


async def decide_committed(review, decision, doc, cause, *, mutate: bool, state, now: float, budget_end: float, redo):
    """Commit the holds a decision took before its "allowed" is sent; re-decide on a conflict.

    `redo()` decides again (with a fresh `review.taken`); `budget_end` is the perf_counter
    deadline. Returns (decision, doc, cause, attempts).
    """
    from webhook.server import review as rv

    ledger = state.ledger
    attempts = 0
    while review.taken and decision.allowed and cause is None:
        attempts += 1
        left = budget_end - time.perf_counter()
        taken = review.taken
        try:
            if left <= 0:
                raise asyncio.TimeoutError
            if await ledger.commit(taken, left, review.view):
                return decision, doc, cause, attempts
            outcome = "conflict"
        except (asyncio.TimeoutError, LedgerUnavailable) as exc:
            outcome = "timeout" if isinstance(exc, asyncio.TimeoutError) else "unavailable"
            message = str(exc) or f"the reservation ledger was not written within {max(left, 0):.2f}s"
        for key, _, _ in taken:
            ledger.holds.release(key)  # never answered "allowed": the hold must not count here
        if outcome != "conflict":
            return (*rv.failure(review, mutate=mutate, state=state, cause=f"ledger_{outcome}", message=message),
                    f"ledger_{outcome}", attempts)
        if attempts >= MAX_ATTEMPTS:
            msg = f"{attempts} conflicting writes to the reservation ledger"
            return (*rv.failure(review, mutate=mutate, state=state, cause="ledger_conflict", message=msg),
                    "ledger_conflict", attempts)
        decision, doc, cause = redo()
    return decision, doc, cause, attempts
