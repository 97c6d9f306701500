"""Escrow: a replica keeps a slice of a quota's free capacity in the quota's ledger shard and admits inside it with no write per pod.

The slice is an entry `escrow/<replica>` of the shard's `holds` JSON, written with the
same compare-and-swap as the holds (webhook/ledger/cluster.py), so every other replica
counts it as used, whole. `Escrow` is the part of `ClusterLedger` that sizes, spends,
keeps and returns slices; the ledger calls it from `commit`, `_flush`, `_load` and `run`.

Slices are kept ahead of demand (claimed once the ledger is read, renewed in the
background) and returned on demand: a replica whose request is denied only because
other replicas' slices hold the free capacity writes a `want/<replica>` entry (it holds
nothing) and waits, within the request's deadline; every replica that sees a live want
in a shard returns its slice at once and claims none while the want lives; the waiting
request is decided again after each change of the shard. A slice's pods are charged
by the shard's next write in a few sums per replica, not an entry per pod
(webhook/ledger/admitted.py).

The invariant (docs/escrow.md): at every version of a shard, for each sliced
quota, the live pods its writer saw + the holds + the sums + the slices in that version
fit the quota; and every pod a replica admitted that no version charges in a hold or a
sum is covered by that replica's slice in the latest version it wrote (and in the one in flight).
"""

from __future__ import annotations

import asyncio
import time

from webhook.ledger import admitted
from webhook.ledger.admitted import SETTLE

ESCROW_PREFIX = "escrow/"
WANT_PREFIX = "want/"  # a replica waiting for other replicas' slices; holds nothing
# Wants go to a small ConfigMap beside the shard (`<shard>-want`, same label: listed and watched
# like a shard, it holds no quota), so a want is a write of a few bytes, not of the shard's holds.
WANT_SUFFIX = "-want"
# A holder's answer to a want, in the want object: `left/<replica>/<slice expiry>/<milli-GPU>` (holds nothing):
# at most that much of its slice with that expiry can come back (it only shrinks: no slice grows while a
# want lives). A denial that only that slice stood in the way of is then final at once, without waiting
# for the holder's write that records the slice's pods and returns it.
REPLY_PREFIX = "left/"
SLICE_TTL = 30.0  # a slice entry's expiry: what a dead replica's slice costs the others at most
# A slice admits only while it outlives this: its pods are recorded (or seen) before it expires.
# SETTLE (15 s, webhook/ledger/cluster.py) + 5 s; tests check it stays above SETTLE.
SLICE_MARGIN = 20.0
SLICE_RENEW = SLICE_TTL - SLICE_MARGIN - 5.0  # slice age at which the next admission queues a renewal (records its pods)
SLICE_IDLE = 2.0  # seconds without a commit after which a slice that is not kept is returned
SLICE_SPREAD = 2  # a slice is 1/SPREAD of a fair share of the free capacity: the rest stays for a replica that needs more, or joins
SLICE_MIN = 2000  # milli-GPU: a smaller slice is not claimed (near a quota's end every pod is a compare-and-swap)
# With the peer channel, a slice holds at least what this replica admitted in this many of its write times
# (its measured rate; 50 ms at least): a slice spent before its renewal lands makes requests wait for writes, and what one
# replica holds beyond its share is lent to the others in one round trip each (webhook/ledger/peers.py).
SLICE_AHEAD = 8
KEEP_TICK = 1.0  # seconds between the keeper's looks at slices (claim, renew before SLICE_MARGIN, return)
WANT_TICK = 0.1  # ... while another replica's want lives in a shard this one holds in: its pods shown move to a seen sum at once
SEEN_WRITE = 1.0  # seconds at most between slice pods appearing in the snapshot and a write moving them to a seen sum
KEEP_MAX = 16  # shards a replica keeps a slice in while idle (most recently used first): idle renewals cost writes
WANT_PATIENCE = 1.0  # seconds a want waits, after it landed, for a live holder to answer; then only for slices expiring in time
COMMIT_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 1.0, 10.0)


class EscrowMetrics:
    """Where commits wait: a histogram per path, the want waits, slice events; on the server's registry."""

    def __init__(self, registry, ledger) -> None:
        from prometheus_client import Counter, Gauge, Histogram

        self.commit = Histogram(
            "allot_ledger_commit_seconds",
            "Time a commit waited for the ledger, by path: slice (inside this replica's slice, no write), "
            "none (no slice of this replica in the shard), short (the slice too small or expiring), "
            "wanted (slices stopped: a want is live), plain (escrow off), conflict (a write answered 409: decided again), "
            "renewed (admitted inside the slice its renewal wrote, after waiting for that write).",
            ["path"], buckets=COMMIT_BUCKETS, registry=registry)
        self.want = Histogram(
            "allot_ledger_want_seconds",
            "Time a request denied only because of other replicas' slices waited for them, by result "
            "(admitted, denied: decided again and still denied, timeout: its deadline came, gave_up: no holder answered).",
            ["result"], buckets=COMMIT_BUCKETS, registry=registry)
        self.events = Counter("allot_ledger_slice_events", "Slice events: claimed, returned (on a want), kept (a keeper's write queued), "
                              "background_write (a write with no hold: slices, wants, prunes).",
                              ["event"], registry=registry)
        self.peer = Counter("allot_ledger_peer_asks", "Requests only other replicas' slices denied, sent to a holder over the peer "
                            "channel, by result: admitted (inside its slice), declined (it said what is left), unanswered.",
                            ["result"], registry=registry)
        self.request = Histogram(
            "allot_ledger_request_seconds",
            "Time one request spent in the ledger after its first decision, all its waits together (commits, conflicts "
            "and decisions again, asks, wants); a request answered inside its slice at once is observed too.",
            buckets=COMMIT_BUCKETS, registry=registry)
        self.peer_wait = Histogram(
            "allot_ledger_peer_wait_seconds",
            "Time a request only other replicas' slices denied spent asking their holders over the peer channel, by how "
            "it ended: admitted, declined (the last holder asked said no), unanswered, skipped (answers to earlier asks "
            "showed no holder could help: nothing sent).",
            ["result"], buckets=COMMIT_BUCKETS, registry=registry)
        Gauge("allot_ledger_slice_admits", "Commits answered inside a slice, with no write.",
              registry=registry).set_function(lambda: ledger.slice_admits)
        self.commit.labels("slice")  # every path shows from the first scrape
        for path in ("none", "short", "wanted", "plain", "conflict", "renewed"):
            self.commit.labels(path)


class Escrow:
    """Slices of `ClusterLedger` (mixed in): admit inside them, size the next one, keep them, give them back on demand."""

    def _escrow_setup(self) -> None:
        """Per-ledger escrow state (after `replica` is set)."""
        self.escrow_key = f"{ESCROW_PREFIX}{self.replica}"
        self.want_key = f"{WANT_PREFIX}{self.replica}"
        self.slice_admits = 0  # commits answered inside a slice, with no write
        self.kept: set[str] = set()  # shards the keeper keeps a slice in
        self._foreign_cache: dict[str, tuple] = {}
        self._reply: dict[str, str] = {}  # want object -> this replica's answer key in it
        self._waiting: dict[tuple[str, str], int] = {}  # (shard, quota id) -> milli-GPU requested by requests waiting on a want
        self._emetrics: EscrowMetrics | None = None

    @property
    def escrow_metrics(self) -> EscrowMetrics:
        """The escrow metrics on the server's registry (made on first use; a private registry if taken)."""
        if self._emetrics is None:
            from prometheus_client import CollectorRegistry

            registry = getattr(getattr(self.state, "metrics", None), "registry", None)
            try:
                self._emetrics = EscrowMetrics(registry or CollectorRegistry(), self)
            except ValueError:  # a second ledger on one server's registry
                self._emetrics = EscrowMetrics(CollectorRegistry(), self)
        return self._emetrics

    # -- what the shard shows of the other replicas --

    def _wants_of(self, shard) -> object:
        """The want object beside `shard` (made on first use)."""
        name = shard.name + WANT_SUFFIX
        return self.shards.get(name) or self.shards.setdefault(name, self._new_shard(name))

    def _foreign(self, shard, now: float) -> tuple[bool, dict[str, list]]:
        """(a live want is on the shard, quota id -> [(milli, expires_at)] of other replicas' live slices)."""
        cached = self._foreign_cache.get(shard.name)
        if cached is None or cached[0] is not shard.entries:
            slices: dict[str, list] = {}
            for key, entry in shard.entries.items():
                if key.startswith(ESCROW_PREFIX) and entry[2] != self.replica:
                    for h in entry[1]:
                        slices.setdefault(h[0], []).append((h[1], entry[0], entry[2]))
            cached = self._foreign_cache[shard.name] = (shard.entries, slices)
        wants = self.shards.get(shard.name + WANT_SUFFIX)
        wanted = wants is not None and (wants.wanting > 0 or any(
            e[0] > now and k.startswith(WANT_PREFIX) for k, e in wants.entries.items()))
        return wanted, {q: [s for s in per if s[1] > now] for q, per in cached[1].items()}

    def _wanted_elsewhere(self, shard, now: float) -> bool:
        """Whether another replica's live want is on the shard (this replica must return its slice)."""
        wants = self.shards.get(shard.name + WANT_SUFFIX)
        return wants is not None and any(e[0] > now and e[2] != self.replica and k.startswith(WANT_PREFIX)
                                         for k, e in wants.entries.items())

    def _answers(self, shard, now: float) -> dict[tuple[str, float], int]:
        """(replica, slice expiry) -> milli-GPU that replica says can still come back of that slice."""
        wants = self.shards.get(shard.name + WANT_SUFFIX)
        out = {}
        for key in (wants.entries if wants is not None else ()):
            if key.startswith(REPLY_PREFIX):
                parts = key.split("/")
                try:
                    out[(parts[1], float(parts[2]))] = int(parts[3])
                except (IndexError, ValueError):
                    continue  # not as Allot writes it: ignored
        for key, left in self._peer_left(shard.name, now).items():  # answers given over the peer channel (peers.py)
            out[key] = min(left, out.get(key, left))
        return out

    def _returnable_of(self, shard, qid: str, now: float) -> int:
        """Milli-GPU of `qid` that other replicas' slices in `shard` could give back: each slice whole, or what its holder says is left."""
        answers = self._answers(shard, now)
        return sum(min(m, answers.get((who, exp), m)) for m, exp, who in self._foreign(shard, now)[1].get(qid, ()))

    def _doubled_of(self, shard, qid: str, now: float) -> int:
        """Milli-GPU of `qid` in other replicas' sums of slice pods (webhook/ledger/admitted.py) this replica may count twice.

        An unseen sum written before its writer's pod watch reached a pod creation this replica
        shows (that pod may be one of its own: its writer moves the pods it sees to a seen
        sum within WANT_TICK while a want lives), and a seen sum this replica's watch has not
        reached yet (it will count those pods itself).
        """
        mine, added = self._pods_rv(), self._pods_added_rv()
        if mine is None or not mine.isdigit():
            return 0
        total = 0
        for key, entry in shard.entries.items():
            if not key.startswith(admitted.PREFIX) or entry[2] == self.replica or entry[0] <= now:
                continue
            rv = admitted.unseen_rv(key)
            if (rv is not None and added is not None and rv < added) or (
                    rv is None and admitted.seen_rv(key) is not None and not admitted.shown_by(key, mine)):
                total += sum(h[1] for h in entry[1] if h[0] == qid)
        return total

    # -- admitting inside a slice --

    def _in_slices(self, by_shard: dict, now: float, loop) -> str | None:
        """Admit inside this replica's slices if every shard's part fits its slice; no write. None: admitted; else why not.

        Safe without a view check: the slice was written with a compare-and-swap against the
        shard's holds and the quota's free capacity, and every other replica counts it whole.
        While a write is in flight (it will replace the slice), an admission must fit both the
        slice written and the one being written, so it is covered whichever way the write ends.
        """
        need: dict[str, dict[str, int]] = {}
        for name, per in by_shard.items():
            shard = self.shards[name]
            exp = min(shard.slice_exp, shard.flight["exp"]) if shard.flight else shard.slice_exp
            if not shard.slice:
                return "wanted" if self._foreign(shard, now)[0] else "none"
            if exp - now < SLICE_MARGIN:
                return "short"
            want = need.setdefault(name, {})
            for holds, _ in per.values():
                for h in holds:
                    want[h[0]] = want.get(h[0], 0) + h[1]
            for qid, milli in want.items():
                spent = shard.spent.get(qid, 0)
                if shard.flight is not None:
                    extra = shard.flight["spent"].get(qid, 0)
                    if extra + milli > shard.flight["slice"].get(qid, 0):
                        return "short"
                    spent += extra
                if spent + milli > shard.slice.get(qid, 0):
                    return "short"
        for name, per in by_shard.items():
            shard = self.shards[name]
            into = shard.flight["spent"] if shard.flight is not None else shard.spent
            for qid, milli in need[name].items():
                into[qid] = into.get(qid, 0) + milli
            for key, (holds, expires_at) in per.items():
                shard.unrecorded[key] = (holds, expires_at)
            left = sum(shard.slice.values()) - sum(shard.spent.values())
            if (now - shard.slice_at >= SLICE_RENEW or 2 * left < sum(shard.slice.values())) and not shard.pending:
                self._kick_empty(shard, loop)  # renew early, in the background: the next admissions need no wait
            if left <= 0 or (shard.flight is not None and sum(shard.flight["spent"].values()) >= sum(shard.slice.values())
                             - sum(shard.spent.values())):
                self._answer(shard, 0, loop)  # spent: say so now, so others' denials need not wait for it
        self.slice_admits += 1
        return None

    async def admit_in_slices(self, by_shard: dict, now: float, loop, timeout: float) -> str | None:
        """`_in_slices`, and when the slice written is spent while its renewal is in flight with room, once more after it lands.

        Waiting for the write in flight (it replaces the slice) costs less than a write of
        this request's own behind it, and cannot conflict.
        """
        path = self._in_slices(by_shard, now, loop)
        if path != "short":
            return path
        flights = []
        for name, per in by_shard.items():
            flight = self.shards[name].flight
            need: dict[str, int] = {}
            for holds, _ in per.values():
                for h in holds:
                    need[h[0]] = need.get(h[0], 0) + h[1]
            if flight is None or any(flight["spent"].get(q, 0) + m > flight["slice"].get(q, 0) for q, m in need.items()):
                return path  # no renewal in flight, or it has no room for this request either
            flights.append(flight)
        start = time.perf_counter()
        try:
            await asyncio.wait_for(asyncio.gather(*(f["done"].wait() for f in flights)), timeout)
        except (asyncio.TimeoutError, TimeoutError):
            return path
        again = self._in_slices(by_shard, time.time(), loop)
        if again is None:
            self.escrow_metrics.commit.labels("renewed").observe(time.perf_counter() - start)
        return again

    # -- sizing and writing --

    def _sliceable(self) -> dict[str, list]:
        """shard name -> the specs sliced in it: quotas checked by a plain nominal (no cohort, per-model or memory cap)."""
        state_for = getattr(self.state.engine, "state_for", None)
        if state_for is None:  # a stand-in engine: nothing to size a slice by
            return {}
        out: dict[str, list] = {}
        for spec in state_for(self.state.snapshot).quota.specs:
            if spec.nominal is not None and not spec.cohort and not spec.per_model and spec.gpu_memory is None:
                out.setdefault(self.root_of(spec.id), []).append(spec)
        return out

    def _slice_for(self, shard, now: float) -> dict[str, int]:
        """The slice to claim in this write: per sliced quota, free capacity / (2 x replicas writing it), with peers at least SLICE_AHEAD write times of the measured rate; {} when not wanted.

        None while a want lives in the shard (this replica's or another's): the waiting
        request gets what slices free. None in an idle shard that is not kept. Free capacity
        is what this replica's engine sees: live pods, its own holds and every other
        replica's holds and slices.
        """
        if shard.name not in self.kept and now - shard.used_at >= SLICE_IDLE:
            return {}
        if self.stale() is not None:  # sized from a view nobody vouches for: claim nothing, give back what is held
            return {}
        if self._foreign(shard, now)[0]:
            return {}
        state_for = getattr(self.state.engine, "state_for", None)
        if state_for is None:
            return {}
        quota = state_for(self.state.snapshot).quota  # the usage every decision on this snapshot checks
        others = {e[2] for e in shard.entries.values() if e[2] != self.replica and e[0] > now}
        foreign = self._foreign(shard, now)[1]
        out = {}
        for spec in quota.specs:
            if (spec.nominal is None or spec.cohort or spec.per_model or spec.gpu_memory is not None
                    or self.root_of(spec.id) != shard.name):
                continue
            # What this replica may take: the free capacity not in other replicas' slices. Its
            # fair share: 1 / SLICE_SPREAD of the free capacity counting those slices as free,
            # split among the replicas writing the shard.
            avail = spec.nominal - quota.used[spec.index]
            held = sum(m for m, *_ in foreign.get(spec.id, ()))
            # A replica alone in the shard counts one more: another may be starting (its keeper claims soon).
            size = min(avail, (avail + held) // (SLICE_SPREAD * (1 + max(1, len(others)))))
            if self.peers is not None:  # (without the channel, a share held here costs the others a want: two writes)
                size = min(avail, max(size, int(shard.rate * max(0.05, SLICE_AHEAD * shard.write_s))))
            size -= size % 1000  # whole GPUs: a fraction of one would be stranded by whole-GPU pods
            if size >= SLICE_MIN:
                out[spec.id] = size
        return out

    def _escrowed(self, shard, entries: dict, now: float) -> dict:
        """Add the sums of the slice's pods (webhook/ledger/admitted.py), the new slice and this replica's want to `entries`; returns the flight record."""
        if shard.name.endswith(WANT_SUFFIX):  # a want object: this replica's want and its answer to others' wants
            mine = f"{REPLY_PREFIX}{self.replica}/"
            for key in [k for k in entries if k.startswith(mine)]:
                del entries[key]
            answer = self._reply.get(shard.name)
            if answer is not None and float(answer.split("/")[2]) > now:
                entries[answer] = [float(answer.split("/")[2]), [], self.replica, None]
            if shard.wanting > 0:
                entries[self.want_key] = [shard.want_exp, [], self.replica, None]
            else:
                entries.pop(self.want_key, None)
            return {"slice": {}, "exp": 0.0, "spent": {}, "recorded": {}, "at": now}
        snapshot = self.state.snapshot
        recorded = admitted.write(entries, shard.unrecorded, replica=self.replica, pods_rv=self._pods_rv(), now=now,
                                  settle=SETTLE, shows=lambda key: snapshot.pod(*key.partition("/")[::2]) is not None)
        if shard.wanting > 0:
            entries[self.want_key] = [shard.want_exp, [], self.replica, None]
        else:
            entries.pop(self.want_key, None)
        if shard.slice and now > shard.slice_at:  # the rate the slice being replaced was spent at (halved per idle renewal)
            shard.rate = max(sum(shard.spent.values()) / (now - shard.slice_at), shard.rate / 2)
        new = self._slice_for(shard, now)
        exp = now + SLICE_TTL
        if new:
            entries[self.escrow_key] = [exp, [[q, m, 0, None, m] for q, m in sorted(new.items())], self.replica, None]
        else:
            entries.pop(self.escrow_key, None)
        self._advertise(entries, exp if new else 0.0)  # the peer channel's address beside the slice (peers.py)
        if new and not shard.slice:
            self.escrow_metrics.events.labels("claimed").inc()
        return {"slice": new, "exp": exp if new else 0.0, "spent": {}, "recorded": recorded, "at": now,
                "done": asyncio.Event()}

    def _landed(self, shard, ok: bool, known: bool = True) -> None:
        """The write in flight ended: on success its slice replaces the old one; else what it spent stays on the old.

        A failure whose outcome is not `known` (no answer, a 5xx: the write may have been
        stored) leaves no slice to admit in: the shard may now hold the new, smaller one.
        Until the next write lands every admission writes; what was spent stays covered by
        whichever slice the shard holds, and is recorded by that next write.
        """
        flight, shard.flight = shard.flight, None
        if not known:
            shard.slice, shard.slice_exp = {}, 0.0
        if flight is None:
            return
        if "done" in flight:
            flight["done"].set()
        if ok:
            shard.slice, shard.slice_exp, shard.slice_at = flight["slice"], flight["exp"], flight["at"]
            shard.spent = flight["spent"]
            for key, held in flight["recorded"].items():
                if shard.unrecorded.get(key) is held:
                    del shard.unrecorded[key]
        else:
            for qid, milli in flight["spent"].items():
                shard.spent[qid] = shard.spent.get(qid, 0) + milli

    def unspent(self, shard) -> int:
        """Milli-GPU of this replica's slice in `shard` (as written) not yet spent, counting the write in flight."""
        spent = sum(shard.spent.values()) + (sum(shard.flight["spent"].values()) if shard.flight else 0)
        return max(0, sum(shard.slice.values()) - spent)

    def _queued_empty(self, shard) -> bool:
        return any(b[0] is None for b in shard.pending)

    # -- returning on demand --

    def _escrow_read(self, shard) -> None:
        """A read brought a newer version of `shard` or its want object (on the loop): give the slice back if another replica wants."""
        if shard.name.endswith(WANT_SUFFIX):
            shard = self.shards.get(shard.name[:-len(WANT_SUFFIX)])
            if shard is None:
                return
        if not (shard.slice or shard.unrecorded or (shard.flight and shard.flight["slice"])):
            return
        if not self._wanted_elsewhere(shard, time.time()):
            return
        loop = asyncio.get_running_loop()
        if shard.slice:  # answer at once, in the small want object: what of the slice in the shard can come back
            self._answer(shard, self.unspent(shard), loop)
        if not self._queued_empty(shard):
            self.escrow_metrics.events.labels("returned").inc()
            self._kick_empty(shard, loop)

    def _answer(self, shard, left: int, loop) -> None:
        """Write, in the want object, that at most `left` of this replica's slice in `shard` (as written) can come back."""
        wants = self._wants_of(shard)
        answer = f"{REPLY_PREFIX}{self.replica}/{shard.slice_exp!r}/{left}"
        if self._reply.get(wants.name) == answer or answer in wants.entries:
            return
        self._reply[wants.name] = answer
        self.escrow_metrics.events.labels("answered").inc()
        if not self._queued_empty(wants):
            self._kick_empty(wants, loop)

    def returnable(self, decision, mine: dict | None = None) -> dict[tuple[str, str], int] | None:
        """(shard, quota id) -> milli-GPU requested, where other replicas' slices alone stand between `decision`'s denial and an admission; None: it stands.

        Requests already waiting on this replica come first: a denial whose request would not
        fit even if every other replica's slice came back and the earlier waiters took their
        share stands at once (`mine`: this request's own share of the waiting, when it waits).
        """
        denials = decision.denials
        if decision.allowed or not denials:
            return None
        now = time.time()
        out: dict[tuple[str, str], int] = {}
        for r in denials:
            if r.code != "QuotaExceeded":
                return None
            shard = self.shards.get(self.root_of(r.block))
            if shard is None:
                return None
            held = self._returnable_of(shard, r.block, now) + self._doubled_of(shard, r.block, now)
            d = r.data
            key = (shard.name, r.block)
            ahead = self._waiting.get(key, 0) - (mine or {}).get(key, 0)
            if not held or d["used"] - held + ahead + d["requested"] > d["nominal"] + d["borrowable"]:
                return None
            out[key] = d["requested"]
        return out

    async def slices_back(self, decision, redo, budget_end: float):
        """Wait, within the deadline, for other replicas to return the slices that alone deny `decision`; decide again after each change.

        Returns (decision, doc, cause) of the last decision made, or None if no wait applied
        (the denial stands as decided). A holder that is alive answers a want within a
        watch round trip; after WANT_PATIENCE only slices that expire before the deadline
        are waited for (a replica that died holding one).
        """
        wanted = self.returnable(decision)
        if not wanted:
            return None
        for key, milli in wanted.items():
            self._waiting[key] = self._waiting.get(key, 0) + milli
        metrics = self.escrow_metrics
        start = time.perf_counter()
        shards = [self.shards[n] for n in sorted({name for name, _ in wanted})]
        end = budget_end - max(0.05, 4 * max(s.write_s for s in shards))  # time left to commit what is admitted
        loop = asyncio.get_running_loop()
        wanting = [self._wants_of(s) for s in shards]
        for s in wanting:
            s.wanting += 1
            want_exp = time.time() + max(0.0, end - start) + 1.0
            if want_exp > s.want_exp + 1.0 or s.wanting == 1:
                s.want_exp = max(s.want_exp, want_exp)
                if not self._queued_empty(s):
                    self._kick_empty(s, loop)
        landed = None
        result, out = "timeout", None
        try:
            while True:
                nowp = time.perf_counter()
                if landed is None and all(self.want_key in s.entries for s in wanting):
                    landed = nowp
                left = end - nowp
                if left <= 0:
                    break
                if landed is not None and nowp - landed > WANT_PATIENCE:
                    now = time.time()
                    soonest = min((exp for s in shards for per in self._foreign(s, now)[1].values() for _, exp, _ in per),
                                  default=float("inf"))
                    if soonest - now > left:
                        result = "gave_up"
                        break
                    wait = soonest - now + 0.05
                elif landed is None:
                    wait = 0.05  # the want's own write lands unseen by the watch: look again soon
                    for s in wanting:
                        if self.want_key not in s.entries and not self._queued_empty(s) and not s.flushing:
                            self._kick_empty(s, loop)  # the want's write lost a 409: write it again
                else:
                    wait = landed + WANT_PATIENCE - nowp
                await _next_read(shards + wanting, min(wait, left, WANT_TICK))  # (also: this replica's pod watch moves on)
                gate = getattr(self.state, "gate", None)
                gate.run(self._forget_shown) if gate is not None else self._forget_shown()
                out = redo()
                if asyncio.iscoroutine(out) or isinstance(out, asyncio.Future):  # decided off the loop (serve's gate)
                    out = await out
                if out[0].allowed or out[2] is not None:
                    result = "admitted" if out[0].allowed else "failed"
                    return out
                if self.returnable(out[0], wanted) is None:
                    result = "denied"
                    return out
            return out
        finally:
            metrics.want.labels(result).observe(time.perf_counter() - start)
            for key, milli in wanted.items():
                self._waiting[key] -= milli
            for s in wanting:
                s.wanting -= 1
                if s.wanting == 0 and not self._queued_empty(s):
                    self._kick_empty(s, loop)  # drop the want: slices may be claimed again

    # -- keeping slices ahead of demand --

    async def keep_slices(self) -> None:
        """Background task: claim a slice in the sliced quotas' shards, renew it before it stops admitting, return what idles unkept."""
        loop = asyncio.get_running_loop()
        while True:
            cluster = getattr(self.state, "cluster", None)
            ready = self.synced and (cluster is None or cluster.synced)
            if ready:  # sized from a complete view of live pods only
                try:
                    wanted = self._keep_once(time.time(), loop)
                except Exception:  # noqa: BLE001 - a policy mid-reload: looked at again next tick
                    wanted = False
            else:
                wanted = False
            # Until the first views are in, look often: the first slices are claimed as soon as they can be sized
            # (a replica that turned ready just before a burst answered its first requests with a write each).
            await asyncio.sleep(WANT_TICK if wanted or not ready else KEEP_TICK)

    def _keep_once(self, now: float, loop) -> bool:
        """One look at every shard; True while another replica's want lives in a shard this one holds in."""
        gate = getattr(self.state, "gate", None)  # (the ledger's holds: never under a deciding thread)
        gate.run(self._forget_shown) if gate is not None else self._forget_shown()
        wanted_any = False
        stale = self.stale() is not None  # (a stale replica hands its slices back as soon as a write lands)
        sliceable = self._sliceable()
        for name in sliceable:
            self.shards.setdefault(name, self._new_shard(name))
        order = sorted(sliceable, key=lambda n: -self.shards[n].used_at)
        self.kept = set(order[:KEEP_MAX])
        for shard in list(self.shards.values()):
            holding = bool(shard.slice or shard.unrecorded)
            wanted = holding and self._wanted_elsewhere(shard, now)
            wanted_any = wanted_any or wanted
            if shard.flushing or self._queued_empty(shard):
                continue
            if holding:
                due = (shard.slice_exp - now < SLICE_MARGIN + KEEP_TICK  # renew before it stops admitting
                       or (shard.unrecorded and now - shard.slice_at >= SLICE_RENEW)  # expired holds leave the unseen sum
                       or (shard.name not in self.kept and now - shard.used_at >= SLICE_IDLE)
                       or ((wanted or stale) and bool(shard.slice))  # give it back
                       or ((wanted or now - shard.slice_at >= SEEN_WRITE) and self._shows_any(shard)))  # stop double counts
            else:
                due = shard.name in self.kept and bool(self._slice_for(shard, now))  # a write only when a slice is worth it
            if due:
                self.escrow_metrics.events.labels("kept").inc()
                self._kick_empty(shard, loop)
        return wanted_any

    def _shows_any(self, shard) -> bool:
        """Whether the snapshot shows a pod of the shard's unseen sum (a reader that shows it too counts it twice until the next write)."""
        snapshot = self.state.snapshot
        return any(snapshot.pod(*key.partition("/")[::2]) is not None for key in shard.unrecorded)


async def _next_read(shards: list, timeout: float) -> None:
    """Wait up to `timeout` for a read (the watch, a get) to move any of `shards` to a newer version."""
    events = []
    for s in shards:
        if s.changed is None:
            s.changed = asyncio.Event()
        events.append(s.changed)
    waits = [asyncio.ensure_future(e.wait()) for e in events]
    try:
        await asyncio.wait(waits, timeout=max(0.0, timeout), return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waits:
            w.cancel()
