"""Per-domain incremental aggregates and per-level capacity buckets, so a query touches domains, not nodes.

Each domain keeps, per GPU model: a histogram of its eligible nodes by free whole
devices, the pods of k whole GPUs it holds for each k in `SHAPES` (exact: sum of
`free // k` over its nodes), the free cpu, memory and pod slots of its nodes with GPU
room — all packed in ONE int (`Agg.vec`), so a node event adds one precomputed delta
per ancestor — and a count of its shared devices by state. Each level keeps, per model
and shape, buckets of domains by capacity with the non-empty capacities sorted, so "the
tightest domain that holds n pods" is one bisection; an event only marks the domains
whose capacity it changed, and the buckets are brought up to date when next read
(`Lag`). A node event changes one node's contribution and updates its ancestors: O(depth).
"""

from __future__ import annotations

import threading
from bisect import bisect_left, insort

from policy.placement.devices import FULL, Demand, NodeState, device_fit

SHAPES = (1, 2, 4, 8)  # whole-GPU pod sizes with exact per-level buckets; others take the slow path
# Levels whose domains are single nodes: capacity for k GPUs is h // k, monotone in h, so
# one bucket by free devices answers every shape (a third of the work of a bind event).
PER_NODE_LABELS = frozenset({"kubernetes.io/hostname"})
SHAPE_INDEX = {k: i for i, k in enumerate(SHAPES)}
class Buckets:
    """Domains of one level (held as their `Agg` for the model) by capacity for one shape: sparse, capacities sorted.

    Sparse and bisected rather than a list indexed by capacity, so a wide level (a zone of
    85k nodes holds 340k pods) costs O(log n) to search and no memory for empty capacities.
    """

    __slots__ = ("by_cap", "order")

    def __init__(self) -> None:
        # capacity -> insertion-ordered aggs (an agg, not its domain: a bind event already has the
        # agg in cache, and hashing the domain would read one more cold object per level)
        self.by_cap: dict[int, dict] = {}
        self.order: list[int] = []  # non-empty capacities, ascending

    def move(self, member, before: int, after: int) -> None:
        """Move `member` from capacity `before` to `after` (0 = not held)."""
        by_cap = self.by_cap
        if before:
            bucket = by_cap[before]
            del bucket[member]
            if not bucket:
                del by_cap[before]
                order = self.order
                del order[bisect_left(order, before)]
        if after:
            bucket = by_cap.get(after)
            if bucket is None:
                by_cap[after] = {member: None}
                insort(self.order, after)
            else:
                bucket[member] = None

    def at_least(self, n: int):
        """The first member of the lowest capacity ≥ n, or None."""
        order = self.order
        i = bisect_left(order, n)
        return next(iter(self.by_cap[order[i]])) if i < len(order) else None

    def largest(self):
        """The first member of the highest capacity, or None."""
        return next(iter(self.by_cap[self.order[-1]])) if self.order else None


def resource_part(node: NodeState) -> tuple[int, int, int] | None:
    """What an eligible node adds to its domains' resource aggregates: its free (cpu, memory, pod slots), or None when
    no device has room (such a node takes no pod whatever its cpu, so it neither limits nor offers anything)."""
    spec = node.spec
    shared = node.shared
    free = spec.gpus - node.whole_used
    if free <= 0 and not shared:
        return None
    cpu = spec.cpu - node.cpu_used
    ram = spec.ram - node.ram_used
    pods = spec.pods - len(node.allocs)
    return (cpu if cpu > 0 else 0), (ram if ram > 0 else 0), (pods if pods > 0 else 0)


# ---- one int per aggregate -------------------------------------------------------------------------------------
# Agg.vec packs: caps (pods of each of SHAPES, four fields of _C bits), the free pod slots, cpu and memory summed
# over the agg's nodes with GPU room (three fields of _W bits), then the histogram (fields of _C bits from
# _HIST_SHIFT: nodes with h free devices; it grows at the top). Every field is linear in the nodes (a node adds
# `_GV[h]` and `packed(res)`), so a node going from one state to another adds ONE precomputed delta to each
# ancestor, negative fields included, and the result is exact while each field stays in [0, 2**width): counts (of
# nodes, of pods of k GPUs) in 64 bits for fewer than 2**58 nodes, and int64 node amounts (UNLIMITED is 2**62) in
# 128 bits for fewer than 2**64 nodes. A bind event then touches one int per level instead of a histogram, a caps
# list and its sums; counts in 64 rather than 128 bits make that int a third smaller (960 bits for 4-GPU nodes),
# so each level's add reads and writes a cache line less (docs/placement-index.md).
_W = 128  # a sums field
_FIELD = (1 << _W) - 1
_C = 64  # a count field (caps, histogram)
_CF = (1 << _C) - 1
_2C = 2 * _C
_3C = 3 * _C
_2W = 2 * _W
_SUMS_SHIFT = len(SHAPES) * _C  # the slot sums; cpu and memory follow
_HIST_SHIFT = _SUMS_SHIFT + 3 * _W  # hist[0]
_CAP_SHIFT = tuple(i * _C for i in range(len(SHAPES)))
_CAPS_MASK = (1 << _SUMS_SHIFT) - 1
_SUMS_MASK = (1 << (3 * _W)) - 1
_GV: list[int] = []  # _GV[h]: what one node with h free devices adds (hist[h] += 1, caps += h // k)


def reserve_devices(gpus: int) -> None:
    """Make `_GV[h]` exist for every h ≤ gpus (called when a node is attached, so events index it directly)."""
    while len(_GV) <= gpus:
        h = len(_GV)
        _GV.append((1 << (_HIST_SHIFT + h * _C)) + sum((h // k) << _CAP_SHIFT[i] for i, k in enumerate(SHAPES)))


def gpu_vec(h: int) -> int:
    """The packed hist and caps part of a node with h free devices."""
    reserve_devices(h)
    return _GV[h]


def packed(cpu: int, ram: int, pods: int) -> int:
    """(cpu, memory, slots) as the sums fields of Agg.vec hold them (deltas may be negative)."""
    return ((ram << _2W) + (cpu << _W) + pods) << _SUMS_SHIFT


class Lag:
    """The aggs events marked and readers file, shared by an index's trees (docs/placement-index.md, "Deferred").

    `aggs`: aggs whose capacity moved since they were filed in their level's buckets (`Agg.marked`),
    oldest first (a dict as an ordered set: an event that brings an agg back to the capacities it is
    filed under — a pod bound, then gone — takes its mark back in O(1), so nothing is filed for it).
    A reader files all of them first (`Tree.tightest` / `largest`), so answers are exact; an event
    that leaves more than `limit` files the oldest beyond it, so a query never pays for more than
    that and no event pays for a backlog. (The flat root's counts of nodes by free amount are not
    deferred: an event changes them at once, in three small dicts.)

    Filing moves buckets, and readers file: the server may decide in worker threads while watch
    events arrive on its loop, so every filing holds `lock`. Marking takes no lock (one dict store or
    pop is atomic under the GIL): `_file` clears the mark before it reads the capacities, so an event
    that lands while a reader files is either read or marks again, and filing tolerates a mark added
    or taken back meanwhile.
    """

    __slots__ = ("aggs", "limit", "lock")

    def __init__(self, limit: int | None = None) -> None:
        self.limit = LAG_LIMIT if limit is None else limit  # 0: file at every event (what tests compare against)
        self.aggs: dict = {}
        self.lock = threading.Lock()

    def settle(self) -> None:
        """Bring every level's buckets up to date."""
        with self.lock:
            aggs = self.aggs
            while aggs:
                for agg in list(aggs):  # a snapshot (one call): events may mark or take back marks meanwhile
                    aggs.pop(agg, None)
                    if agg.marked:  # not taken back meanwhile
                        _file(agg)

    def settle_beyond(self) -> None:
        """File the oldest marks beyond `limit` (called by the event that left more)."""
        with self.lock:
            aggs, limit = self.aggs, self.limit
            while len(aggs) > limit:
                try:
                    agg = next(iter(aggs))
                except (RuntimeError, StopIteration):  # another thread marked or took a mark back meanwhile: look again
                    continue
                if aggs.pop(agg, _GONE) is not _GONE and agg.marked:
                    _file(agg)


_GONE = object()
# Marks left unfiled, at most: a query files at most this many aggs (a few µs each when each moved for real: well
# under 1 ms), and an event beyond it files the oldest, as many as it marked — so an event's bucket moves are done at
# most 64 events later (by an event or the next reader), or not at all when undone in between (a pod bound, then gone).
LAG_LIMIT = 64


def _file(agg: "Agg") -> None:
    """File a marked agg under its current capacities."""
    agg.marked = False
    now = agg.vec & _CAPS_MASK
    was = agg.placed
    if now == was:
        return  # back where it is filed (a pod bound, then gone)
    agg.placed = now
    lists = agg.lists
    before, after = was & _CF, now & _CF
    if before != after:
        lists[0].move(agg, before, after)
    if lists[1] is None:
        return  # a per-node level: the free-devices bucket alone
    # SHAPES has four sizes: unrolled, this runs for every marked domain a reader settles
    before, after = (was >> _C) & _CF, (now >> _C) & _CF
    if before != after:
        lists[1].move(agg, before, after)
    before, after = (was >> _2C) & _CF, (now >> _2C) & _CF
    if before != after:
        lists[2].move(agg, before, after)
    before, after = was >> _3C, now >> _3C  # the top field of the caps part
    if before != after:
        lists[3].move(agg, before, after)


def apply_resources(node: NodeState, old: tuple | None, new: tuple | None) -> None:
    """Move a node's resource contribution from `old` to `new` in its domains (sums and the flat root's counts)."""
    aggs = node.aggs
    if not aggs:
        return
    d_sums = (packed(*new) if new is not None else 0) - (packed(*old) if old is not None else 0)
    if d_sums:
        for agg in aggs:
            agg.vec += d_sums
    root = aggs[0]
    if root.res is not None:
        with root.domain.tree.lag.lock:
            _count_free(root.res, old, new)


def _count_free(counts: list | None, old: tuple | None, new: tuple | None) -> None:
    """The flat root's counts of free amounts by value (the first agg of every node is the flat root's)."""
    if counts is None:
        return
    if old is not None:
        if new is not None:  # the usual change, unrolled
            a, b = old[0], new[0]
            if a != b:
                _recount(counts[0], a, b)
            a, b = old[1], new[1]
            if a != b:
                _recount(counts[1], a, b)
            a, b = old[2], new[2]
            if a != b:
                _recount(counts[2], a, b)
            return
        c, a = counts[0], old[0]  # unrolled: a node cordoned, NotReady or deleted runs it
        left = c[a] - 1
        if left:
            c[a] = left
        else:
            del c[a]
        c, a = counts[1], old[1]
        left = c[a] - 1
        if left:
            c[a] = left
        else:
            del c[a]
        c, a = counts[2], old[2]
        left = c[a] - 1
        if left:
            c[a] = left
        else:
            del c[a]
    elif new is not None:  # unrolled: a node joining runs it
        c, b = counts[0], new[0]
        c[b] = c.get(b, 0) + 1
        c, b = counts[1], new[1]
        c[b] = c.get(b, 0) + 1
        c, b = counts[2], new[2]
        c[b] = c.get(b, 0) + 1


def _recount(c: dict, a: int, b: int) -> None:
    left = c[a] - 1
    if left:
        c[a] = left
    else:
        del c[a]
    c[b] = c.get(b, 0) + 1


def sums(agg: "Agg") -> tuple[int, int, int] | None:
    """Free (cpu, memory, pod slots) summed over the agg's nodes with GPU room; None at per-node levels."""
    if not agg.sums_kept:
        return None
    s = agg.vec >> _SUMS_SHIFT
    return (s >> _W) & _FIELD, (s >> (2 * _W)) & _FIELD, s & _FIELD


def certain(agg: "Agg", demand: Demand, max_devices: int = 0) -> bool:
    """Whether cpu, memory and pod slots never limit `demand` before GPUs on any node of the agg (GPU capacity exact).

    Known at the flat root only (elsewhere: False), where it makes every domain exact: the
    least free amount of any node with GPU room covers the most pods GPUs let one node take
    (the most free devices of any node, over k; or `max_devices`, the most devices of any
    node, times the shares per device).
    """
    if demand.node_filter is not None or agg.res is None:
        return False
    res = agg.res
    if not res[2]:
        return True  # no node with room: nothing to limit
    if demand.whole:
        most = _most_free_devices(agg) // demand.whole
    else:
        most = max_devices * (FULL // demand.milli if demand.milli else 0)
    return min(res[2]) >= most and (not demand.cpu or min(res[0]) >= demand.cpu * most) and (
        not demand.ram or min(res[1]) >= demand.ram * most)


def _most_free_devices(agg: "Agg") -> int:
    """The most free devices of any node of the agg: the histogram's top field is the highest non-zero one."""
    top = (agg.vec.bit_length() - 1 - _HIST_SHIFT) // _C
    return top if top > 0 else 0


def most_free(agg: "Agg") -> tuple[int, int, int] | None:
    """The largest free (cpu, memory, pod slots) of any node of the flat root's agg with GPU room; None when not kept."""
    res = agg.res
    if res is None:
        return None
    return tuple(max(c) if c else 0 for c in res)  # type: ignore[return-value]


def bound(agg: "Agg", demand: Demand) -> int | None:
    """At most this many pods of `demand` by cpu, memory and pod slots (0 when no node has what one pod asks); None: no bound kept."""
    total = sums(agg)
    if total is None:
        return None
    res = agg.res  # the flat root only: the exact largest amounts
    if res is not None and (not res[2] or max(res[2]) < 1 or max(res[0]) < demand.cpu or max(res[1]) < demand.ram):
        return 0
    cpu, ram, pods = total
    n = pods
    if demand.cpu:
        n = min(n, cpu // demand.cpu)
    if demand.ram:
        n = min(n, ram // demand.ram)
    return n


class Agg:
    """One domain's aggregate for one model key."""

    __slots__ = ("vec", "partial", "domain", "lists", "res", "placed", "marked", "sums_kept")

    def __init__(self, domain: "Domain", lists: "list[Buckets] | None") -> None:
        self.vec = 0  # caps, resource sums and histogram, packed (see _C and _W above)
        self.partial: dict[tuple[int, int, int], int] = {}  # shared device state -> devices
        self.domain = domain
        self.lists = lists  # this model's per-shape buckets at the domain's level (None at roots)
        # The caps part of `vec` this agg is filed under in `lists` (0 = not held): behind `caps` until settled.
        self.placed = 0
        self.marked = False  # queued in the index's `Lag` to be filed again
        level = domain.level
        # The sums are read only above the per-node level (where the node itself is looked at).
        # At the flat root only, `res`: free amount -> nodes with GPU room, for cpu, memory and pod slots
        # (`resource_part`): the exactness certificate (the least) and the refusal (the largest).
        # Events change them at once (three small dicts: few distinct amounts).
        if level >= 0:  # a node's first taint creates its host's agg for the tainted key: kept short
            self.sums_kept = not domain.tree.per_node[level]
            self.res: list[dict[int, int]] | None = None
        else:
            self.sums_kept = True
            self.res = None if domain.tree.level_names else [{}, {}, {}]

    @property
    def caps(self) -> list[int]:
        """caps[i] = pods of SHAPES[i] whole GPUs that fit (exact)."""
        vec = self.vec
        return [(vec >> shift) & _CF for shift in _CAP_SHIFT]

    def cap(self, i: int) -> int:
        """caps[i] alone."""
        return (self.vec >> _CAP_SHIFT[i]) & _CF

    def filed(self, i: int) -> int:
        """The capacity for SHAPES[i] this agg is filed under in its level's buckets (settled: equal to `cap(i)`)."""
        return (self.placed >> _CAP_SHIFT[i]) & _CF

    @property
    def nodes(self) -> int:
        """Eligible nodes counted here: the histogram's sum. Derived, not kept: every node adds a histogram field, so
        `vec` is 0 exactly when no node is counted (what hot readers test), and eligibility changes move one int per
        level rather than two."""
        return sum(self.hist) if self.vec else 0

    @property
    def hist(self) -> list[int]:
        """hist[h] = eligible nodes with h free whole devices (at least [0])."""
        top = (self.vec.bit_length() - _HIST_SHIFT + _C - 1) // _C
        v = self.vec >> _HIST_SHIFT
        return [(v >> (h * _C)) & _CF for h in range(max(top, 1))]

    def free_whole(self) -> int:
        """Untouched devices in the domain."""
        return sum(h * c for h, c in enumerate(self.hist))


class Domain:
    """One value of one topology level (or the topology's root, level -1)."""

    __slots__ = ("tree", "level", "value", "path", "parent", "children", "nodes", "aggs", "buckets")

    def __init__(self, tree: "Tree", level: int, path: tuple[str, ...], parent: "Domain | None"):
        self.tree = tree
        self.level = level
        self.path = path
        self.value = path[-1] if path else None
        self.parent = parent
        self.children: dict[str, Domain] = {}
        self.nodes: dict[NodeState, None] = {}  # only at the deepest level; a dict for O(1) removal
        self.aggs: dict[str, Agg] = {}
        # model -> per-shape capacity buckets of this domain's level (None for roots: nothing to rank)
        self.buckets: dict[str, list[Buckets]] | None = tree.buckets[level] if level >= 0 else None

    def agg_for(self, model: str) -> Agg:
        """This domain's aggregate for `model`, created on first use."""
        agg = self.aggs.get(model)
        if agg is None:
            lists = None
            if self.buckets is not None:
                lists = self.buckets.get(model)
                if lists is None:
                    if self.tree.per_node[self.level]:
                        lists = [Buckets()] + [None] * (len(SHAPES) - 1)  # type: ignore[list-item]
                    else:
                        lists = [Buckets() for _ in SHAPES]
                    self.buckets[model] = lists
            agg = self.aggs[model] = Agg(self, lists)
        return agg

    def capacity(self, demand: Demand, per_gpu: int | None, models: tuple[str, ...], memory: dict[str, int]) -> int:
        """Exact pods of a single `demand` this domain holds now, over the given model keys."""
        total = 0
        aggs = self.aggs
        whole = demand.whole
        if whole:  # the gang walk asks this of every domain it visits: attribute reads hoisted
            i = SHAPE_INDEX.get(whole)
            need = demand.memory
            for key in models:
                agg = aggs.get(key)
                if agg is None or not agg.vec or (need and memory.get(key, 0) * whole < need):
                    continue
                total += (agg.vec >> _CAP_SHIFT[i]) & _CF if i is not None else sum((h // whole) * c for h, c in enumerate(agg.hist))
            return total
        for key in models:
            agg = aggs.get(key)
            if agg is None or not agg.vec:
                continue
            fresh = device_fit(FULL, 0, memory.get(key, 0), demand, per_gpu)
            total += agg.free_whole() * fresh
            for (free, sharers, mem), count in agg.partial.items():
                total += count * device_fit(free, sharers, mem, demand, per_gpu)
        return total

    def describe(self) -> str:
        """`rack r7 (block b2)`-style name for messages."""
        if self.level < 0:
            return f"topology {self.tree.name}"
        names = self.tree.level_names
        inner = ", ".join(f"{names[i]} {self.path[i]}" for i in range(self.level - 1, -1, -1))
        return f"{names[self.level]} {self.value}" + (f" ({inner})" if inner else "")


class Tree:
    """One declared topology: its root, its levels and the capacity buckets of each level."""

    __slots__ = ("name", "level_names", "labels", "per_node", "root", "buckets", "domains_at", "_last", "lag")

    def __init__(self, name: str, levels, lag: Lag | None = None) -> None:
        self.name = name
        self.level_names = tuple(level for level, _label in levels)
        self.labels = tuple(label for _level, label in levels)
        self.per_node = tuple(label in PER_NODE_LABELS for label in self.labels)
        # buckets[level][model][shape index] = that level's domains by capacity
        self.buckets: list[dict[str, list[Buckets]]] = [{} for _ in self.level_names]
        self.root = Domain(self, -1, (), None)
        self._last: tuple = (None, [])
        self.domains_at: list[int] = [0 for _ in self.level_names]
        self.lag = lag if lag is not None else Lag()  # what events marked (shared by an index's trees)

    def settle(self) -> None:
        """Bring every level's buckets (and the flat roots' counts) up to date: events only mark what moved."""
        self.lag.settle()

    def domains_for(self, path: tuple[str, ...]) -> list[Domain]:
        """The chain root → deepest domain for a node's label path, created on first sight."""
        last_path, last_chain = self._last
        same = 0
        if last_path is not None:  # nodes usually arrive rack by rack: reuse the shared prefix
            limit = min(len(path), len(last_path))
            while same < limit and path[same] == last_path[same]:
                same += 1
            chain = last_chain[: same + 1]
        else:
            chain = [self.root]
        node = chain[-1]
        for depth in range(same, len(path)):
            value = path[depth]
            child = node.children.get(value)
            if child is None:
                child = Domain(self, depth, path[: depth + 1], node)
                node.children[value] = child
                self.domains_at[depth] += 1
            chain.append(child)
            node = child
        self._last = (path, chain)
        return list(chain)

    def level_of(self, name: str) -> int | None:
        """Index of a level name, or None."""
        try:
            return self.level_names.index(name)
        except ValueError:
            return None

    def tightest(self, level: int, model: str, shape: int, n: int) -> Domain | None:
        """The first domain in the lowest bucket ≥ n (ties: the one at that capacity longest)."""
        lag = self.lag
        if lag.aggs:
            lag.settle()
        lists = self.buckets[level].get(model)
        if not lists:
            return None
        if self.per_node[level]:  # the fewest free devices that still hold n pods of `shape`
            agg = lists[0].at_least(max(n, 1) * shape)
        else:
            agg = lists[SHAPE_INDEX[shape]].at_least(max(n, 1))
        return agg.domain if agg is not None else None

    def largest(self, level: int, model: str, shape: int) -> Domain | None:
        """A domain of the level with the most capacity for `shape`."""
        lag = self.lag
        if lag.aggs:
            lag.settle()
        lists = self.buckets[level].get(model)
        if not lists:
            return None
        agg = lists[0 if self.per_node[level] else SHAPE_INDEX[shape]].largest()
        return agg.domain if agg is not None else None


def apply_contribution(node: NodeState, old, new) -> None:
    """Replace a node's contribution `old` by `new` ((free whole, partial states) or None) in all its domains."""
    if old == new:
        return
    h_old, p_old = old if old is not None else (None, ())
    h_new, p_new = new if new is not None else (None, ())
    d = (gpu_vec(h_new) if h_new is not None else 0) - (gpu_vec(h_old) if h_old is not None else 0)
    partial_changed = p_old != p_new
    aggs = node.aggs
    for agg in aggs:
        if d:
            agg.vec += d
        if partial_changed:
            partial = agg.partial
            for state in p_old:
                left = partial[state] - 1
                if left:
                    partial[state] = left
                else:
                    del partial[state]
            for state in p_new:
                partial[state] = partial.get(state, 0) + 1
    if d and node.ranked:
        lag = _mark(node.ranked)
        if len(lag.aggs) > lag.limit:
            lag.settle_beyond()


def join(node: NodeState, contribution, res: tuple | None, sign: int) -> None:
    """The node joins (sign +1) or leaves (-1) its aggregates with this contribution and resource part — a node
    added, deleted, cordoned, Ready again, tainted — in one pass: one packed delta per ancestor, its node count, its
    shared devices' states, the flat root's counts, and the ranked aggs marked. What `apply_contribution` and
    `apply_resources` do from or to None, in one loop."""
    h, partials = contribution
    if h >= len(_GV):
        reserve_devices(h)
    d = _GV[h] if res is None else _GV[h] + (((res[1] << _2W) + (res[0] << _W) + res[2]) << _SUMS_SHIFT)
    if sign < 0:
        d = -d
    aggs = node.aggs
    if not aggs:
        return
    for agg in aggs:
        agg.vec += d
        if partials:
            partial = agg.partial
            for state in partials:
                left = partial.get(state, 0) + sign
                if left:
                    partial[state] = left
                else:
                    del partial[state]
    root = aggs[0]
    if res is not None and root.res is not None:
        with root.domain.tree.lag.lock:
            _count_free(root.res, res if sign < 0 else None, res if sign > 0 else None)
    if node.ranked:  # hist[h] moved, and caps with it when h > 0
        lag = _mark(node.ranked)
        if len(lag.aggs) > lag.limit:
            lag.settle_beyond()


def rekey(node: NodeState, aggs: tuple, ranked: tuple) -> None:
    """The node moves, with the same contribution and resource part, from its aggregates (`node.aggs`) to `aggs` of the
    same domains (a blocking taint added or gone: another model key) in one pass: per domain one packed delta taken
    from the old agg and added to the new, the flat root's counts moved, both ranked sets marked (when the node has
    GPU room: else no capacity moves). What `join` -1 then +1 does, without walking the domains twice."""
    old_aggs = node.aggs
    shared = node.shared
    if shared:
        h, partials = node.contribution()
        res = resource_part(node)
        d = _GV[h] if res is None else _GV[h] + (((res[1] << _2W) + (res[0] << _W) + res[2]) << _SUMS_SHIFT)
        for old, new in zip(old_aggs, aggs):
            old.vec -= d
            new.vec += d
            for partial, sign in ((old.partial, -1), (new.partial, 1)):
                for state in partials:
                    left = partial.get(state, 0) + sign
                    if left:
                        partial[state] = left
                    else:
                        del partial[state]
        room = h > 0
    else:  # the usual node: its part from its counters (`_part`, the node eligible under both keys)
        d = _part(node.spec, node)
        for old, new in zip(old_aggs, aggs):
            old.vec -= d
            new.vec += d
        room = d > _GV[0]
        res = None
        if room:
            r = (d >> _SUMS_SHIFT) & _SUMS_MASK
            res = ((r >> _W) & _FIELD, r >> _2W, r & _FIELD)
    counts = old_aggs[0].res
    if res is not None and counts is not None:  # the flat roots' counts: one node of these amounts moves
        with old_aggs[0].domain.tree.lag.lock:
            for c, b, a in zip(counts, aggs[0].res, res):
                left = c[a] - 1
                if left:
                    c[a] = left
                else:
                    del c[a]
                b[a] = b.get(a, 0) + 1
    old_ranked = node.ranked
    node.aggs = aggs
    node.ranked = ranked
    if not room:
        return  # hist[0] alone moved: no capacity of either key's aggs changed
    lag = None
    if old_ranked:  # hist[h] moved in both keys' aggs, and caps with it
        lag = _mark(old_ranked)
    if ranked:
        lag = _mark(ranked)
    if lag is not None and len(lag.aggs) > lag.limit:
        lag.settle_beyond()


def _part(spec, node: NodeState) -> int:
    """What a node with no shared device adds to each of its domains' ints under `spec` (0 when not counted)."""
    if not spec.eligible:
        return 0
    free = spec.gpus - node.whole_used
    if free <= 0:
        return _GV[0]  # counted in hist[0], no GPU room: no resource part
    a = spec.cpu - node.cpu_used
    b = spec.ram - node.ram_used
    c = spec.pods - len(node.allocs)
    return _GV[free] + ((((b if b > 0 else 0) << _2W) + ((a if a > 0 else 0) << _W) + (c if c > 0 else 0)) << _SUMS_SHIFT)


def respec_whole(node: NodeState, old, new) -> bool:
    """A node with no shared device goes from spec `old` to `new` in the same aggregates (cordoned, NotReady, Ready
    again, allocatable changed) — one packed delta per ancestor (its node count included: hist), the flat root's counts, the ranked
    aggs marked when its capacities moved — computed from the specs and the node's counters (no contribution tuples);
    False (nothing done) for a node with shared devices (the general path). The same result as `join` / `move_pod`
    from the contributions (property-tested). `node.spec` is left to the caller."""
    if node.shared:
        return False
    aggs = node.aggs
    if not aggs:
        return False
    # NodeSpec fields by position (eligible 1, gpus 4, cpu 8, ram 9, pods 10): a NamedTuple's attribute is a descriptor
    # call on every read (3.11 does not specialize it), an index one specialized op; the layout is pinned by a test
    _n, e0, _w, _m, g0, _y, _p, _t, cpu0, ram0, pods0, _l = old
    _n, e1, _w, _m, g1, _y, _p, _t, cpu1, ram1, pods1, _l = new
    if g1 >= len(_GV):
        reserve_devices(g1)
    used, slots = node.whole_used, len(node.allocs)
    # `_part` of each spec, inlined, keeping the free amounts (clamped at 0) for the flat root's counts as plain locals:
    # no tuple per side (fewer allocations the cyclic collector counts, so it runs less often in an event)
    room0 = room1 = False
    d0 = d1 = 0
    if e0:
        free = g0 - used
        if free > 0:
            room0 = True
            a0, b0, c0 = cpu0 - node.cpu_used, ram0 - node.ram_used, pods0 - slots
            if a0 < 0:
                a0 = 0
            if b0 < 0:
                b0 = 0
            if c0 < 0:
                c0 = 0
            d0 = _GV[free] + (((b0 << _2W) + (a0 << _W) + c0) << _SUMS_SHIFT)
        else:
            d0 = _GV[0]
    if e1:
        free = g1 - used
        if free > 0:
            room1 = True
            a1, b1, c1 = cpu1 - node.cpu_used, ram1 - node.ram_used, pods1 - slots
            if a1 < 0:
                a1 = 0
            if b1 < 0:
                b1 = 0
            if c1 < 0:
                c1 = 0
            d1 = _GV[free] + (((b1 << _2W) + (a1 << _W) + c1) << _SUMS_SHIFT)
        else:
            d1 = _GV[0]
    if d0 == d1:
        return True  # the same part under both specs (an eligible node's part is never 0, an excluded one's is)
    d = d1 - d0
    for agg in aggs:
        agg.vec += d
    counts = aggs[0].res
    if counts is not None and (room0 or room1):  # `_count_free`, inlined on the locals
        with aggs[0].domain.tree.lag.lock:
            if room0 and room1:
                if a0 != a1:
                    _recount(counts[0], a0, a1)
                if b0 != b1:
                    _recount(counts[1], b0, b1)
                if c0 != c1:
                    _recount(counts[2], c0, c1)
            elif room0:  # cordoned, NotReady, deleted: it leaves the counts
                c = counts[0]
                left = c[a0] - 1
                if left:
                    c[a0] = left
                else:
                    del c[a0]
                c = counts[1]
                left = c[b0] - 1
                if left:
                    c[b0] = left
                else:
                    del c[b0]
                c = counts[2]
                left = c[c0] - 1
                if left:
                    c[c0] = left
                else:
                    del c[c0]
            else:  # back, or added: it joins them
                c = counts[0]
                c[a1] = c.get(a1, 0) + 1
                c = counts[1]
                c[b1] = c.get(b1, 0) + 1
                c = counts[2]
                c[c1] = c.get(c1, 0) + 1
    if (d0 ^ d1) & _CAPS_MASK:  # capacities moved (hist[h] alone, for h = 0, files nothing): `_mark`, inlined
        ranked = node.ranked
        if ranked:
            lag = ranked[0].domain.tree.lag
            queue = lag.aggs
            for agg in ranked:
                if agg.marked:
                    if agg.vec & _CAPS_MASK == agg.placed:
                        agg.marked = False
                        queue.pop(agg, None)
                else:
                    agg.marked = True
                    queue[agg] = None
            if len(queue) > lag.limit:
                lag.settle_beyond()
    return True


def join_whole(node: NodeState, spec, sign: int) -> bool:
    """A node with no shared device, eligible as `spec`, joins (sign +1) or leaves (-1) the aggregates it is filed in (a
    node added or deleted): what `respec_whole` does from or to a spec not counted, for one spec — one packed delta per
    ancestor, the flat root's counts, the ranked aggs marked when it has GPU room; False (nothing done) for a node with
    shared devices or not filed (the general path). `node.spec` is left to the caller."""
    if node.shared:
        return False
    aggs = node.aggs
    if not aggs:
        return False
    # NodeSpec fields by position (`respec_whole` says why): gpus 4, cpu 8, ram 9, pods 10
    _n, _e, _w, _m, gpus, _y, _p, _t, cpu, ram, pods, _l = spec
    if gpus >= len(_GV):
        reserve_devices(gpus)
    free = gpus - node.whole_used
    if free <= 0:  # counted in hist[0]: no capacity, no resource part, nothing filed moves
        d = _GV[0]
        if sign > 0:
            for agg in aggs:
                agg.vec += d
        else:
            for agg in aggs:
                agg.vec -= d
        return True
    a, b, c = cpu - node.cpu_used, ram - node.ram_used, pods - len(node.allocs)
    if a < 0:
        a = 0
    if b < 0:
        b = 0
    if c < 0:
        c = 0
    d = _GV[free] + (((b << _2W) + (a << _W) + c) << _SUMS_SHIFT)
    if sign > 0:
        for agg in aggs:
            agg.vec += d
    else:  # (subtracted, not added negated: no negated copy of a ~1000-bit int)
        for agg in aggs:
            agg.vec -= d
    counts = aggs[0].res
    if counts is not None:  # `_count_free`, inlined
        with aggs[0].domain.tree.lag.lock:
            if sign > 0:
                x = counts[0]
                x[a] = x.get(a, 0) + 1
                x = counts[1]
                x[b] = x.get(b, 0) + 1
                x = counts[2]
                x[c] = x.get(c, 0) + 1
            else:
                x = counts[0]
                left = x[a] - 1
                if left:
                    x[a] = left
                else:
                    del x[a]
                x = counts[1]
                left = x[b] - 1
                if left:
                    x[b] = left
                else:
                    del x[b]
                x = counts[2]
                left = x[c] - 1
                if left:
                    x[c] = left
                else:
                    del x[c]
    ranked = node.ranked
    if ranked:  # its capacities moved: `_mark`, inlined
        lag = ranked[0].domain.tree.lag
        queue = lag.aggs
        for agg in ranked:
            if agg.marked:
                if agg.vec & _CAPS_MASK == agg.placed:
                    agg.marked = False
                    queue.pop(agg, None)
            else:
                agg.marked = True
                queue[agg] = None
        if len(queue) > lag.limit:
            lag.settle_beyond()
    return True


def _mark(ranked: tuple) -> Lag:
    """Mark the node's ranked aggs, whose capacities moved, to be filed again — or take the mark back from one that is
    back at the capacities it is filed under (the caller settles the oldest beyond the limit)."""
    lag = ranked[0].domain.tree.lag
    queue = lag.aggs
    for agg in ranked:
        if agg.marked:
            if agg.vec & _CAPS_MASK == agg.placed:
                agg.marked = False
                queue.pop(agg, None)
        else:  # its capacity for one GPU moved (every change of a node's free devices moves it): filed elsewhere now
            agg.marked = True
            queue[agg] = None
    return lag


def move_pod(node: NodeState, old, new, res_old, res) -> None:
    """A pod bound or gone: the node's GPU contribution `old` -> `new` and its resource part `res_old` -> `res`, in one pass.

    The common event (the node stays counted and no shared device changes) adds one delta to
    each ancestor's packed int, marks the ranked aggs when its free devices moved and recounts
    the node at the flat root when its free amounts did; the resource parts are recomputed from
    the node before and after the change rather than stored on it.
    """
    if old is None or new is None or old[1] != new[1]:
        apply_contribution(node, old, new)  # the rarer shapes of change
        if res != res_old:
            apply_resources(node, res_old, res)
        return
    h_old, h_new = old[0], new[0]
    d = _GV[h_new] - _GV[h_old] if h_old != h_new else 0  # h ≤ the node's devices: reserved when it was attached
    aggs = node.aggs
    if res != res_old:
        if res is None or res_old is None:  # the node's last device filled, or its first freed
            d += (packed(*res) if res is not None else 0) - (packed(*res_old) if res_old is not None else 0)
        else:
            d += (((res[1] - res_old[1]) << _2W) + ((res[0] - res_old[0]) << _W) + (res[2] - res_old[2])) << _SUMS_SHIFT
        root = aggs[0]
        with root.domain.tree.lag.lock:
            _count_free(root.res, res_old, res)
    if d:
        for agg in aggs:
            agg.vec += d
    if h_old != h_new and node.ranked:
        lag = _mark(node.ranked)
        if len(lag.aggs) > lag.limit:
            lag.settle_beyond()


def bind_whole(node: NodeState, key, demand: Demand) -> bool:
    """Record a whole-GPU or GPU-less pod on a counted node, and move its domains — the usual bind, done as arithmetic
    on the node's counters (no contribution tuples, one delta per level); False (nothing done) when the general path
    must run (a share, a node not counted, a key already there). The same result as `NodeState.add` then `move_pod`
    (property-tested)."""
    spec = node.spec
    if spec is None or demand.milli or not spec.eligible or spec.gpus <= 0:
        return False
    allocs = node.allocs
    if key in allocs:
        return False
    whole, cpu, ram = demand.whole, demand.cpu, demand.ram
    free = spec.gpus - node.whole_used
    cpu0 = spec.cpu - node.cpu_used
    ram0 = spec.ram - node.ram_used
    slots0 = spec.pods - len(allocs)
    if whole:
        node.whole_used += whole
    if cpu:
        node.cpu_used += cpu
    if ram:
        node.ram_used += ram
    allocs[key] = (whole, cpu, ram)
    _shift(node, free, free - whole, cpu0, ram0, slots0, cpu0 - cpu, ram0 - ram, slots0 - 1)
    return True


def unbind_whole(node: NodeState, key) -> bool:
    """Forget a whole-GPU or GPU-less pod of a counted node and move its domains, as arithmetic (the usual pod gone);
    False (nothing done) when the general path must run (a share, a node not counted, a key not there)."""
    spec = node.spec
    if spec is None or not spec.eligible or spec.gpus <= 0:
        return False
    allocs = node.allocs
    held = allocs.get(key)
    if held is None:
        return False
    whole, cpu, ram = held
    if type(whole) is not int:
        return False  # a share: its device's state changes
    free = spec.gpus - node.whole_used
    cpu0 = spec.cpu - node.cpu_used
    ram0 = spec.ram - node.ram_used
    slots0 = spec.pods - len(allocs)
    del allocs[key]
    if whole:
        node.whole_used -= whole
    if cpu:
        node.cpu_used -= cpu
    if ram:
        node.ram_used -= ram
    _shift(node, free, free + whole, cpu0, ram0, slots0, cpu0 + cpu, ram0 + ram, slots0 + 1)
    return True


def _shift(node: NodeState, free0: int, free1: int, cpu0: int, ram0: int, slots0: int, cpu1: int, ram1: int, slots1: int) -> None:
    """Move a counted node's domains from (devices not held whole, free cpu, memory, slots) before to after, when no
    shared device changed: one packed delta per ancestor, the flat root's counts at once, the ranked aggs marked.
    Every pod bound or gone runs this: `_count_free` and `_mark` are inlined, calls being a good part of its cost."""
    shared = node.shared
    if free0 <= 0 and free1 <= 0 and not shared:
        return  # no device had room before, none has after: the node adds nothing to its domains either way
    if shared:  # shared devices are not whole ones, but keep the node counted (resource_part)
        n = len(shared)
        h0, h1 = free0 - n, free1 - n
        h0 = h0 if h0 > 0 else 0
        h1 = h1 if h1 > 0 else 0
    else:
        h0 = free0 if free0 > 0 else 0
        h1 = free1 if free1 > 0 else 0
    d = _GV[h1] - _GV[h0] if h1 != h0 else 0  # h ≤ the node's devices: reserved when it was attached
    # The free amounts, clamped at 0 (reality may overcommit); the node is counted while a device has room.
    aggs = node.aggs
    counts = aggs[0].res  # the flat root's (the first agg of every node): nodes by free amount
    if (free0 > 0 or shared) and (free1 > 0 or shared):  # the usual event: counted before and after
        a0 = cpu0 if cpu0 > 0 else 0
        b0 = ram0 if ram0 > 0 else 0
        c0 = slots0 if slots0 > 0 else 0
        a1 = cpu1 if cpu1 > 0 else 0
        b1 = ram1 if ram1 > 0 else 0
        c1 = slots1 if slots1 > 0 else 0
        if a0 != a1 or b0 != b1 or c0 != c1:
            d += (((b1 - b0) << _2W) + ((a1 - a0) << _W) + (c1 - c0)) << _SUMS_SHIFT
            if counts is not None:
                with aggs[0].domain.tree.lag.lock:
                    if a0 != a1:
                        c = counts[0]
                        left = c[a0] - 1
                        if left:
                            c[a0] = left
                        else:
                            del c[a0]
                        c[a1] = c.get(a1, 0) + 1
                    if b0 != b1:
                        c = counts[1]
                        left = c[b0] - 1
                        if left:
                            c[b0] = left
                        else:
                            del c[b0]
                        c[b1] = c.get(b1, 0) + 1
                    if c0 != c1:
                        c = counts[2]
                        left = c[c0] - 1
                        if left:
                            c[c0] = left
                        else:
                            del c[c0]
                        c[c1] = c.get(c1, 0) + 1
    else:  # its first device freed, or its last filled: it joins or leaves the sums and the counts
        old = (cpu0 if cpu0 > 0 else 0, ram0 if ram0 > 0 else 0, slots0 if slots0 > 0 else 0) if free0 > 0 else None
        new = (cpu1 if cpu1 > 0 else 0, ram1 if ram1 > 0 else 0, slots1 if slots1 > 0 else 0) if free1 > 0 else None
        d += (packed(*new) if new is not None else 0) - (packed(*old) if old is not None else 0)
        with aggs[0].domain.tree.lag.lock:
            _count_free(counts, old, new)
    if d:
        for agg in aggs:
            agg.vec += d
    if h0 != h1:
        ranked = node.ranked
        if ranked:  # `_mark`, inlined
            lag = ranked[0].domain.tree.lag
            queue = lag.aggs
            for agg in ranked:
                if agg.marked:
                    if agg.vec & _CAPS_MASK == agg.placed:
                        agg.marked = False
                        queue.pop(agg, None)
                else:
                    agg.marked = True
                    queue[agg] = None
            if len(queue) > lag.limit:
                lag.settle_beyond()


def add_bulk(node: NodeState, contribution) -> None:
    """Add a node's contribution to its domains (bulk load; the buckets are filled after, by `finish_bulk`)."""
    h, partials = contribution
    d = gpu_vec(h)
    for agg in node.aggs:
        agg.vec += d
        if partials:
            partial = agg.partial
            for state in partials:
                partial[state] = partial.get(state, 0) + 1


def finish_bulk(tree: Tree) -> None:
    """File every domain in its level buckets, once, after a bulk load."""
    stack = [tree.root]
    while stack:
        domain = stack.pop()
        stack.extend(domain.children.values())
        for agg in domain.aggs.values():
            if agg.lists is not None:
                _file(agg)
