"""Held capacity by reservation id, with an expiry, until the gang's pods are seen bound.

The ledger only keeps records; `PlacementIndex` charges and frees the nodes, so a
reservation's slots are ordinary allocations on the nodes (keys `("resv", id, n)`)
and free capacity is exact whatever the order of reserve / bind / release / expire.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from policy.placement.devices import Demand

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
    """Reservations by id, and their expiries."""

    __slots__ = ("by_id",)

    def __init__(self) -> None:
        self.by_id: dict[str, Reservation] = {}

    def __contains__(self, rid: str) -> bool:
        return rid in self.by_id

    def get(self, rid: str) -> Reservation | None:
        """The live reservation of that id, if any."""
        return self.by_id.get(rid)

    def due(self, now: float) -> list[str]:
        """Ids whose expiry is at or before `now`."""
        return [rid for rid, r in self.by_id.items() if r.expires_at <= now]
