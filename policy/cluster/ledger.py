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
from typing import Callable, Mapping

# (quota id, milli-GPU, bytes of GPU memory, GPU model or None, milli-GPU of that model)
Hold = tuple[str, int, int, "str | None", int]
Listener = Callable[[tuple[Hold, ...], int], None]


def pod_key(obj: Mapping) -> str:
    """`namespace/name` of a pod, the key holds and charges share (namespace defaults like the snapshot's)."""
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace') or 'default'}/{meta.get('name') or ''}"


class ReservationLedger:
    """Holds by reservation id: (expires_at, holds); listeners hear every hold added (+1) or dropped (-1)."""

    def __init__(self) -> None:
        self.holds: dict[str, tuple[float, tuple[Hold, ...]]] = {}
        self.next_expiry = float("inf")
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
        self.next_expiry = min(self.next_expiry, expires_at)
        self._tell(holds, +1)

    def release(self, key: str) -> bool:
        """Drop the hold of `key`; False if there was none."""
        held = self.holds.pop(key, None)
        if held is None:
            return False
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
