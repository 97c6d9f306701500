"""`HoldBook`: what a workload hold was taken for (the object's uid, the demand it is sized to), beside the shared ledger.

The holds themselves live in the snapshot's `ReservationLedger` (policy/cluster/ledger.py),
which only knows keys and amounts. Releasing a workload's hold early needs two more facts,
kept here per ledger (so, like the holds, they outlive any one engine):

- the uid of the object the hold was admitted for: a late watch DELETED of an old
  `team-a/Deployment/x` must not release the hold of a new `x` created in between;
- the demand (milli-GPU, bytes) the hold is sized to now: a scale down releases
  `demand - new demand`, so the same scale decided twice (a client's retry, the API
  server's re-invocation) releases once, never twice.

With a cluster ledger (webhook/ledger/cluster.py) the book also keeps which holds ended
here (deleted, finished): another replica's copy of such a hold in a shard is not counted
again, and is dropped from the shard by the next prune.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field

PRUNE_AT = 4096  # entries kept for holds that ended by themselves (expiry, pods took them) are pruned past this
ENDED_AT = 4096  # ended holds remembered; the oldest are forgotten past this (their shard entries have expired by then)


@dataclass(slots=True)
class HoldBook:
    """Per-ledger facts about workload holds: key -> uid, key -> (milli-GPU, bytes) the hold is sized to."""

    uids: dict[str, str | None] = field(default_factory=dict)
    demand: dict[str, tuple[int, int]] = field(default_factory=dict)
    ended: dict[str, str | None] = field(default_factory=dict)  # key -> uid of the object whose hold ended here
    # A cluster ledger's hook, called (key, uid, holds released, demand now) when the watch shows a held
    # workload scaled down unseen by the webhook: the release is written for every replica, not kept here.
    on_watched_shrink: object = None

    def record(self, key: str, uid: str | None, demand: tuple[int, int], live: dict) -> None:
        """Remember what the hold under `key` stands for now; `live` is the ledger's holds (for pruning)."""
        if len(self.demand) > PRUNE_AT:
            for k in [k for k in self.demand if k not in live]:
                self.forget(k)
        if uid is not None or key not in self.uids:
            self.uids[key] = uid
        self.demand[key] = demand
        if key in self.ended:
            del self.ended[key]  # it holds again (a new object of that name, or admitted again)

    def owns(self, key: str, uid: str | None) -> bool:
        """Whether an event about the object `uid` may release the hold `key` (unknown uids on either side: yes)."""
        held = self.uids.get(key)
        return held is None or uid is None or held == uid

    def end(self, key: str, uid: str | None) -> None:
        """Remember that the hold of object `uid` under `key` ended (released here); forget what it was sized to."""
        uid = uid if uid is not None else self.uids.get(key)
        self.forget(key)
        self.ended.pop(key, None)
        self.ended[key] = uid
        if len(self.ended) > ENDED_AT:
            del self.ended[next(iter(self.ended))]

    def has_ended(self, key: str, uid: str | None) -> bool:
        """Whether the hold of object `uid` under `key` ended here (an unknown uid matches only an unknown one)."""
        return key in self.ended and self.ended[key] == uid

    def forget(self, key: str) -> None:
        """Drop what is known about `key` (its hold was released)."""
        self.uids.pop(key, None)
        self.demand.pop(key, None)


_BOOKS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def book_of(ledger) -> HoldBook:
    """The book of reservation ledger `ledger` (made on first use, freed with the ledger)."""
    book = _BOOKS.get(ledger)
    if book is None:
        book = _BOOKS[ledger] = HoldBook()
    return book
