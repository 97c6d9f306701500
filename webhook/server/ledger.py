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
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import re
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import orjson

from webhook.server.escrow import Escrow

log = logging.getLogger("allot.ledger")
PREFIX = "allot-ledger-"
LABEL = "allot.dev/ledger"
SELECTOR = f"{LABEL}=reservations"
SETTLE = 15.0  # seconds a hold outlives the pod's appearance: every replica's watch shows the pod by then
MAX_HOLDS = 4000  # per shard: ~100 bytes each keeps a ConfigMap far below its 1 MiB limit
MAX_ATTEMPTS = 16  # decisions of one request before a conflict storm answers with --on-error
PRUNE_INTERVAL = 5.0
WATCH_SECONDS = 300  # server-side timeout of one shard watch; resumed from the last resourceVersion


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


def newer(rv: str | None, than: str | None) -> bool:
    """Whether resourceVersion `rv` is later than `than` (etcd revisions are integers; anything else: when they differ)."""
    if rv is None:
        return False
    if than is None:
        return True
    try:
        return int(rv) > int(than)
    except ValueError:
        return rv != than


@dataclass
class Shard:
    """One ConfigMap: its last known resourceVersion (None: not created yet) and holds by pod key."""

    name: str
    rv: str | None = None
    entries: dict[str, list] = field(default_factory=dict)  # key -> [expires_at, holds, replica, seen_at|None]
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
    wanting: int = 0  # requests of this replica waiting for other replicas' slices (a want entry is written)
    want_exp: float = 0.0


class ClusterLedger(Escrow):
    """Reads, watches and writes the shards through a `kubernetes` ApiClient; mirrors other replicas' holds into `holds`."""

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
        self.namespace = namespace
        self.state = state
        self.replica = replica or uuid.uuid4().hex[:12]
        self.shards: dict[str, Shard] = {}
        self.remote: dict[str, dict[str, tuple]] = {}  # key -> shard name -> holds of another replica
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

    def _mirror(self, shard: Shard, old: dict[str, list]) -> bool:
        """Make the local ledger hold what other replicas hold in `shard` (skipping pods the snapshot shows).

        Only entries that differ from `old` (the shard's previous entries) are looked at: a
        burst's shard holds thousands, and each event changes a few. Returns True when another
        replica's hold was added or grew: decisions made before did not count it. (A hold
        that went away only makes those decisions more careful than needed, never wrong;
        an unchanged hold that expired is dropped by the local ledger's own clock.)
        """
        ledger = self.holds
        snapshot = self.state.snapshot
        now = time.time()
        new = shard.entries
        changed: set[str] = set()
        added = False
        keys = [k for k, e in new.items() if old.get(k) != e]
        keys += [k for k in old if k not in new]
        for key in keys:
            entry = new.get(key)
            per = self.remote.get(key)
            if entry is None or entry[2] == self.replica or entry[0] <= now or not entry[1]:  # (a want holds nothing)
                if per is not None and shard.name in per:
                    del per[shard.name]
                    changed.add(key)
                continue
            held = tuple(tuple(h) for h in entry[1])
            per = self.remote.setdefault(key, {})
            if per.get(shard.name) != held:
                per[shard.name] = held
                changed.add(key)
                added = True
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
        return added

    def _load(self, shard: Shard, cm: dict | None) -> None:
        """Take `cm` (None: it does not exist) as the shard's state and mirror the other replicas' holds in it."""
        old = shard.entries
        if cm is None:
            shard.rv, shard.entries, shard.text = None, {}, None
        else:
            shard.rv = (cm.get("metadata") or {}).get("resourceVersion")
            text = (cm.get("data") or {}).get("holds") or "{}"
            if text != shard.text:
                shard.text, shard.entries = text, _entries(text)
        if shard.slice and self.escrow_key not in shard.entries:
            shard.slice = {}  # the shard no longer carries this replica's slice (deleted, edited): admit nothing in it
        if self._mirror(shard, old):
            self.generation += 1
            shard.read_at = self.generation
            # Queued holds were decided without these: send them back to be decided again now,
            # while the write in flight is out, so they are ready for the next one.
            stale = [b for b in shard.pending if b[4] < shard.read_at]
            if stale:
                shard.pending = [b for b in shard.pending if b[4] >= shard.read_at]
                _settle(stale, False)
        if self.escrow:
            self._escrow_read(shard)
        if shard.changed is not None:
            shard.changed.set()
            shard.changed = None

    def _event(self, kind: str, cm: dict) -> None:
        """A watch event (on the loop): a shard newer than this replica's view replaces it."""
        self.watch_events += 1
        meta = cm.get("metadata") or {}
        name, rv = meta.get("name") or "", meta.get("resourceVersion")
        shard = self.shards.setdefault(name, Shard(name))
        if kind == "DELETED":
            if shard.rv is not None and not newer(shard.rv, rv):
                self._load(shard, None)
        elif newer(rv, shard.rv):
            self._load(shard, cm)

    def _relisted(self, items: list, rv: str | None) -> None:
        """A fresh list (start, or after a 410): every shard as listed; shards gone meanwhile are empty."""
        self.relists += 1
        seen = set()
        for cm in items:
            name = (cm.get("metadata") or {}).get("name", "")
            seen.add(name)
            shard = self.shards.setdefault(name, Shard(name))
            if shard.rv is None or not newer(shard.rv, (cm.get("metadata") or {}).get("resourceVersion")):
                self._load(shard, cm)
        for name, shard in self.shards.items():
            if name not in seen and shard.rv is not None and not shard.flushing:
                self._load(shard, None)
        self.list_rv = rv

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

    def _list(self) -> tuple[list, str | None]:
        resp = self.core.list_namespaced_config_map(self.namespace, label_selector=SELECTOR, _preload_content=False,
                                                    _request_timeout=(10, 60))
        doc = orjson.loads(resp.data)
        return doc.get("items") or [], (doc.get("metadata") or {}).get("resourceVersion")

    def _write(self, shard: Shard, rv: str | None, text: str) -> dict:
        """Create the shard (rv None) or replace it, conditional on `rv` (the API server answers 409 when stale).

        A whole-object replace of one `data` key, not a patch of one key per hold: measured
        against kube-apiserver 1.36 with 1,000 holds, a replace of one key took 15-19 ms, a merge
        patch of one key 61 ms and a merge patch of one key per hold 111 ms (the server applies
        patches through a JSON round trip and tracks managed fields per data key).
        """
        body = {"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": shard.name, "namespace": self.namespace, "labels": {LABEL: "reservations"}},
                "data": {"holds": text}}
        if rv is None:
            resp = self.core.create_namespaced_config_map(self.namespace, body, _preload_content=False)
        else:
            body["metadata"]["resourceVersion"] = rv
            resp = self.core.replace_namespaced_config_map(shard.name, self.namespace, body, _preload_content=False)
        return orjson.loads(resp.data)

    def _watch_thread(self, loop: asyncio.AbstractEventLoop) -> None:
        """List + watch the shards from the list's resourceVersion; a 410 relists; errors back off."""
        from kubernetes.client.rest import ApiException
        from kubernetes.watch.watch import iter_resp_lines

        rv, backoff = self.list_rv, 1.0
        while not self._stopped.is_set():
            try:
                if rv is None:
                    items, rv = self._list()
                    _post(loop, self._relisted, items, rv)
                resp = self.core.list_namespaced_config_map(
                    self.namespace, label_selector=SELECTOR, watch=True, resource_version=rv, allow_watch_bookmarks=True,
                    timeout_seconds=WATCH_SECONDS, _preload_content=False, _request_timeout=(10, WATCH_SECONDS + 30))
                try:
                    for line in iter_resp_lines(resp):
                        if self._stopped.is_set():
                            return
                        if not line.strip():
                            continue
                        event = orjson.loads(line)
                        kind, obj = event.get("type"), event.get("object") or {}
                        if kind == "ERROR":
                            if obj.get("code") == 410:
                                rv = None
                                break
                            raise RuntimeError(f"watch error {obj.get('code')}: {obj.get('message')}")
                        rv = (obj.get("metadata") or {}).get("resourceVersion") or rv
                        if kind in ("ADDED", "MODIFIED", "DELETED"):
                            _post(loop, self._event, kind, obj)
                finally:
                    resp.release_conn()
                backoff = 1.0
            except ApiException as exc:
                if exc.status == 410:
                    rv = None
                    continue
                log.warning("watching the reservation ledger: HTTP %s %s", exc.status, exc.reason)
                self._stopped.wait(backoff)
                backoff = min(backoff * 2, 30.0)
            except Exception as exc:  # noqa: BLE001 - network trouble: back off and resume
                log.warning("watching the reservation ledger: %s: %s", type(exc).__name__, str(exc)[:200])
                self._stopped.wait(backoff)
                backoff = min(backoff * 2, 30.0)

    async def start(self) -> None:
        """Read every shard once (readiness waits for it), retrying until the API answers."""
        while not self.synced:
            try:
                items, rv = await asyncio.to_thread(self._list)
                self._relisted(items, rv)
                self.synced, self.error = True, None
            except Exception as exc:  # noqa: BLE001 - not ready until read; retried
                self.error = f"{type(exc).__name__}: {exc}"[:300]
                log.warning("cannot read the reservation ledger: %s", self.error)
                await asyncio.sleep(1.0)

    async def run(self) -> None:
        """Background task: read the shards, watch them, and prune expired and settled holds while idle."""
        await self.start()
        loop = asyncio.get_running_loop()
        thread = threading.Thread(target=self._watch_thread, args=(loop,), name="allot-ledger-watch", daemon=True)
        thread.start()
        keeper = loop.create_task(self.keep_slices()) if self.escrow else None  # claim, renew, return slices
        try:
            while True:
                await asyncio.sleep(PRUNE_INTERVAL)
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
        loop = asyncio.get_running_loop()
        by_shard: dict[str, dict[str, tuple]] = {}
        for key, holds, expires_at in taken:
            for h in holds:
                per = by_shard.setdefault(self.root_of(h[0]), {})
                old = per.get(key)
                per[key] = ((old[0] if old else ()) + (h,), expires_at)
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
                for key, holds, expires_at, _, _ in batch:
                    if key is not None:
                        entries[key] = [expires_at, [list(h) for h in holds], self.replica, None]
                flight = self._escrowed(shard, entries, now) if self.escrow else None
                if len(entries) > MAX_HOLDS:
                    _settle(batch, LedgerUnavailable(f"ledger shard {shard.name} is full ({MAX_HOLDS} holds)"))
                    metrics.ledger_writes.labels("full").inc()
                    continue
                text = orjson.dumps(entries).decode()
                rv = shard.rv
                start = time.perf_counter()
                shard.flight = flight
                try:
                    cm = await asyncio.to_thread(self._write, shard, rv, text)
                except Exception as exc:  # noqa: BLE001 - classified below
                    self._landed(shard, False)
                    status = getattr(exc, "status", None)
                    if status == 409:
                        metrics.ledger_writes.labels("conflict").inc()
                        # The winner's version is on its way through the watch: wait for it (about
                        # as long as a write takes) rather than ask for it, and read it only if late.
                        if shard.rv == rv and not await _changed(shard, min(0.05, 2 * shard.write_s)):
                            try:
                                cm = await asyncio.to_thread(self._get, shard.name)
                                if shard.rv == rv:
                                    self._load(shard, cm)
                            except Exception as reread:  # noqa: BLE001
                                log.warning("re-reading %s failed: %s", shard.name, reread)
                        _settle(batch, False)
                    else:
                        metrics.ledger_writes.labels("error").inc()
                        _settle(batch, LedgerUnavailable(f"writing {shard.name}: {type(exc).__name__}: {str(exc)[:200]}"))
                    continue
                took = time.perf_counter() - start
                self._landed(shard, True)
                metrics.ledger_writes.labels("ok").inc()
                metrics.ledger_write_seconds.observe(took)
                shard.write_s += (took - shard.write_s) / 8
                new_rv = (cm.get("metadata") or {}).get("resourceVersion")
                if newer(new_rv, shard.rv):  # (the watch may have shown this very write already)
                    before, shard.rv, shard.entries, shard.text = shard.entries, new_rv, entries, text
                    self._mirror(shard, before)  # only drops: other replicas' holds this write pruned
                if self.escrow and all(b[0] is None for b in batch):
                    self.escrow_metrics.events.labels("background_write").inc()  # no hold: a slice kept, renewed, returned; a want
                _settle(batch, True)
        finally:
            shard.flushing = False


def _entries(text: str) -> dict[str, list]:
    """The holds of a shard's `holds` value; entries not as Allot writes them are left out, never a crash."""
    try:
        entries = orjson.loads(text)
    except orjson.JSONDecodeError:
        return {}
    return {k: e for k, e in entries.items() if _well_formed(e)} if isinstance(entries, dict) else {}


def _well_formed(entry: Any) -> bool:
    """An entry as `_flush` writes it; anything else (a hand edit, another version) is ignored, never a crash."""
    if not (isinstance(entry, list) and len(entry) == 4 and isinstance(entry[0], (int, float))
            and isinstance(entry[1], list) and isinstance(entry[2], str)
            and (entry[3] is None or isinstance(entry[3], (int, float)))):
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


def _post(loop: asyncio.AbstractEventLoop, fn, *args) -> None:
    """Run `fn(*args)` on the loop thread (the only thread that touches shards and the snapshot)."""
    try:
        loop.call_soon_threadsafe(fn, *args)
    except RuntimeError:  # the loop closed: shutting down
        pass


async def decide_committed(review, decision, doc, cause, *, mutate: bool, state, now: float, budget_end: float, redo):
    """Commit the holds a decision took before its "allowed" is sent; re-decide on a conflict.

    `redo()` decides again (with a fresh `review.taken`); `budget_end` is the perf_counter
    deadline. Returns (decision, doc, cause, attempts).
    """
    from webhook.server import review as rv

    ledger = state.ledger
    attempts = 0
    if ledger.escrow and not decision.allowed and cause is None:  # denied only because of other replicas' slices?
        decision, doc, cause = await ledger.slices_back(decision, redo, budget_end) or (decision, doc, cause)
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
        if ledger.escrow and not decision.allowed and cause is None:
            decision, doc, cause = await ledger.slices_back(decision, redo, budget_end) or (decision, doc, cause)
    return decision, doc, cause, attempts
