"""Mirroring: what a read of a shard (the watch, a list, a get) brings into this replica's ledger.

Other replicas' holds are held here as they are written (`_mirror`), except pods the
snapshot shows (they carry their own charge) and slice-pod sums this replica's pod watch
has passed (webhook/ledger/admitted.py); other replicas' gangs are held in the planner.
`Mirror` is the part of `ClusterLedger` (webhook/ledger/cluster.py) that does it, mixed in
beside Escrow and Peering; the helpers here read a shard's text and compare versions.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import orjson

from policy.blocks.holdbook import book_of
from policy.cluster.ledger import WORKLOAD_PREFIX, WorkloadChange
from webhook.ledger import admitted
from webhook.ledger import gangs as ledger_gangs
from webhook.ledger import workloads as ledger_ops
from webhook.ledger.escrow import ESCROW_PREFIX


class Mirror:
    """The reading side of `ClusterLedger` (mixed in): shard versions in, other replicas' holds and gangs mirrored."""

    def _mirror(self, shard, old: dict[str, list]) -> bool:
        """Make the local ledger hold what other replicas hold in `shard` (skipping pods the snapshot shows).

        Only entries that differ from `old` (the shard's previous entries) are looked at: a
        burst's shard holds thousands, and each event changes a few. Returns True when what
        other replicas hold here grew, net, for some quota: decisions made before did not
        count it. (Less only makes those decisions more careful than needed, never wrong: a
        renewal that records a slice's pods as holds and shrinks the slice by as much, or
        only moves its expiry, leaves queued decisions valid. An unchanged hold that expired
        is dropped by the local ledger's own clock.)

        The net is taken over what the other replicas *charge* as written, seen sums and
        holds of pods the snapshot shows included: those pods may have appeared after a
        queued decision was made (while the slice that covered them still counted), so a
        write that spends a slice into a seen sum and adds holds beside it did grow for that
        decision, though the local count only traded the slice for the pods. Measured on the
        kit: not counting them let a decision queued before the other replica's write land
        one GPU over the quota (docs/ledger.md, the killed-replica open point).
        """
        ledger = self.holds
        snapshot = self.state.snapshot
        now = time.time()
        new = shard.entries
        changed: set[str] = set()
        added = False
        net: dict = {}  # (quota id, model) -> [milli-GPU, bytes, model milli-GPU] other replicas hold here now, less before
        pods_rv = self._pods_rv()
        keys = [k for k, e in new.items() if old.get(k) != e]
        keys += [k for k in old if k not in new]
        for key in keys:
            if key.startswith(WORKLOAD_PREFIX):  # shared: counted as the shards hold it, whoever wrote it
                added = self._recompute(key, now) or added
                continue
            if key.startswith(ledger_gangs.PREFIX):  # another replica's gang: its domain and slots held here too
                added = self._mirror_gang(key, new.get(key), now) or added
                continue
            entry = new.get(key)
            # A replica's slices share one key in every shard but live and renew apart: held here one per shard.
            slice_key = key.startswith(ESCROW_PREFIX)
            local = f"{key}@{shard.name}" if slice_key else key
            per = self.remote.get(local)
            prev = per.get(shard.name) if per is not None else None
            before = old.get(key)
            if _charged(before, self.replica, now):
                _tally(net, before[1], -1)
            if _charged(entry, self.replica, now):
                _tally(net, entry[1], +1)
            if (entry is None or entry[2] == self.replica or entry[0] <= now or not entry[1]  # (a want holds nothing)
                    or admitted.shown_by(key, pods_rv)):  # pods this replica's snapshot shows: they carry their charge
                if prev is not None:
                    del per[shard.name]
                    changed.add(local)
                continue
            # The expiry too: a slice renewed at the same size must live on here, not end at its first expiry.
            held = (tuple(tuple(h) for h in entry[1]), entry[0])
            if prev != held:
                self.remote.setdefault(local, {})[shard.name] = held
                if local.startswith(admitted.PREFIX):
                    self.sums.add(local)
                changed.add(local)
        for key in changed:
            per = self.remote.get(key) or {}
            if not per:
                self.remote.pop(key, None)
                self.sums.discard(key)
                ledger.release(key)
                continue
            ns, _, name = key.partition("/")
            if snapshot.pod(ns, name) is not None:
                continue  # the pod carries its own charge
            expires_at = min(at for _, at in per.values())
            ledger.reserve(key, tuple(h for holds, _ in per.values() for h in holds), expires_at)
        return added or any(x > 0 for v in net.values() for x in v)

    def _pods_rv(self) -> str | None:
        """The resourceVersion of the last pod event (or list) the snapshot shows; None without a pod watch."""
        cluster = getattr(self.state, "cluster", None)
        kinds = getattr(cluster, "kinds", None) or {}
        return (kinds.get("Pod") or {}).get("resource_version")

    def _pods_added_rv(self) -> int | None:
        """The resourceVersion of the latest pod creation the snapshot shows (listed pods: their own versions)."""
        cluster = getattr(self.state, "cluster", None)
        kinds = getattr(cluster, "kinds", None) or {}
        return (kinds.get("Pod") or {}).get("added_rv")

    def _forget_shown(self) -> None:
        """Stop counting other replicas' seen sums once this replica's pod watch has passed them (it shows those pods now)."""
        pods_rv = self._pods_rv()
        if pods_rv is None:
            return
        for key in [k for k in self.sums if admitted.shown_by(k, pods_rv)]:
            self.sums.discard(key)
            self.remote.pop(key, None)
            self.holds.release(key)

    def _recompute(self, key: str, now: float | None = None) -> bool:
        """Count workload hold `key` as the shards hold it plus this replica's changes not written yet; True if it grew."""
        now = time.time() if now is None else now
        ledger = self.holds
        book = book_of(ledger)
        if book.on_watched_shrink is None:
            book.on_watched_shrink = self._watched_shrink  # (this snapshot's book: set where its workload holds are counted)
        holds: list = []
        expires_at, meta = 0.0, {}
        for name, shard in self.shards.items():
            entry = shard.entries.get(key)
            if entry is not None and entry[0] <= now:
                entry = None
            pending = self.unlanded.get((name, key))
            if pending:
                entry = ledger_ops.replay(entry, pending, self.replica)
            if entry is not None and entry[0] > now:
                holds += entry[1]
                expires_at, meta = max(expires_at, entry[0]), ledger_ops.meta_of(entry) or meta
        uid = meta.get("uid")
        if uid is None and key in book.uids:
            uid = book.uids[key]
        if book.has_ended(key, uid):
            holds = []  # released here (deleted, finished): another replica's copy does not count again
        held = ledger.holds.get(key)
        if not holds:
            if held is not None:
                ledger.release(key)
            return False
        new = tuple(tuple(h) for h in holds)
        if held is not None and held[1] == new and held[0] == expires_at:
            return False
        grew = _grew(held[1] if held is not None else (), new)
        ledger.reserve(key, new, expires_at)
        demand = meta.get("demand")
        if demand is not None:
            book.record(key, uid, tuple(demand), ledger.holds)
        elif uid is not None:
            book.uids[key] = uid
        return grew

    def _watched_shrink(self, key: str, uid: str | None, released: tuple, demand: tuple[int, int]) -> None:
        """The watch showed held workload `key` scaled down, unseen by the webhook: write the release for every replica.

        Every replica's watch shows it and writes the same shrink; it is measured against the
        demand in the entry, so the second one releases nothing.
        """
        try:
            asyncio.get_running_loop()
        except RuntimeError:  # not on the serving loop (a tool's snapshot): nothing to write to
            return
        if self.synced:
            self.submit([WorkloadChange("shrink", key, tuple(released), uid=uid, demand=tuple(demand))])

    def _planner(self):
        """The serving engine's gang planner, when its policy places gangs (else None: no gang entry matters here)."""
        engine = self.state.engine
        policy = getattr(engine, "policy_set", None)
        if policy is None or not any(g.topology for g in policy.gangs) or self.state.snapshot is None:
            return None
        return engine.state_for(self.state.snapshot).planner()

    def _mirror_gang(self, key: str, entry: list | None, now: float) -> bool:
        """Hold another replica's gang (entry `key`) in this replica's planner; True if it is new here."""
        if entry is None:  # dropped from the shard: released (DELETE, suspension, scale to zero) or expired
            self.mirrored.pop(key, None)
            planner = self._planner()
            if planner is not None:  # whoever placed it, and whichever replica answered the release
                planner.release(key[len(ledger_gangs.PREFIX):])
            return False
        if entry is None or entry[2] == self.replica or entry[0] <= now:
            return False  # gone or expired: the planner's own expiry lets go of it
        cluster = getattr(self.state, "cluster", None)
        if cluster is not None and not cluster.synced:
            self.deferred.add(key)  # its nodes may not be known yet (their slots would be skipped): held once listed
            return False
        decoded = ledger_gangs.decode(key, entry)
        planner = self._planner() if decoded is not None else None
        if planner is None:
            return False
        if planner.mirror(decoded[0], decoded[1], now):
            self.mirrored[key] = decoded[1]
            self.clashes.discard(key)
            return True
        if planner.recall(decoded[0].id, now) is not self.mirrored.get(key):
            self.clashes.add(key)  # this replica placed the gang itself meanwhile: its write of it must be refused
        return False

    def _mirror_deferred(self) -> None:
        """Hold the gangs read before the cluster state was listed, now that it is (a decision made before is stale)."""
        shard = self.shards.get(ledger_gangs.SHARD)
        keys, self.deferred = self.deferred, set()
        if shard is not None and any([self._mirror_gang(k, shard.entries.get(k), time.time()) for k in keys]):
            self.generation += 1
            shard.read_at = self.generation

    def _load(self, shard, cm: dict | None) -> None:
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
            if self.peers is not None:
                self.warm_peers(shard, asyncio.get_running_loop())
        if shard.changed is not None:
            shard.changed.set()
            shard.changed = None

    def _event(self, kind: str, cm: dict) -> None:
        """A watch event (on the loop): a shard newer than this replica's view replaces it."""
        self.watch_events += 1
        meta = cm.get("metadata") or {}
        name, rv = meta.get("name") or "", meta.get("resourceVersion")
        shard = self.shards.setdefault(name, self._new_shard(name))
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
            shard = self.shards.setdefault(name, self._new_shard(name))
            if shard.rv is None or not newer(shard.rv, (cm.get("metadata") or {}).get("resourceVersion")):
                self._load(shard, cm)
        for name, shard in self.shards.items():
            if name not in seen and shard.rv is not None and not shard.flushing:
                self._load(shard, None)
        self.list_rv = rv


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


def _entries(text: str) -> dict[str, list]:
    """The holds of a shard's `holds` value; entries not as Allot writes them are left out, never a crash."""
    try:
        entries = orjson.loads(text)
    except orjson.JSONDecodeError:
        return {}
    return {k: e for k, e in entries.items() if _well_formed(e)} if isinstance(entries, dict) else {}


def _well_formed(entry: Any) -> bool:
    """An entry as `_flush` writes it (a workload hold's with a fifth field); anything else (a hand edit, another version) is ignored, never a crash."""
    if isinstance(entry, list) and len(entry) == 5:
        if not ledger_ops.well_formed_meta(entry[4]):
            return False
        entry = entry[:4]
    if not (isinstance(entry, list) and len(entry) == 4 and isinstance(entry[0], (int, float))
            and isinstance(entry[1], list) and isinstance(entry[2], str)
            and (entry[3] is None or isinstance(entry[3], (int, float)))):
        return False
    return all(isinstance(h, list) and len(h) == 5 and isinstance(h[0], str) and all(type(x) is int for x in (h[1], h[2], h[4]))
               and (h[3] is None or isinstance(h[3], str)) for h in entry[1])


def _charged(entry: list | None, me: str, now: float) -> bool:
    """Whether a shard entry is another replica's live charge (a want holds nothing)."""
    return entry is not None and entry[2] != me and entry[0] > now and bool(entry[1])


def _tally(net: dict, holds, sign: int) -> None:
    """Add `sign` x `holds` to `net`, by (quota id, model)."""
    for qid, milli, memory, model, model_milli in holds:
        m = net.setdefault((qid, model), [0, 0, 0])
        m[0], m[1], m[2] = m[0] + sign * milli, m[1] + sign * memory, m[2] + sign * model_milli


def _grew(before: tuple, after: tuple) -> bool:
    """Whether `after` holds more than `before` of some quota (milli-GPU, bytes or a model's milli-GPU)."""
    def sums(holds):
        out: dict = {}
        for qid, milli, memory, model, model_milli in holds:
            m = out.setdefault((qid, model), [0, 0, 0])
            m[0], m[1], m[2] = m[0] + milli, m[1] + memory, m[2] + model_milli
        return out
    old = sums(before)
    return any(any(x > y for x, y in zip(v, old.get(k, (0, 0, 0)))) for k, v in sums(after).items())


def _settle(batch: list, result: Any) -> None:
    for *_, fut, _ in batch:
        if fut.done():
            continue
        if isinstance(result, BaseException):
            fut.set_exception(result)
        else:
            fut.set_result(result)
