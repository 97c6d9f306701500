"""Held capacity by reservation id, with an expiry, until the gang's pods are seen bound.

The ledger only keeps records; `PlacementIndex` charges and frees the nodes, so a
reservation's slots are ordinary allocations on the nodes (keys `("resv", id, n)`)
and free capacity is exact whatever the order of reserve / bind / release / expire.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field

from policy.placement.devices import Demand
from policy.placement.result import PlacementResult

RESERVATION_ANNOTATION = "allot.dev/reservation"  # set on gang members by the mutating webhook


@dataclass(slots=True)
class Reservation:
    """One gang's held slots: slot key -> (node, demand)."""

    id: str
    expires_at: float
    slots: dict[tuple, tuple[str, Demand]] = field(default_factory=dict)
    next_slot: int = 0

    def new_key(self) -> tuple:
        """A fresh allocation key for one held pod."""
        self.next_slot += 1
        return ("resv", self.id, self.next_slot)

    def find(self, node: str, demand: Demand) -> tuple | None:
        """A slot for a pod of `demand` bound to `node`: one on that node first, else any of that shape."""
        shape = (demand.whole, demand.milli, demand.memory)
        fallback = None
        for key, (where, held) in self.slots.items():
            if (held.whole, held.milli, held.memory) != shape:
                continue
            if where == node:
                return key
            if fallback is None:
                fallback = key
        return fallback


class Ledger:
    """Reservations by id, and their expiries (a heap, so `due` costs O(log n) per expired id)."""

    __slots__ = ("by_id", "_heap")

    def __init__(self) -> None:
        self.by_id: dict[str, Reservation] = {}
        self._heap: list[tuple[float, str]] = []  # (expires_at, id); stale entries skipped lazily

    def add(self, resv: Reservation) -> None:
        """Record a new reservation."""
        self.by_id[resv.id] = resv
        heapq.heappush(self._heap, (resv.expires_at, resv.id))

    def __contains__(self, rid: str) -> bool:
        return rid in self.by_id

    def get(self, rid: str) -> Reservation | None:
        """The live reservation of that id, if any."""
        return self.by_id.get(rid)

    def extend(self, rid: str, expires_at: float) -> bool:
        """Push a live reservation's expiry later (a member arrived: the gang is alive); False if none."""
        resv = self.by_id.get(rid)
        if resv is None or expires_at <= resv.expires_at:
            return resv is not None
        resv.expires_at = expires_at
        heapq.heappush(self._heap, (expires_at, rid))
        return True

    def due(self, now: float) -> list[str]:
        """Ids whose expiry is at or before `now`."""
        out: list[str] = []
        heap = self._heap
        while heap and heap[0][0] <= now:
            at, rid = heapq.heappop(heap)
            resv = self.by_id.get(rid)
            if resv is not None and resv.expires_at == at and rid not in out:
                out.append(rid)
        return out


class Reservations:
    """`PlacementIndex`'s reserve / release / expire: slots are node allocations, so freeing is exact."""

    # Provided by PlacementIndex: the ledger, the nodes, and `_mutate(state, change)` which
    # applies a node change and pushes it into the aggregates.
    reservations: Ledger
    nodes: dict

    def reserve(self, reservation_id: str, result: PlacementResult, expires_at: float) -> None:
        """Hold a fitting result's capacity under `reservation_id` until bound, released or expired."""
        if not result.fits:
            raise ValueError("only a fitting placement can be reserved")
        resv = Reservation(reservation_id, expires_at)
        slots = []
        for node_name, i, count in result.assignments:
            demand = result.demands[i]
            held = Demand(demand.whole, demand.milli, demand.memory, cpu=demand.cpu, ram=demand.ram)  # a held slot holds cpu and memory too
            slots.extend((resv.new_key(), node_name, held) for _ in range(count))
        self._hold(resv, slots, result.per_gpu)

    def restore(self, held: Reservation, per_gpu: int | None) -> None:
        """Hold again, slot for slot, a reservation taken from another index over the same nodes (a policy reload)."""
        resv = Reservation(held.id, held.expires_at, next_slot=held.next_slot)
        self._hold(resv, [(key, node, demand) for key, (node, demand) in held.slots.items()], per_gpu)

    def _hold(self, resv: Reservation, slots: list, per_gpu: int | None) -> None:
        """Record `resv` and charge each (slot key, node, demand) to its node (nodes gone since are skipped)."""
        self.release(resv.id)
        self.reservations.add(resv)
        for key, node_name, held in slots:
            state = self.nodes.get(node_name)
            if state is None:
                continue
            self._mutate(state, lambda: state.add(key, held, per_gpu))
            resv.slots[key] = (node_name, held)

    def release(self, reservation_id: str) -> bool:
        """Free everything still held by the reservation; False when there is none."""
        resv = self.reservations.by_id.pop(reservation_id, None)
        if resv is None:
            return False
        for key, (node_name, _demand) in resv.slots.items():
            state = self.nodes.get(node_name)
            if state is not None:
                self._mutate(state, lambda: state.remove(key))
        return True

    def expire(self, now: float) -> list[str]:
        """Release reservations whose expiry is at or before `now`; returns their ids."""
        due = self.reservations.due(now)
        for rid in due:
            self.release(rid)
        return due

    def _consume(self, rid: str, node_name: str, demand: Demand) -> None:
        resv = self.reservations.get(rid)
        if resv is None:
            return
        key = resv.find(node_name, demand)
        if key is None:
            return
        where, _held = resv.slots.pop(key)
        state = self.nodes.get(where)
        if state is not None:
            self._mutate(state, lambda: state.remove(key))
        if not resv.slots:
            del self.reservations.by_id[rid]  # every member is bound: nothing left to hold

