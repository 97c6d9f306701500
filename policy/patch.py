"""RFC 6902 JSONPatch construction against the original object, with RFC 6901 key escaping.

Patches must apply cleanly to the object the API server sent: a member added under a
map that does not exist yet (e.g. `/metadata/labels` absent) becomes ONE `add` of the
whole map, because `add /metadata/labels/team` would fail on a missing parent.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache

_MISSING = object()


def escape(key: str) -> str:
    """RFC 6901 reference token: `~` -> `~0` first, then `/` -> `~1` (`acme.io/x` -> `acme.io~1x`)."""
    return key.replace("~", "~0").replace("/", "~1")


@lru_cache(maxsize=4096)
def pointer(path: tuple[str, ...]) -> str:
    """A JSON pointer for a tuple of raw keys (memoized: the same few paths recur on every request)."""
    return "".join("/" + escape(p) for p in path)


def _lookup(obj: object, path: tuple[str, ...]) -> object:
    node = obj
    for part in path:
        # JSON objects are dicts: test that first (an ABC isinstance check costs a microsecond).
        if isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]  # a template inside a list (JobSet replicatedJobs[i], Ray workerGroupSpecs[i])
            continue
        if not (isinstance(node, dict) or isinstance(node, Mapping)) or part not in node:
            return _MISSING
        node = node[part]
    return node


def holds(obj: object, path: tuple[str, ...], value: object) -> bool:
    """Does `obj` already hold `value` at `path` (so setting it would change nothing)?"""
    current = _lookup(obj, path)
    return current is not _MISSING and current == value


class PatchBuilder:
    """Collects JSONPatch ops for one original object; `ops()` returns them in a clean apply order."""

    __slots__ = ("obj", "_ops", "_pending", "_raw", "_by_path")

    def __init__(self, obj: Mapping | None):
        self.obj = obj if obj is not None else {}
        self._ops: list[dict] = []
        self._pending: dict[tuple[str, ...], dict] = {}  # missing map path -> members to add with it
        self._raw: list[dict] = []  # ready-made ops of other components (placement's affinity), on paths we never set
        self._by_path: dict[tuple[str, ...], dict] = {}  # path -> its op in _ops, so a later set of one path wins

    def set(self, path: tuple[str, ...], value: object) -> bool:
        """Set the member at `path` to `value`; False (no op) when it already holds that value."""
        parent = path[:-1]
        container = _lookup(self.obj, parent)
        if container is _MISSING or not isinstance(container, (dict, Mapping)):
            current = _MISSING
        else:
            current = container.get(path[-1], _MISSING)
        if path in self._by_path:
            return self._put(path, current, value)
        if current == value:
            return False
        if container is _MISSING:
            # Find the widest missing ancestor; the whole subtree is added there in one op.
            missing = parent
            while len(missing) > 1 and _lookup(self.obj, missing[:-1]) is _MISSING:
                missing = missing[:-1]
            node = self._pending.setdefault(missing, {})
            for part in path[len(missing) : -1]:
                node = node.setdefault(part, {})
            node[path[-1]] = value
            return True
        return self._put(path, current, value)

    def _put(self, path: tuple[str, ...], current: object, value: object) -> bool:
        """Record `path := value` against the original `current`; a second set of a path replaces the first."""
        earlier = self._by_path.pop(path, None)
        if earlier is not None:
            self._ops.remove(earlier)
        if current == value:
            return earlier is not None
        op = {"op": "add" if current is _MISSING else "replace", "path": pointer(path), "value": value}
        self._ops.append(op)
        self._by_path[path] = op
        return True

    def set_members(self, parent: tuple[str, ...], members: dict) -> None:
        """`set(parent + (key,), value)` for each member, walking to `parent` once."""
        container = _lookup(self.obj, parent)
        if container is _MISSING or not isinstance(container, (dict, Mapping)):
            for key, value in members.items():
                self.set(parent + (key,), value)
            return
        for key, value in members.items():
            current = container.get(key, _MISSING)
            path = parent + (key,)
            if current != value or path in self._by_path:
                self._put(path, current, value)

    def extend(self, ops) -> None:
        """Append ops built elsewhere against the same original object (their paths must not overlap ours)."""
        self._raw.extend(ops)

    def ops(self) -> tuple[dict, ...]:
        """The collected ops: whole-map adds first, then member ops, then ready-made ops."""
        adds = [{"op": "add", "path": pointer(p), "value": v} for p, v in self._pending.items()]
        return tuple(adds + self._ops + self._raw)

    def __bool__(self) -> bool:
        return bool(self._ops or self._pending or self._raw)
