"""What each gang's members have shown at admission: their pod set and shape, so later plans know the gang."""

from __future__ import annotations

from typing import Mapping

from policy.subject.model import PodSet

Seen = Mapping[str, tuple[str | None, PodSet]]  # member pod name -> (its set, its shape)


class Members:
    """Shapes of the members each gang has shown at admission (gang key -> pod name -> (set, shape)); bounded."""

    __slots__ = ("_by_gang", "limit", "per_gang")

    def __init__(self, limit: int = 8192, per_gang: int = 1024):
        self._by_gang: dict[str, dict[str, tuple[str | None, PodSet]]] = {}
        self.limit, self.per_gang = limit, per_gang

    def note(self, key: str, name: str | None, set_name: str | None, shape: PodSet) -> None:
        """Remember one member's set and shape (the oldest gang is dropped past `limit`)."""
        if not name:
            return
        seen = self._by_gang.get(key)
        if seen is None:
            if len(self._by_gang) >= self.limit:
                del self._by_gang[next(iter(self._by_gang))]
            seen = self._by_gang[key] = {}
        if name in seen or len(seen) < self.per_gang:
            seen[name] = (set_name, shape)

    def of(self, key: str) -> Seen:
        """The members seen of gang `key` ({} when none)."""
        return self._by_gang.get(key) or {}

    def adopt(self, old: "Members") -> None:
        """Take over what another planner had seen (a policy reload)."""
        for key, seen in old._by_gang.items():
            self._by_gang.setdefault(key, {}).update(seen)
