"""`ReservationLedger`: quota holds of admitted pods the cluster has not shown yet, outliving any one engine.

A policy reload builds a new Engine (and a new `QuotaLedger` of usage by quota index);
the holds live here instead, on the cluster snapshot, keyed by reservation id
(`namespace/name` of the pod) with an expiry and the charged amounts per quota id.
Every engine's `QuotaLedger` mirrors them through a weak listener, so the engine
serving after a reload sees the same holds. A hold ends when the snapshot shows
the pod live (`ClusterSnapshot.apply` releases it: the pod then carries the charge)
or when `expire(now)` passes it.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Callable, Mapping

# (quota id, milli-GPU, bytes of GPU memory, GPU model or None, milli-GPU of that model)
Hold = tuple[str, int, int, "str | None", int]
Listener = Callable[[tuple[Hold, ...], int], None]
WORKLOAD_PREFIX = "wl:"  # `wl:namespace/Kind/name`: the hold of an admitted workload object, taken from by its pods


@dataclass(frozen=True, slots=True)
class WorkloadChange:
    """A change of workload hold `key` a decision made, for a cluster ledger to write (engine.py appends them to `taken`).

    `op`: "hold" (admitted or scaled up: add `holds`, demand now `demand`), "take" (pod
    `pod` moved `holds` out of it), "give" (a pod decided again gave back `holds`),
    "shrink" (scaled down to `demand`; `holds` is what this replica released), "drop"
    (deleted or suspended: the whole hold of object `uid`).
    """

    op: str
    key: str
    holds: tuple = ()
    expires_at: float = 0.0
    uid: str | None = None
    demand: tuple | None = None
    pod: str | None = None


@dataclass(frozen=True, slots=True, eq=False)
class GangChange:
    """A gang domain a decision newly held (gang.py `settle`), for a cluster ledger to write: its plan and held slots.

    `slots` are (slot key, (node, Demand)) of the held pods; `planner` is the GangPlanner holding it
    here (a write refused or never answered lets go of it there).
    """

    key: str
    result: object
    slots: tuple
    next_slot: int
    expires_at: float
    planner: object = None


RELEASES = frozenset({"shrink", "drop"})  # changes that only lower a hold: written after the answer, never awaited


def pod_key(obj: Mapping) -> str:
    """`namespace/name` of a pod, the key holds and charges share (namespace defaults like the snapshot's)."""
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace') or 'default'}/{meta.get('name') or ''}"


class ReservationLedger:
    """Holds by reservation id: (expires_at, holds); listeners hear every hold added (+1) or dropped (-1)."""

    def __init__(self) -> None:
        self.holds: dict[str, tuple[float, tuple[Hold, ...]]] = {}
        self.next_expiry = float("inf")
        self.workloads = 0  # holds of admitted workload objects (keys `wl:`): pods only look for an owner's hold when some exist
        self.took: dict[str, tuple[str, tuple[Hold, ...]]] = {}  # pod key -> (workload key, holds it took): undone if decided again
        self._listeners: list[Callable[[], Listener | None]] = []

    def listen(self, method: Listener) -> None:
        """Call bound `method(holds, sign)` on every change, without keeping its object alive (engines come and go)."""
        ref = weakref.WeakMethod(method)
        self._listeners = [r for r in self._listeners if r() is not None] + [ref]

    def _tell(self, holds: tuple[Hold, ...], sign: int) -> None:
        for ref in self._listeners:
            target = ref()
            if target is not None:
                target(holds, sign)

    def reserve(self, key: str, holds: tuple[Hold, ...], expires_at: float) -> None:
        """Hold `holds` under `key` until the pod is seen or `expires_at` passes (replaces an older hold of `key`)."""
        if not holds:
            return
        self.release(key)
        self.holds[key] = (expires_at, holds)
        self.workloads += key.startswith(WORKLOAD_PREFIX)
        self.next_expiry = min(self.next_expiry, expires_at)
        self._tell(holds, +1)

    def add(self, key: str, holds: tuple[Hold, ...], expires_at: float) -> None:
        """Add `holds` to the hold of `key` (a workload scaled up while its pods still come), keeping the later expiry."""
        held = self.holds.get(key)
        if held is None:
            self.reserve(key, holds, expires_at)
            return
        if not holds:
            return
        self.holds[key] = (max(held[0], expires_at), held[1] + holds)
        self._tell(holds, +1)

    def take(self, key: str, wanted: tuple[Hold, ...]) -> tuple[Hold, ...]:
        """Move up to `wanted` out of the hold of `key` (a workload's pod now holds its own share); returns what was taken."""
        held = self.holds.get(key)
        if held is None:
            return ()
        left = [list(h) for h in held[1]]
        taken: list[Hold] = []
        for qid, milli, memory, model, model_milli in wanted:
            for h in left:
                if h[0] == qid and h[3] == model and (h[1] > 0 or h[2] > 0):
                    t = (qid, min(milli, h[1]), min(memory, h[2]), model, min(model_milli, h[4]))
                    h[1], h[2], h[4] = h[1] - t[1], h[2] - t[2], h[4] - t[4]
                    taken.append(t)
                    break
        if not taken:
            return ()
        rest = tuple(tuple(h) for h in left if h[1] > 0 or h[2] > 0)
        if rest:
            self.holds[key] = (held[0], rest)
        else:
            del self.holds[key]
            self.workloads -= key.startswith(WORKLOAD_PREFIX)
        self._tell(tuple(taken), -1)
        return tuple(taken)

    def note_take(self, pod: str, owner: str, holds: tuple[Hold, ...]) -> None:
        """Remember that the hold of `pod` took `holds` from `owner`'s, so deciding `pod` again gives them back first."""
        if holds:
            self.took[pod] = (owner, holds)

    def untake(self, pod: str) -> tuple[str, tuple[Hold, ...]] | None:
        """Give back to its workload's hold what `pod` took (a pod decided again, or whose hold was never committed); (owner, holds) given."""
        took = self.took.pop(pod, None)
        if took is None or took[0] not in self.holds:
            return None  # the workload's hold is gone (released, expired): nothing to give back to
        self.add(took[0], took[1], self.holds[took[0]][0])
        return took

    def held(self, key: str, qid: str) -> tuple[int, int, dict]:
        """(milli-GPU, bytes, milli-GPU by model) still held under `key` for quota `qid`."""
        held = self.holds.get(key)
        milli = memory = 0
        models: dict = {}
        for h in held[1] if held is not None else ():
            if h[0] == qid:
                milli, memory = milli + h[1], memory + h[2]
                if h[3] is not None:
                    models[h[3]] = models.get(h[3], 0) + h[4]
        return milli, memory, models

    def release(self, key: str) -> bool:
        """Drop the hold of `key`; False if there was none."""
        held = self.holds.pop(key, None)
        if held is None:
            return False
        if self.took:
            self.took.pop(key, None)  # the pod's hold ended (seen, expired): what it took stays taken
        self.workloads -= key.startswith(WORKLOAD_PREFIX)
        self._tell(held[1], -1)
        return True

    def expire(self, now: float) -> None:
        """Drop holds whose time has passed (cheap when none is due)."""
        if now < self.next_expiry:
            return
        self.next_expiry = float("inf")
        for key, (at, _) in list(self.holds.items()):
            if at <= now:
                self.release(key)
            else:
                self.next_expiry = min(self.next_expiry, at)

    def totals(self) -> dict[str, tuple[int, int, dict[str, int]]]:
        """quota id -> (milli-GPU, bytes, milli-GPU by model) over every hold (for tests and tools)."""
        out: dict[str, tuple[int, int, dict[str, int]]] = {}
        for _, holds in self.holds.values():
            for qid, milli, memory, model, model_milli in holds:
                used, mem, models = out.get(qid, (0, 0, {}))
                if model is not None:
                    models = {**models, model: models.get(model, 0) + model_milli}
                out[qid] = (used + milli, mem + memory, models)
        return out
