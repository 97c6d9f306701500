"""The budget meter: milli-GPU x milliseconds accrued per budget from the pods that hold GPUs, per calendar period.

Pure: every time is passed in (UTC ms; the webhook passes the API server's time, webhook/meter/).
A pod accrues while it is bound to a node and live (not Succeeded/Failed, not being
deleted), at its `total_gpus` (a 0.25 share accrues 250 milli-GPU). Per budget the meter keeps
`used` up to `at`, the `rate` (milli-GPU) running now, and the recent rate changes, so the
accrual between any recent instant and now is exact (`accrued`): that is what lets a replica
take the value another one wrote at time T and add only its own accrual after T
(`adopt`), neither losing nor counting twice what ran around T. A period rolls over exactly
at its boundary: accrual is linear between events, so it is split there.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from policy.budget.calendar import Calendar, parse_time
from policy.cluster.ledger import pod_key
from policy.cluster.snapshot import is_live

_EMPTY: dict = {}
_ENDED = frozenset(("Succeeded", "Failed"))  # phases of a pod that holds nothing (policy.cluster.snapshot.is_live)
MEMO_KEPT = 65_536  # remembered (namespace, GPUs, model) -> charges; cleared when full
RECENT_KEPT = 4096  # rate changes kept per budget for `accrued` (older ones are folded: see `_prune`)


@dataclass(frozen=True, slots=True)
class BudgetSpec:
    """One compiled budget: what it meters and how admission answers when it is spent."""

    index: int
    id: str
    name: str
    location: str
    selector: Callable | None
    model: str | None
    amount: int  # milli-GPU-seconds per period
    period: str
    zone: str
    on_spent: str
    tier: str | None
    thresholds: tuple[int, ...]
    mode: str
    namespace: str | None = None  # the only namespace the selector can match, when it names one


def bound_start(pod: dict, t_ms: int) -> int:
    """When a live pod began to hold its GPUs: its `status.startTime`, else `t_ms` (first seen bound), never after `t_ms`."""
    start = parse_time((pod.get("status") or {}).get("startTime"))
    return t_ms if start is None or start > t_ms else start


def holds_gpus(pod: dict) -> bool:
    """A pod that accrues: bound to a node and live."""
    return bool((pod.get("spec") or {}).get("nodeName")) and is_live(pod)


class BudgetMeter:
    """Per-budget use of the current period, kept incrementally from pod events (no decision scans pods)."""

    def __init__(self, specs: list[BudgetSpec], to_workload: Callable[[dict], object], calendar: Calendar | None = None):
        self.specs = specs
        self.to_workload = to_workload
        self.calendar = calendar or Calendar()
        n = len(specs)
        self.rate = [0] * n  # milli-GPU held now
        self.used = [0] * n  # milli-GPU-ms of the current period up to `at`
        self.at = [0] * n  # UTC ms
        self.key = [""] * n  # the current period's key (`2025-06`)
        self.start = [0] * n
        self.end = [0] * n  # 0: no period opened yet
        self.previous: list[tuple[str, int] | None] = [None] * n  # (key, used) of the period before
        self.recent: list[deque] = [deque(maxlen=RECENT_KEPT) for _ in specs]  # (t_ms, delta milli-GPU), oldest first
        self.pods: dict[str, tuple[tuple[int, int], ...]] = {}  # pod key -> ((budget, milli), …) it accrues to
        self.index_of = {s.name: s.index for s in specs}
        # Per namespace, the budgets that can match there (every unkeyed one, then its own): one dict hit per event.
        self.unkeyed = tuple((s.index, s.model, s.selector) for s in specs if s.namespace is None)
        keyed: dict[str, list] = {}
        for s in specs:
            if s.namespace is not None:
                keyed.setdefault(s.namespace, []).append((s.index, s.model, s.selector))
        self.by_namespace = {ns: self.unkeyed + tuple(own) for ns, own in keyed.items()}
        # Where no candidate budget has a selector, the charges follow from (namespace, GPUs, model) alone:
        # remembered, so a pod event is one dict hit instead of a loop (the tail of `allot bench budget`).
        self.selector_free = {ns for ns, cands in self.by_namespace.items() if all(sel is None for _, _, sel in cands)}
        self.unkeyed_free = all(sel is None for _, _, sel in self.unkeyed)
        self.memo: dict[tuple, tuple] = {}
        self.clock: Callable[[], int] | None = None  # UTC ms of a watch event: the webhook sets the API server's clock
        self.last_ms = 0  # the latest time the meter was told; events use it when no clock is set

    # -- time --

    def now_ms(self, fallback_s: float | None = None) -> int:
        """The meter's time: its clock when set, else `fallback_s` (seconds), else the last time it was told."""
        if self.clock is not None:
            t = self.clock()
        elif fallback_s is not None:
            t = int(fallback_s * 1000)
        else:
            t = self.last_ms
        self.last_ms = max(self.last_ms, t)
        return t

    # -- pods --

    def charges_for(self, w) -> tuple[tuple[int, int], ...]:
        """(budget index, milli-GPU) of every budget whose `for` and model match `w`."""
        gpus = w.total_gpus
        if gpus <= 0:
            return ()
        model, ns = w.gpu_model, w.namespace
        found = self.memo.get((ns, gpus, model))  # it holds only what no selector decides
        if found is not None:
            return found
        found = tuple((i, gpus) for i, m, sel in self.by_namespace.get(ns, self.unkeyed)
                      if (m is None or m == model) and (sel is None or sel(w)))
        if (ns in self.selector_free) if ns in self.by_namespace else self.unkeyed_free:
            if len(self.memo) >= MEMO_KEPT:
                self.memo.clear()
            self.memo[(ns, gpus, model)] = found
        return found

    def attach(self, snapshot, t_ms: int) -> None:
        """Charge every bound pod of `snapshot` from its start (within the period), then follow its events at the clock's time."""
        self.last_ms = max(self.last_ms, t_ms)
        for i in range(len(self.specs)):
            self._advance(i, t_ms)
        if snapshot is None:
            return
        resident: list[tuple[int, int, int]] = []  # (start, budget, milli)
        for pod in snapshot.pods():
            if not holds_gpus(pod):
                continue
            charges = self.charges_for(self.to_workload(pod))
            if charges:
                start = bound_start(pod, t_ms)
                self.pods[pod_key(pod)] = charges
                resident.extend((start, i, milli) for i, milli in charges)
        for start, i, milli in sorted(resident):  # what ran before this replica saw it, as far as the pods tell
            self.rate[i] += milli
            self.used[i] += milli * (t_ms - max(start, self.start[i]))
            self.recent[i].append((start, milli))
        from policy.weaksub import subscribe_weakly

        subscribe_weakly(snapshot, self.on_event)

    def on_event(self, event: str, old: dict | None, new: dict | None) -> None:
        """Snapshot callback: at the meter's clock."""
        obj = new if new is not None else old
        if isinstance(obj, dict) and obj.get("kind", "Pod") == "Pod":
            self.pod_event(event, old, new, self.now_ms())
        clear = getattr(self.to_workload, "clear", None)  # the engine's one-event memo (policy/engine.py LastWorkload)
        if clear is not None:
            clear()

    def pod_event(self, event: str, old: dict | None, new: dict | None, t_ms: int) -> None:
        """A pod appeared, changed or went away at `t_ms`: its accrual starts, stops or moves between budgets."""
        obj = new if new is not None else old
        meta = obj.get("metadata") or _EMPTY
        key = f"{meta.get('namespace') or 'default'}/{meta.get('name') or ''}"  # policy.cluster.ledger.pod_key, inlined
        prev = self.pods.get(key)
        charges = ()
        if (event != "DELETED" and new is not None and (new.get("spec") or _EMPTY).get("nodeName")
                and not meta.get("deletionTimestamp") and (new.get("status") or _EMPTY).get("phase") not in _ENDED):
            w = self.to_workload(new)  # the test above is is_live(new), inlined
            charges = self.memo.get((w.namespace, w.total_gpus, w.gpu_model)) or self.charges_for(w)
        if prev is not None:
            if prev == charges:
                return  # a status update: it holds what it held
            del self.pods[key]
            self._change(prev, -1, t_ms)
        if charges:
            self.pods[key] = charges
            self._change(charges, 1, t_ms)

    def _change(self, charges: tuple[tuple[int, int], ...], sign: int, t_ms: int) -> None:
        """Start (`sign` 1) or stop (-1) `charges` at `t_ms`: fold each budget's accrual up to then, change its rate."""
        rate, used, at_of, end, recent = self.rate, self.used, self.at, self.end, self.recent
        for i, milli in charges:
            at = at_of[i]
            if at <= t_ms < end[i]:  # inlined _advance: the common case, no boundary on the way
                used[i] += rate[i] * (t_ms - at)
                at_of[i] = at = t_ms
            else:
                self._advance(i, t_ms)
                at = at_of[i]
            rate[i] += sign * milli
            recent[i].append((at, sign * milli))  # a bounded deque: the oldest change goes (see `_prune`)

    # -- periods --

    def _advance(self, i: int, t_ms: int) -> None:
        """Fold the accrual up to `t_ms` into `used`, rolling over at each period boundary on the way."""
        if self.end[i] == 0:
            s = self.specs[i]
            self.key[i], self.start[i], self.end[i] = self.calendar.period(s.period, s.zone, t_ms)
            self.at[i] = t_ms
            return
        at = self.at[i]
        if t_ms <= at:
            return  # never backwards: an earlier time folds nothing
        while t_ms >= self.end[i]:
            e = self.end[i]
            self.previous[i] = (self.key[i], self.used[i] + self.rate[i] * (e - at))
            s = self.specs[i]
            self.key[i], self.start[i], self.end[i] = self.calendar.period(s.period, s.zone, e)
            self.used[i], at = 0, e
        self.used[i] += self.rate[i] * (t_ms - at)
        self.at[i] = t_ms

    def used_at(self, i: int, t_ms: int) -> int:
        """Milli-GPU-ms of budget `i` used in the period holding `t_ms` (advances the meter to `t_ms`)."""
        self._advance(i, t_ms)
        return self.used[i]

    def accrued(self, i: int, since_ms: int, t_ms: int) -> int:
        """Milli-GPU-ms budget `i`'s pods accrued in [since_ms, t_ms] (exact while the rate changes since then are kept)."""
        if since_ms >= t_ms:
            return 0
        total = self.rate[i] * (t_ms - since_ms)
        for te, delta in reversed(self.recent[i]):  # rate(s) = rate now - the changes after s
            if te <= since_ms:
                break
            if te <= t_ms:
                total -= delta * (te - since_ms)
        return total

    def _prune(self, i: int, t_ms: int) -> None:
        """Drop the rate changes at or before `t_ms`: no value written or adopted is older than it any more."""
        recent = self.recent[i]
        while recent and recent[0][0] <= t_ms:
            recent.popleft()

    # -- sharing one meter between replicas (webhook/meter/) --

    def snapshot_values(self, t_ms: int) -> dict[str, dict]:
        """Each budget's {period, used, previous} at `t_ms` (what a meter object stores)."""
        out = {}
        for s in self.specs:
            used = self.used_at(s.index, t_ms)
            entry = {"period": self.key[s.index], "used": used}
            if self.previous[s.index] is not None:
                entry["previous"] = {"period": self.previous[s.index][0], "used": self.previous[s.index][1]}
            out[s.name] = entry
        return out

    def wrote(self, t_ms: int) -> None:
        """The values at `t_ms` are stored: their rate changes are no longer needed."""
        for i in range(len(self.specs)):
            self._prune(i, t_ms)

    def adopt(self, name: str, period: str, used: int, at_ms: int, t_ms: int, previous: tuple[str, int] | None = None) -> str:
        """Take `used` (milli-GPU-ms of `period` up to `at_ms`, written by any replica) plus this meter's own accrual since.

        Returns what happened: `adopted`, `previous` (it was the period before: the current
        one is this meter's own accrual since the boundary), `stale` (an older period, or
        another period key: ignored), `unknown` (no budget of that name).
        """
        i = self.index_of.get(name)
        if i is None:
            return "unknown"
        self._advance(i, t_ms)
        at_ms = min(at_ms, t_ms)
        if period == self.key[i]:
            self.used[i] = used + self.accrued(i, max(at_ms, self.start[i]), t_ms)
            self._prune(i, at_ms)
            return "adopted"
        s = self.specs[i]
        before = self.calendar.period(s.period, s.zone, self.start[i] - 1)[0]
        if period == before and at_ms < self.start[i]:
            self.previous[i] = (period, used + self.accrued(i, at_ms, self.start[i]))
            self._prune(i, at_ms)
            return "previous"
        if previous is not None and previous[0] == before and self.previous[i] is None:
            self.previous[i] = previous
        return "stale"

    def inherit(self, old: BudgetMeter, t_ms: int) -> list[str]:
        """Take over `old`'s use for budgets of the same name, period and zone (a policy reload); their names."""
        kept = []
        for s in self.specs:
            j = old.index_of.get(s.name)
            if j is None or (old.specs[j].period, old.specs[j].zone) != (s.period, s.zone):
                continue
            old._advance(j, t_ms)
            self._advance(s.index, t_ms)
            if old.key[j] == self.key[s.index]:
                self.used[s.index], self.previous[s.index] = old.used[j], old.previous[j]
                kept.append(s.name)
        return kept
