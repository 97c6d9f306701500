"""Escrow: a replica claims a slice of a quota's free capacity in the quota's ledger shard and admits inside it with no write per pod.

The slice is an entry `escrow/<replica>` of the shard's `holds` JSON, written with the
same compare-and-swap as the holds (webhook/server/ledger.py), so every other replica
counts it as used, whole. `Escrow` is the part of `ClusterLedger` that sizes, spends
and lands slices; the ledger calls it from `commit` and `_flush`.
"""

from __future__ import annotations


ESCROW_PREFIX = "escrow/"
SLICE_TTL = 30.0  # a slice entry's expiry: what a dead replica's slice costs the others at most
# A slice admits only while it outlives this: its pods are recorded (or seen) before it expires.
# SETTLE (15 s, webhook/server/ledger.py) + 5 s; tests check it stays above SETTLE.
SLICE_MARGIN = 20.0
SLICE_RENEW = SLICE_TTL - SLICE_MARGIN - 5.0  # slice age at which the next admission queues a renewal (records its pods)
SLICE_IDLE = 2.0  # seconds without a commit after which a replica returns its slice
SLICE_MIN = 2000  # milli-GPU: a smaller slice is not claimed (near a quota's end every pod is a compare-and-swap)


class Escrow:
    """Slices of `ClusterLedger` (mixed in): admit inside them, size the next one, take the write's outcome."""

    def _in_slices(self, by_shard: dict, now: float, loop) -> bool:
        """Admit inside this replica's slices if every shard's part fits its slice; no write. False: the normal path.

        Safe without a view check: the slice was written with a compare-and-swap against the
        shard's holds and the quota's free capacity, and every other replica counts it whole.
        While a write is in flight (it will replace the slice), an admission must fit both the
        slice written and the one being written, so it is covered whichever way the write ends.
        """
        need: dict[str, dict[str, int]] = {}
        for name, per in by_shard.items():
            shard = self.shards[name]
            exp = min(shard.slice_exp, shard.flight["exp"]) if shard.flight else shard.slice_exp
            if not shard.slice or exp - now < SLICE_MARGIN:
                return False
            want = need.setdefault(name, {})
            for holds, _ in per.values():
                for h in holds:
                    want[h[0]] = want.get(h[0], 0) + h[1]
            for qid, milli in want.items():
                spent = shard.spent.get(qid, 0)
                if shard.flight is not None:
                    extra = shard.flight["spent"].get(qid, 0)
                    if extra + milli > shard.flight["slice"].get(qid, 0):
                        return False
                    spent += extra
                if spent + milli > shard.slice.get(qid, 0):
                    return False
        for name, per in by_shard.items():
            shard = self.shards[name]
            into = shard.flight["spent"] if shard.flight is not None else shard.spent
            for qid, milli in need[name].items():
                into[qid] = into.get(qid, 0) + milli
            for key, (holds, expires_at) in per.items():
                shard.unrecorded[key] = (holds, expires_at)
            left = sum(shard.slice.values()) - sum(shard.spent.values())
            if now - shard.slice_at >= SLICE_RENEW or 2 * left < sum(shard.slice.values()):
                if not shard.pending:
                    self._kick_empty(shard, loop)  # renew early, in the background: the next admissions need no wait
        self.slice_admits += 1
        return True

    def _slice_for(self, shard, now: float) -> dict[str, int]:
        """The slice to claim in this write: per quota of the shard, free capacity / (2 x replicas writing it); {} when idle.

        Only quotas whose checks are a plain nominal (no cohort, no per-model or memory cap)
        are sliced: a slice is counted in milli-GPU only. Free capacity is what this replica's
        engine sees: live pods, its own holds and every other replica's holds and slices.
        """
        if now - shard.used_at >= SLICE_IDLE:
            return {}
        state_for = getattr(self.state.engine, "state_for", None)
        if state_for is None:  # a stand-in engine: nothing to size a slice by
            return {}
        quota = state_for(self.state.snapshot).quota  # the usage every decision on this snapshot checks
        others = {e[2] for e in shard.entries.values() if e[2] != self.replica and e[0] > now}
        out = {}
        for spec in quota.specs:
            if (spec.nominal is None or spec.cohort or spec.per_model or spec.gpu_memory is not None
                    or self.root_of(spec.id) != shard.name):
                continue
            size = (spec.nominal - quota.used[spec.index]) // (2 * (1 + len(others)))
            size -= size % 1000  # whole GPUs: a fraction of one would be stranded by whole-GPU pods
            if size >= SLICE_MIN:
                out[spec.id] = size
        return out

    def _escrowed(self, shard, entries: dict, now: float) -> dict:
        """Add the slice's unrecorded pods and the new slice to `entries`; returns the flight record."""
        recorded = dict(shard.unrecorded)
        for key, (holds, expires_at) in recorded.items():
            entries.setdefault(key, [expires_at, [list(h) for h in holds], self.replica, None])
        new = self._slice_for(shard, now)
        exp = now + SLICE_TTL
        if new:
            entries[self.escrow_key] = [exp, [[q, m, 0, None, m] for q, m in sorted(new.items())], self.replica, None]
        else:
            entries.pop(self.escrow_key, None)
        return {"slice": new, "exp": exp if new else 0.0, "spent": {}, "recorded": recorded, "at": now}

    def _landed(self, shard, ok: bool) -> None:
        """The write in flight ended: on success its slice replaces the old one; else what it spent stays on the old."""
        flight, shard.flight = shard.flight, None
        if flight is None:
            return
        if ok:
            shard.slice, shard.slice_exp, shard.slice_at = flight["slice"], flight["exp"], flight["at"]
            shard.spent = flight["spent"]
            for key, held in flight["recorded"].items():
                if shard.unrecorded.get(key) is held:
                    del shard.unrecorded[key]
        else:
            for qid, milli in flight["spent"].items():
                shard.spent[qid] = shard.spent.get(qid, 0) + milli
