"""The reservation ledger in the Kubernetes API: quota holds committed with a compare-and-swap before "allowed".

Each replica keeps quota holds in the snapshot's `ReservationLedger` (policy/cluster/ledger.py);
alone, that makes one process exact. With several replicas, every hold a decision
takes is also written to a ConfigMap (`allot-ledger-<root>`, one per quota root: the
cohort, or the quota id of a quota outside any cohort) with `resourceVersion` set, so
the write succeeds only if nobody changed the shard since this replica last saw it
(else 409). Every replica also WATCHES the shards, so it mirrors the other
replicas' holds into its own ledger as soon as they are written, not only after a
conflict. A decision made before a shard brought in new holds of another replica is
decided again unwritten; on a 409 the request is decided again too.
Concurrent requests' holds for one shard are grouped into a single write: one write
in flight per shard, and every hold decided meanwhile goes in the next one (the
group grows with the load, with no fixed wait).

A hold is dropped from a shard when it expires (`RESERVATION_TTL`), or once the pod
exists and has for `SETTLE` seconds (time for every replica's watch to show it).
Holds written by a replica that died stay until then: nothing is leaked past expiry.

Workload holds (`wl:ns/Kind/name`: an admitted Deployment, Job, ... holding its whole
quota until its pods come) are in the shards too, shared by every replica: any replica
answering a member pod takes the pod's share from the workload's entry in the same
compare-and-swap as the pod's own hold, as a delta applied to the entry as written
(webhook/ledger/workloads.py); a take the entry no longer covers is decided again. A
replica counts such an entry as the shard holds it plus its own changes not written
yet. Releases (scale down, DELETE, suspension) are written after the answer (releasing
late only over-counts); a release seen by the watch is remembered and the entry pruned.

`ClusterLedger` is this module's writing side (commit, the grouped writes, releases) with
three parts mixed in: the reading side (webhook/ledger/mirror.py), slices
(webhook/ledger/escrow.py) and the peer channel (webhook/ledger/peers.py).
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import logging
import re
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import orjson

from policy.blocks.holdbook import book_of
from policy.cluster.ledger import RELEASES, WORKLOAD_PREFIX, GangChange, WorkloadChange
from webhook.ledger import apiclient
from webhook.ledger import gangs as ledger_gangs
from webhook.ledger import workloads as ledger_ops
from webhook.ledger.admitted import SETTLE  # (re-exported: seconds a hold outlives its pod's appearance)
from webhook.ledger.escrow import Escrow
from webhook.ledger.shardapi import CALL_TIMEOUT, LABEL, SELECTOR, WATCH_SECONDS, ShardApi, _gated, _post  # noqa: F401 (re-exported)
from webhook.ledger.mirror import Mirror, _entries, _settle, _well_formed, newer  # noqa: F401 (re-exported)
from webhook.ledger.peers import Peering

log = logging.getLogger("allot.ledger")
PREFIX = "allot-ledger-"
MAX_HOLDS = 4000  # per shard: ~100 bytes each keeps a ConfigMap far below its 1 MiB limit
MAX_ATTEMPTS = 16  # decisions of one request before a conflict storm answers with --on-error
RELEASE_TRIES = 16  # writes of a release (never awaited) before it is left to the entry's expiry
PRUNE_INTERVAL = 5.0


class LedgerUnavailable(Exception):
    """A shard could not be written (API error, full shard); the request gets the --on-error decision."""


@functools.lru_cache(maxsize=4096)  # asked per hold of every request: the slug and digest once per root
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
    entries: dict[str, list] = field(default_factory=dict)  # key -> [expires_at, holds, replica, seen_at|None(, workload fields)]
    text: str | None = None  # the `holds` value last read or written: an event carrying the same is not parsed again
    pending: list = field(default_factory=list)  # (key, holds, expires_at, future, view)
    flushing: bool = False
    read_at: int = 0  # the ledger generation when a read last brought in another replica's holds
    pruned_at: float = 0.0  # when expired and settled holds were last looked for
    write_s: float = 0.002  # moving mean of this replica's successful writes, seconds
    changed: asyncio.Event | None = None  # set when a read (the watch, a get) moves the shard to a newer version
    # Escrow: this replica's slice as last written (quota id -> milli-GPU) and what admissions spent of it.
    slice: dict[str, int] = field(default_factory=dict)
    slice_exp: float = 0.0
    slice_at: float = 0.0  # when the slice was written
    spent: dict[str, int] = field(default_factory=dict)
    unrecorded: dict[str, tuple] = field(default_factory=dict)  # key -> (holds, expires_at): admitted in the slice, not written
    flight: dict | None = None  # the write in flight: {"slice", "exp", "spent", "recorded"}
    used_at: float = 0.0  # the last commit of a hold to this shard (an idle slice is returned)
    rate: float = 0.0  # milli-GPU per second this replica admitted inside its last slice here (sizes the next, with peers)
    wanting: int = 0  # requests of this replica waiting for other replicas' slices (a want entry is written)
    want_exp: float = 0.0


@dataclass(eq=False)
class Changes:
    """One request's part of a shard with workload changes: its pod holds and changes, written together or not at all."""

    puts: dict[str, tuple]  # pod key -> (holds, expires_at)
    changes: list  # (seq, WorkloadChange with holds of this shard only, the request's WorkloadChange it is part of)
    release: bool = False  # only releases: written after the answer, retried on a conflict
    tries: int = 0
    gangs: list = field(default_factory=list)  # GangChange: gang domains newly held (the gangs shard only)
    gang_drops: list = field(default_factory=list)  # (entry key, its expires_at): a released gang's entry, dropped if still that one


class ClusterLedger(ShardApi, Mirror, Escrow, Peering):
    """Lists and watches the shards through a `kubernetes` ApiClient, gets and writes them on the loop (apiclient.py); mirrors other replicas' holds into `holds`."""

    _new_shard = Shard

    def __init__(self, api_client: Any, namespace: str, *, state: Any, replica: str | None = None,
                 escrow: bool | None = None) -> None:
        import copy

        from kubernetes import client

        # Its own connection pool: the watcher's long-poll watches hold the shared client's
        # connections, and a ledger write must never wait for (or open) a connection.
        cfg = copy.copy(api_client.configuration)
        cfg.connection_pool_maxsize = 4
        self.core = client.CoreV1Api(client.ApiClient(cfg))
        # Shard gets and writes on this loop (webhook/ledger/apiclient.py); None: through `core` in threads.
        self.api = apiclient.for_client(self.core.api_client)
        self.namespace = namespace
        self.state = state
        self.replica = replica or uuid.uuid4().hex[:12]
        self.shards: dict[str, Shard] = {}
        self.remote: dict[str, dict[str, tuple]] = {}  # key (a slice's: key@shard) -> shard name -> (holds, expiry) of another replica
        self.sums: set[str] = set()  # the keys of `remote` that are other replicas' slice-pod sums (looked at on every keeper tick)
        self.synced = False
        self.error: str | None = None
        self.roots: dict[str, str] = {}
        self._engine = None
        self.generation = 0  # bumped whenever a read brings in another replica's holds: older decisions are stale
        self.list_rv: str | None = None  # the collection's resourceVersion the watch resumes from
        self.watch_events = 0
        self.relists = 0  # full lists of the shards: the first read, then one per expired (410) watch
        import os

        self.escrow = os.environ.get("ALLOT_LEDGER_ESCROW", "") == "1" if escrow is None else escrow  # (serve: --ledger-escrow)
        self._escrow_setup()
        self._peering_setup()
        self.seq = 0  # numbers this replica's workload changes (an entry's `seq` shows the last one written)
        self.unlanded: dict[tuple[str, str], list] = {}  # (shard, workload key) -> [(seq, change)] not written yet
        self.deferred: set[str] = set()  # gang entries read before the cluster state was listed
        self.mirrored: dict[str, object] = {}  # gang entry key -> the plan held here as another replica wrote it
        self.clashes: set[str] = set()  # gang entries another replica wrote while this one held its own plan of the gang
        self._stopped = threading.Event()

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

    # -- reading: the first list, then the watch (what a read brings in: mirror.py) --

    async def start(self) -> None:
        """Read every shard once (readiness waits for it), retrying until the API answers."""
        while not self.synced:
            try:
                items, rv = await asyncio.to_thread(self._list)
                _gated(self.state, self._relisted, items, rv)
                self.synced, self.error = True, None
            except Exception as exc:  # noqa: BLE001 - not ready until read; retried
                self.error = f"{type(exc).__name__}: {exc}"[:300]
                log.warning("cannot read the reservation ledger: %s", self.error)
                await asyncio.sleep(1.0)

    async def run(self) -> None:
        """Background task: read the shards, watch them, and prune expired and settled holds while idle."""
        await self.start()
        if self.api is not None:
            self.api.keep()  # (closed below: a ledger that never runs, or before its first read, opens a connection per request)
        loop = asyncio.get_running_loop()
        thread = threading.Thread(target=self._watch_thread, args=(loop,), name="allot-ledger-watch", daemon=True)
        thread.start()
        keeper = loop.create_task(self.keep_slices()) if self.escrow else None  # claim, renew, return slices
        try:
            while True:
                await asyncio.sleep(PRUNE_INTERVAL)
                if self.deferred and self.state.cluster.synced:
                    _gated(self.state, self._mirror_deferred)
                now = time.time()
                for shard in list(self.shards.values()):
                    if not shard.flushing and any(self._droppable(k, e, now) or self._newly_seen(k, e)
                                                  for k, e in shard.entries.items()):
                        shard.pruned_at = 0.0
                        fut = loop.create_future()
                        shard.pending.append((None, (), 0.0, fut, float("inf")))  # a prune is never stale
                        self._kick(shard)
        finally:
            self._stopped.set()
            if keeper is not None:
                keeper.cancel()
            if self.api is not None:
                await self.api.close()

    def _kick_empty(self, shard: Shard, loop) -> None:
        """Queue a write with no hold of its own (a prune, a slice renewal or return), never stale."""
        shard.pending.append((None, (), 0.0, loop.create_future(), float("inf")))
        self._kick(shard)

    def _newly_seen(self, key: str, entry: list) -> bool:
        ns, _, name = key.partition("/")
        return entry[3] is None and self.state.snapshot.pod(ns, name) is not None

    def _droppable(self, key: str, entry: list, now: float) -> bool:
        if entry[0] <= now:
            return True
        if key.startswith(WORKLOAD_PREFIX):  # taken whole by its pods, or ended here (deleted, finished)
            return not entry[1] or book_of(self.holds).has_ended(key, ledger_ops.meta_of(entry).get("uid"))
        return entry[3] is not None and now - entry[3] >= SETTLE

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
            if entry[3] is None and snapshot.pod(ns, name) is not None:
                entry = [*entry[:3], now]  # first seen now: dropped SETTLE seconds later
            out[key] = entry
        return out

    # -- committing --

    async def commit(self, taken: list, timeout: float, view: int) -> bool:
        """Write `taken` [(key, holds, expires_at)] to their shards; True once all are in, False on a conflict.

        `view` is `generation` when the decision was made: a shard that has since brought in
        another replica's holds is answered False (decide again) unwritten.
        Raises LedgerUnavailable (or asyncio.TimeoutError) when a shard cannot be written in time.
        """
        if not self.synced:
            raise LedgerUnavailable("the reservation ledger has not been read yet")
        if self.deferred and self.state.cluster.synced:
            self._mirror_deferred()
        loop = asyncio.get_running_loop()
        by_shard, changes, gangs = self._parts(taken)
        if changes or gangs:  # workload holds, gang domains: the changes and the pod holds of each shard go in one write
            futures = []
            parts = self._split(changes, by_shard)
            if gangs:
                parts.setdefault(ledger_gangs.SHARD, Changes({}, [])).gangs.extend(gangs)
            for name, part in sorted(parts.items()):
                shard = self.shards.setdefault(name, Shard(name))
                if view < shard.read_at:
                    futures.append(_done(loop, False))
                    continue
                futures.append(self._queue(shard, part, view, loop))
            results = await asyncio.wait_for(asyncio.gather(*futures), timeout)
            return all(results)
        path = "plain"
        if self.escrow:
            now = time.time()
            for name in by_shard:
                self.shards.setdefault(name, Shard(name)).used_at = now
            path = await self.admit_in_slices(by_shard, now, loop, timeout)
            if path is None:
                return True
        start = time.perf_counter()
        futures = []
        for name in sorted(by_shard):  # a fixed order: two requests spanning the same shards cannot starve each other
            shard = self.shards.setdefault(name, Shard(name))
            if view < shard.read_at:  # stale already: no need to queue it
                futures.append(_done(loop, False))
                continue
            for key, (holds, expires_at) in by_shard[name].items():
                fut = loop.create_future()
                shard.pending.append((key, holds, expires_at, fut, view))
                futures.append(fut)
            self._kick(shard)
        results = await asyncio.wait_for(asyncio.gather(*futures), timeout)
        ok = all(results)
        self.escrow_metrics.commit.labels(path if ok else "conflict").observe(time.perf_counter() - start)
        return ok

    def _parts(self, taken: list) -> tuple[dict[str, dict[str, tuple]], list, list]:
        """`taken` in one pass: (shard name -> pod key -> (holds, expires_at), workload changes, gang changes)."""
        by_shard: dict[str, dict[str, tuple]] = {}
        changes: list = []
        gangs: list = []
        for item in taken:
            if type(item) is WorkloadChange:
                changes.append(item)
                continue
            if type(item) is GangChange:
                gangs.append(item)
                continue
            key, holds, expires_at = item
            for h in holds:
                per = by_shard.setdefault(self.root_of(h[0]), {})
                old = per.get(key)
                per[key] = ((old[0] if old else ()) + (h,), expires_at)
        return by_shard, changes, gangs

    def _split(self, changes: list, by_shard: dict, release: bool = False) -> dict[str, Changes]:
        """Shard name -> the part of `changes` (numbered) and of the pod holds `by_shard` it holds."""
        parts: dict[str, Changes] = {name: Changes(dict(per), [], release) for name, per in by_shard.items()}
        for change in changes:
            if change.op in ("shrink", "drop"):  # every shard holding the workload: measured there
                names = [n for n, sh in self.shards.items() if change.key in sh.entries or (n, change.key) in self.unlanded]
                split = {n: change for n in names}
            else:
                grouped: dict[str, list] = {}
                for h in change.holds:
                    grouped.setdefault(self.root_of(h[0]), []).append(h)
                split = {n: WorkloadChange(change.op, change.key, tuple(hs), change.expires_at, change.uid, change.demand,
                                           change.pod) for n, hs in grouped.items()}
            for name, one in split.items():
                self.seq += 1
                parts.setdefault(name, Changes({}, [], release)).changes.append((self.seq, one, change))
        return parts

    def _queue(self, shard: Shard, part: Changes, view: float, loop) -> asyncio.Future:
        """Queue `part` for `shard`'s next write; its changes count here until that write lands or fails."""
        for seq, change, origin in part.changes:
            self.unlanded.setdefault((shard.name, change.key), []).append((seq, change, origin))
        fut = loop.create_future()
        shard.pending.append((part, None, 0.0, fut, view))
        self._kick(shard)
        return fut

    def submit(self, releases: list) -> None:
        """Write workload releases (scale down, DELETE) in the background: the answer does not wait (late only over-counts).

        A release that ends the workload (DELETE, suspension: `drop`; a scale to zero) also
        drops its gang domain's entry from the gangs shard, if it is still the entry this
        replica saw (a workload re-created under the name meanwhile wrote another one).
        """
        if not self.synced:
            return
        loop = asyncio.get_running_loop()
        parts = self._split(releases, {}, release=True)
        gangs = self.shards.get(ledger_gangs.SHARD)
        for change in releases:
            if change.op != "drop" and not (change.op == "shrink" and change.demand and change.demand[0] <= 0):
                continue
            key = ledger_gangs.entry_key(change.key)
            entry = gangs.entries.get(key) if gangs is not None else None
            if entry is not None:
                parts.setdefault(ledger_gangs.SHARD, Changes({}, [], True)).gang_drops.append((key, entry[0]))
        for name, part in parts.items():
            fut = self._queue(self.shards.setdefault(name, Shard(name)), part, float("inf"), loop)
            fut.add_done_callback(_quiet)

    def undo(self, taken: list) -> None:
        """A decision never answered "allowed": drop its pod holds and its workload changes here (the shards never got them)."""
        ledger = self.holds
        keys = set()
        for item in taken:
            if type(item) is WorkloadChange:
                keys.add(item.key)
                continue
            if type(item) is GangChange:
                continue
            ledger.took.pop(item[0], None)  # recounted below from the shards: no give-back on top
            ledger.release(item[0])
        for change in (c for c in taken if type(c) is GangChange):
            planner = change.planner
            if planner is not None and planner.recall(change.key, time.time()) is change.result:
                planner.forget(change.key)  # not written: let go of it here, and hold the gang's domain if another replica wrote it
                shard = self.shards.get(ledger_gangs.SHARD)
                key = ledger_gangs.entry_key(change.key)
                if shard is not None:
                    self._mirror_gang(key, shard.entries.get(key), time.time())
        mine = {id(c) for c in taken if type(c) is WorkloadChange}
        for (name, key), pending in list(self.unlanded.items()) if keys else ():
            if key in keys:
                rest = [x for x in pending if id(x[2]) not in mine]
                if rest:
                    self.unlanded[(name, key)] = rest
                else:
                    del self.unlanded[(name, key)]
        for key in keys:
            self._recompute(key)

    def _landed_changes(self, shard: Shard, parts: list) -> None:
        """The write carrying `parts` ended (written, or given up): they no longer count as unwritten; recount their workloads."""
        keys = set()
        for part in parts:
            for seq, change, _ in part.changes:
                keys.add(change.key)
                pending = self.unlanded.get((shard.name, change.key))
                if pending:
                    rest = [x for x in pending if x[0] != seq]
                    if rest:
                        self.unlanded[(shard.name, change.key)] = rest
                    else:
                        del self.unlanded[(shard.name, change.key)]
        _gated(self.state, lambda: [self._recompute(key) for key in keys])

    def _apply(self, part: Changes, entries: dict) -> bool:
        """Apply one request's workload changes and pod holds to `entries` (the write being built); False, unchanged, if a take is not covered."""
        out: dict = {}
        for seq, change, _ in part.changes:
            key = change.key
            entry = out[key] if key in out else entries.get(key)
            entry = ledger_ops.apply(entry, change, self.replica, seq, True)
            if entry is ledger_ops.FAIL:
                return False
            out[key] = entry
        if part.gangs:
            now = time.time()
            for change in part.gangs:
                key = ledger_gangs.entry_key(change.key)
                there = entries.get(key)
                if (there is not None and there[2] != self.replica and there[0] > now
                        and (key in self.clashes or key in self.deferred)):
                    return False  # another replica placed this gang first: decided again, it joins that domain
                # (else this decision saw that entry and placed the gang again on purpose: a re-plan replaces it)
                out[key] = ledger_gangs.encode(change, self.replica)
        for key, expires_at in part.gang_drops:
            there = entries.get(key)
            if there is not None and there[0] == expires_at and key not in out:
                out[key] = None  # (a gang re-planned under the key since has another expiry: kept)
        for key, entry in out.items():
            if entry is None:
                entries.pop(key, None)
            else:
                entries[key] = entry
        for key, (holds, expires_at) in part.puts.items():
            entries[key] = [expires_at, [list(h) for h in holds], self.replica, None]
        return True

    def _kick(self, shard: Shard) -> None:
        if not shard.flushing:
            shard.flushing = True
            asyncio.get_running_loop().create_task(self._flush(shard))

    async def _flush(self, shard: Shard) -> None:
        """Write queued holds in groups, one write in flight per shard, until the queue is empty.

        No fixed linger: the first hold of a burst goes at once (after one turn of the loop,
        so requests already read join it), and every hold decided while a write is in flight
        waits for the next one, so the group grows with the load.
        """
        metrics = self.state.metrics
        try:
            while shard.pending:
                await asyncio.sleep(0)  # requests already on the loop decide meanwhile: their holds join this write
                batch, shard.pending = shard.pending, []
                stale = [b for b in batch if b[4] < shard.read_at]
                if stale:  # decided before the shard brought in other replicas' holds: they did not count them
                    _settle(stale, False)
                    batch = [b for b in batch if b[4] >= shard.read_at]
                    if not batch:
                        continue
                now = time.time()
                entries = self._pruned(shard, now)
                parts, refused = [], []
                for item in batch:
                    key, holds, expires_at = item[0], item[1], item[2]
                    if key is None:
                        continue
                    if type(key) is Changes:
                        if item[3].done():  # given up by its request (timed out): not written
                            continue
                        if self._apply(key, entries):
                            parts.append(item)
                        else:
                            refused.append(item)
                        continue
                    entries[key] = [expires_at, [list(h) for h in holds], self.replica, None]
                if refused:  # a take the shard's entry no longer covers (another replica took it): decide again
                    metrics.ledger_writes.labels("refused").inc()
                    batch = [b for b in batch if not any(b is r for r in refused)]
                    self._landed_changes(shard, [r[0] for r in refused])
                    _settle(refused, False)
                    if not batch:
                        continue
                flight = self._escrowed(shard, entries, now) if self.escrow else None
                if len(entries) > MAX_HOLDS:
                    if parts:
                        self._landed_changes(shard, [b[0] for b in parts])
                    _settle(batch, LedgerUnavailable(f"ledger shard {shard.name} is full ({MAX_HOLDS} holds)"))
                    metrics.ledger_writes.labels("full").inc()
                    continue
                text = orjson.dumps(entries).decode()
                rv = shard.rv
                start = time.perf_counter()
                shard.flight = flight
                try:
                    cm = await self._put(shard, rv, text)
                except Exception as exc:  # noqa: BLE001 - classified below
                    status = getattr(exc, "status", None)
                    self._landed(shard, False, known=type(status) is int and 400 <= status < 500)
                    again = [b for b in parts if b[0].release and b[0].tries < RELEASE_TRIES]
                    for b in again:  # a release is nobody's request: written again against the newer version
                        b[0].tries += 1
                    given_up = [b[0] for b in parts if not any(b is a for a in again)]
                    if given_up:
                        self._landed_changes(shard, given_up)
                    if status == 409:
                        metrics.ledger_writes.labels("conflict").inc()
                        # The winner's version is on its way through the watch: wait for it (about
                        # as long as a write takes) rather than ask for it, and read it only if late.
                        if shard.rv == rv and not await _changed(shard, min(0.05, 2 * shard.write_s)):
                            try:
                                cm = await self._read(shard.name)
                                if shard.rv == rv:
                                    _gated(self.state, self._load, shard, cm)
                            except Exception as reread:  # noqa: BLE001
                                log.warning("re-reading %s failed: %s", shard.name, reread)
                        _settle([b for b in batch if not any(b is a for a in again)], False)
                    else:
                        metrics.ledger_writes.labels("error").inc()
                        _settle([b for b in batch if not any(b is a for a in again)],
                                LedgerUnavailable(f"writing {shard.name}: {type(exc).__name__}: {str(exc)[:200]}"))
                    shard.pending[:0] = again
                    continue
                took = time.perf_counter() - start
                self._landed(shard, True)
                metrics.ledger_writes.labels("ok").inc()
                metrics.ledger_write_seconds.observe(took)
                shard.write_s += (took - shard.write_s) / 8
                new_rv = (cm.get("metadata") or {}).get("resourceVersion")
                if newer(new_rv, shard.rv):  # (the watch may have shown this very write already)
                    before, shard.rv, shard.entries, shard.text = shard.entries, new_rv, entries, text
                    _gated(self.state, self._mirror, shard, before)  # only drops: other replicas' holds this write pruned
                if parts:
                    self._landed_changes(shard, [b[0] for b in parts])
                    late = [c for b in parts if b[3].done() and not b[0].release for _, c, _ in b[0].changes if c.op == "take"]
                    if late:  # written, but its request timed out meanwhile: its pod holds nothing, so give back its take
                        self.submit([WorkloadChange("give", c.key, c.holds, pod=c.pod) for c in late])
                if self.escrow and all(b[0] is None for b in batch):
                    self.escrow_metrics.events.labels("background_write").inc()  # no hold: a slice kept, renewed, returned; a want
                _settle(batch, True)
        finally:
            shard.flushing = False


def _quiet(fut: asyncio.Future) -> None:
    """A background write's outcome is nobody's answer: fetched so a failure is not logged as never retrieved."""
    if not fut.cancelled():
        fut.exception()


async def _changed(shard: Shard, timeout: float) -> bool:
    """Wait up to `timeout` for a read to move `shard` to a newer version; True if one did."""
    if shard.changed is None:
        shard.changed = asyncio.Event()
    try:
        await asyncio.wait_for(shard.changed.wait(), timeout)
        return True
    except asyncio.TimeoutError:
        return False


def _done(loop: asyncio.AbstractEventLoop, value: Any) -> asyncio.Future:
    fut = loop.create_future()
    fut.set_result(value)
    return fut


async def decide_committed(review, decision, doc, cause, *, mutate: bool, state, now: float, budget_end: float, redo):
    """Commit the holds a decision took before its "allowed" is sent; re-decide on a conflict.

    `redo()` decides again (with a fresh `review.taken`); `budget_end` is the perf_counter
    deadline. Returns (decision, doc, cause, attempts).
    """
    from webhook.server import review as rv

    ledger = state.ledger
    attempts = 0
    if ledger.escrow and not decision.allowed and cause is None:  # denied only because of other replicas' slices?
        decision, doc, cause = await _slices_wait(review, decision, doc, cause, mutate=mutate, state=state,
                                                  budget_end=budget_end, redo=redo)
    while review.taken and decision.allowed and cause is None:
        taken = review.taken
        if any(type(t) is WorkloadChange and t.op in RELEASES for t in taken):
            ledger.submit([t for t in taken if type(t) is WorkloadChange and t.op in RELEASES])  # not awaited
            taken = review.taken = [t for t in taken if type(t) is not WorkloadChange or t.op not in RELEASES]
            if not taken:
                break
        attempts += 1
        left = budget_end - time.perf_counter()
        try:
            if left <= 0:
                raise asyncio.TimeoutError
            if await ledger.commit(taken, left, review.view):
                return decision, doc, cause, attempts
            outcome = "conflict"
        except (asyncio.TimeoutError, LedgerUnavailable) as exc:
            outcome = "timeout" if isinstance(exc, asyncio.TimeoutError) else "unavailable"
            message = str(exc) or f"the reservation ledger was not written within {max(left, 0):.2f}s"
        _gated(state, ledger.undo, taken)  # never answered "allowed": its holds and workload changes must not count here
        if outcome != "conflict":
            return (*rv.failure(review, mutate=mutate, state=state, cause=f"ledger_{outcome}", message=message),
                    f"ledger_{outcome}", attempts)
        if attempts >= MAX_ATTEMPTS:
            msg = f"{attempts} conflicting writes to the reservation ledger"
            return (*rv.failure(review, mutate=mutate, state=state, cause="ledger_conflict", message=msg),
                    "ledger_conflict", attempts)
        decision, doc, cause = await _redone(redo())
        if ledger.escrow and not decision.allowed and cause is None:
            decision, doc, cause = await _slices_wait(review, decision, doc, cause, mutate=mutate, state=state,
                                                      budget_end=budget_end, redo=redo)
    return decision, doc, cause, attempts


async def _slices_wait(review, decision, doc, cause, *, mutate: bool, state, budget_end: float, redo):
    """A denial other replicas' slices may lift: ask their holders over the peer channel, else wait for them (a want)."""
    from policy.decision import Decision

    ledger = state.ledger
    if ledger.peers is not None:
        asked, sent = await ledger.ask_holders(review, decision, mutate=mutate, digest=state.policy.digest,
                                               budget_end=budget_end)
        response = (asked or {}).get("doc", {}).get("response")
        if isinstance(response, dict) and response.get("uid") == review.uid and response.get("allowed") is True:
            review.peer = str(asked.get("by") or "")
            if review.taken:  # (a denial holds nothing; were it to, the holder's admission replaces it)
                _gated(state, ledger.undo, review.taken)
            review.taken = []
            blocks = asked.get("blocks")
            return Decision(allowed=True, blocks=tuple(b for b in blocks if isinstance(b, str)) if isinstance(blocks, list) else ()), \
                asked["doc"], None
        if sent:  # the view moved while the holders were asked (a slice returned, say): what it shows now decides
            decision, doc, cause = await _redone(redo())
            if decision.allowed or cause is not None:
                return decision, doc, cause
    return await ledger.slices_back(decision, redo, budget_end) or (decision, doc, cause)


async def _redone(answer):
    """`redo()`'s answer, awaited when it decides off the loop."""
    return await answer if asyncio.iscoroutine(answer) or isinstance(answer, asyncio.Future) else answer
