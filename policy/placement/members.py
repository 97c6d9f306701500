"""What each gang's members have shown at admission: their pod set and shape, so later plans know the gang."""

from __future__ import annotations

from collections.abc import Iterable

from policy.subject.model import PodSet

Seen = Iterable[tuple[str | None, PodSet, int]]  # (set name, shape, how many members of that set and shape)


def shape_key(set_name: str | None, ps: PodSet) -> tuple:
    """What tells two members apart for planning: their set and their per-pod demand."""
    return (set_name, ps.gpus, ps.fraction, ps.gpu_memory, ps.gpu_product)


def tally(members: Iterable[tuple[str | None, PodSet]]) -> list[tuple[str | None, PodSet, int]]:
    """(set, shape, count) of some members, first seen first."""
    out: dict[tuple, list] = {}
    for set_name, ps in members:
        k = shape_key(set_name, ps)
        if k in out:
            out[k][2] += 1
        else:
            out[k] = [set_name, ps, 1]
    return [tuple(v) for v in out.values()]  # type: ignore[misc]


class Members:
    """Each gang's members seen at admission, counted by (set, shape), so a plan costs O(shapes), not O(members); bounded."""

    __slots__ = ("_by_gang", "limit", "per_gang")

    def __init__(self, limit: int = 8192, per_gang: int = 4096):
        # gang key -> (pod name -> shape key, shape key -> [set, shape, count])
        self._by_gang: dict[str, tuple[dict[str, tuple], dict[tuple, list]]] = {}
        self.limit, self.per_gang = limit, per_gang

    def note(self, key: str, name: str | None, set_name: str | None, shape: PodSet) -> None:
        """Remember one member's set and shape (once per pod name; the oldest gang is dropped past `limit`)."""
        if not name:
            return
        entry = self._by_gang.get(key)
        if entry is None:
            if len(self._by_gang) >= self.limit:
                del self._by_gang[next(iter(self._by_gang))]
            entry = self._by_gang[key] = ({}, {})
        names, groups = entry
        k = shape_key(set_name, shape)
        old = names.get(name)
        if old == k or (old is None and len(names) >= self.per_gang):
            return
        if old is not None:  # the same pod judged again with another shape (an UPDATE, a retry): move it
            groups[old][2] -= 1
            if not groups[old][2]:
                del groups[old]
        names[name] = k
        if k in groups:
            groups[k][2] += 1
        else:
            groups[k] = [set_name, shape, 1]

    def of(self, key: str, exclude: str | None = None) -> list[tuple[str | None, PodSet, int]]:
        """(set, shape, count) of the members seen of gang `key`, without pod `exclude` (the one being judged)."""
        entry = self._by_gang.get(key)
        if entry is None:
            return []
        names, groups = entry
        skip = names.get(exclude) if exclude else None
        out = []
        for k, (set_name, shape, count) in groups.items():
            n = count - 1 if k == skip else count
            if n > 0:
                out.append((set_name, shape, n))
        return out

    def adopt(self, old: "Members") -> None:
        """Take over what another planner had seen (a policy reload)."""
        for key, (names, groups) in old._by_gang.items():
            if key not in self._by_gang:
                self._by_gang[key] = (dict(names), {k: list(v) for k, v in groups.items()})
