"""The writing side of the ledger: a commit's holds queued per shard and written in groups with a compare-and-swap.

`Writer` is a part of `ClusterLedger` (webhook/ledger/cluster.py): `commit` sorts a
decision's holds by shard (pod holds, workload changes, gang domains), admits them inside
this replica's slice when escrow allows (webhook/ledger/escrow.py), else queues them; one
write is in flight per shard (`_flush`), and every hold decided meanwhile joins the next.
A write builds the shard's entries (expired and settled holds pruned, workload deltas
applied to the entries as written: webhook/ledger/workloads.py), replaces the ConfigMap
conditional on its resourceVersion (webhook/ledger/shardapi.py) and settles every
request in it: True (written), False (a 409 or a stale view: decide again) or an error.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import orjson

from policy.blocks.holdbook import book_of
from policy.cluster.ledger import WORKLOAD_PREFIX, GangChange, WorkloadChange
from webhook.ledger import gangs as ledger_gangs
from webhook.ledger import workloads as ledger_ops
from webhook.ledger.admitted import SETTLE
from webhook.ledger.mirror import _settle, newer
from webhook.ledger.shardapi import _gated
from webhook.ledger.shards import (
    MAX_HOLDS,
    PRUNE_INTERVAL,
    RELEASE_TRIES,
    Changes,
    LedgerUnavailable,
    Shard,
)

log = logging.getLogger("allot.ledger")


class Writer:
    """Commits, releases and the grouped writes of `ClusterLedger` (mixed in)."""

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
        stale = self.stale()  # (webhook/ledger/face.py: the one place a freshness bound lives)
        if stale is not None:
            raise LedgerUnavailable(stale)
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

