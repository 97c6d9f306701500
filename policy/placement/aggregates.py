"""Per-domain incremental aggregates and per-level capacity buckets, so a query touches domains, not nodes.

Each domain keeps, per GPU model: a histogram of its eligible nodes by free whole
devices, the pods of k whole GPUs it holds for each k in `SHAPES` (exact: sum of
`free // k` over its nodes), and a count of its shared devices by state. Each level
keeps, per model and shape, buckets of domains by capacity with the non-empty
capacities sorted, so "the tightest domain that holds n pods" is one bisection.
A node event changes one node's contribution and updates its ancestors: O(depth).
"""

from __future__ import annotations

from bisect import bisect_left, insort

from policy.placement.devices import FULL, Demand, NodeState, device_fit

SHAPES = (1, 2, 4, 8)  # whole-GPU pod sizes with exact per-level buckets; others take the slow path
# Levels whose domains are single nodes: capacity for k GPUs is h // k, monotone in h, so
# one bucket by free devices answers every shape (a third of the work of a bind event).
PER_NODE_LABELS = frozenset({"kubernetes.io/hostname"})
SHAPE_INDEX = {k: i for i, k in enumerate(SHAPES)}
_CAPS_OF: list[tuple[int, ...]] = []  # _CAPS_OF[h] = pods of each shape that h free devices hold


def caps_of(h: int) -> tuple[int, ...]:
    """(h // k for k in SHAPES), memoized."""
    while len(_CAPS_OF) <= h:
        n = len(_CAPS_OF)
        _CAPS_OF.append(tuple(n // k for k in SHAPES))
    return _CAPS_OF[h]


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


_NOTHING = (0, 0, 0)


def apply_resources(node: NodeState, old: tuple | None, new: tuple | None) -> None:
    """Move a node's resource contribution from `old` to `new` in its domains (per-node levels keep none)."""
    o = old if old is not None else _NOTHING
    n = new if new is not None else _NOTHING
    d_sums = packed(n[0] - o[0], n[1] - o[1], n[2] - o[2])
    aggs = node.aggs
    if not aggs:
        return
    for agg in aggs:
        caps = agg.caps
        if len(caps) == _WITH_SUMS:
            caps[_SUMS] += d_sums
    _count_free(aggs[0].res, old, new)


def _count_free(counts: list | None, old: tuple | None, new: tuple | None) -> None:
    """The flat root's counts of free amounts by value (the first agg of every node is the flat root's)."""
    if counts is None:
        return
    for r in range(3):
        a = old[r] if old is not None else None
        b = new[r] if new is not None else None
        if a == b:
            continue
        c = counts[r]
        if a is not None:
            left = c[a] - 1
            if left:
                c[a] = left
            else:
                del c[a]
        if b is not None:
            c[b] = c.get(b, 0) + 1


# caps[_SUMS]: free (cpu, memory, pod slots) summed over the agg's nodes with GPU room, packed in ONE int as
# memory << 256 | cpu << 128 | slots. Sums are linear, so adding packed deltas (negative fields included) is exact
# while each field stays in [0, 2**128) — int64 node amounts summed over fewer than 2**64 nodes always do; one int
# per level per event instead of three is one cold object, not three.
_SUMS = len(SHAPES)
_WITH_SUMS = len(SHAPES) + 1
_FIELD = (1 << 128) - 1


def packed(cpu: int, ram: int, pods: int) -> int:
    """(cpu, memory, slots) as the one int caps[_SUMS] holds (deltas may be negative)."""
    return (ram << 256) + (cpu << 128) + pods


def sums(agg: "Agg") -> tuple[int, int, int] | None:
    """Free (cpu, memory, pod slots) summed over the agg's nodes with GPU room; None at per-node levels."""
    caps = agg.caps
    if len(caps) != _WITH_SUMS:
        return None
    s = caps[_SUMS]
    return (s >> 128) & _FIELD, s >> 256, s & _FIELD


def certain(agg: "Agg", demand: Demand, max_devices: int = 0) -> bool:
    """Whether cpu, memory and pod slots never limit `demand` before GPUs on any node of the agg (GPU capacity exact).

    Known at the flat root only (elsewhere: False), where it makes every domain exact: the
    least free amount of any node with GPU room covers the most pods GPUs let one node take
    (the most free devices of any node, over k; or `max_devices`, the most devices of any
    node, times the shares per device).
    """
    res = agg.res
    if demand.node_filter is not None or res is None:
        return False
    if not res[2]:
        return True  # no node with room: nothing to limit
    if demand.whole:
        most = _most_free_devices(agg) // demand.whole
    else:
        most = max_devices * (FULL // demand.milli if demand.milli else 0)
    return min(res[2]) >= most and (not demand.cpu or min(res[0]) >= demand.cpu * most) and (
        not demand.ram or min(res[1]) >= demand.ram * most)


def _most_free_devices(agg: "Agg") -> int:
    hist = agg.hist
    for h in range(len(hist) - 1, 0, -1):
        if hist[h]:
            return h
    return 0


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

    __slots__ = ("hist", "caps", "partial", "nodes", "domain", "lists", "res")

    def __init__(self, domain: "Domain", lists: "list[Buckets] | None") -> None:
        self.hist: list[int] = [0]  # hist[h] = eligible nodes with h free whole devices
        self.caps = [0] * len(SHAPES)  # caps[i] = pods of SHAPES[i] whole GPUs that fit
        self.partial: dict[tuple[int, int, int], int] = {}  # shared device state -> devices
        self.nodes = 0
        self.domain = domain
        self.lists = lists  # this model's per-shape buckets at the domain's level (None at roots)
        # caps[_SUMS] = free cpu, memory, pod slots summed over nodes with GPU room, packed (not at per-node levels,
        # where the node itself is looked at): kept in `caps` so a bind event touches no extra object per level.
        per_node = domain.level >= 0 and domain.tree.per_node[domain.level]
        if not per_node:
            self.caps.append(0)  # caps[_SUMS]
        # At the flat root only: free amount -> nodes with GPU room, for cpu, memory and pod slots
        # (`resource_part`): the exactness certificate (the least) and the refusal (the largest).
        self.res: list[dict[int, int]] | None = [{} for _ in range(3)] if domain.level < 0 and not domain.tree.level_names else None

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
                if agg is None or agg.nodes == 0 or (need and memory.get(key, 0) * whole < need):
                    continue
                total += agg.caps[i] if i is not None else sum((h // whole) * c for h, c in enumerate(agg.hist))
            return total
        for key in models:
            agg = aggs.get(key)
            if agg is None or agg.nodes == 0:
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

    __slots__ = ("name", "level_names", "labels", "per_node", "root", "buckets", "domains_at", "_last")

    def __init__(self, name: str, levels) -> None:
        self.name = name
        self.level_names = tuple(level for level, _label in levels)
        self.labels = tuple(label for _level, label in levels)
        self.per_node = tuple(label in PER_NODE_LABELS for label in self.labels)
        # buckets[level][model][shape index] = that level's domains by capacity
        self.buckets: list[dict[str, list[Buckets]]] = [{} for _ in self.level_names]
        self.root = Domain(self, -1, (), None)
        self._last: tuple = (None, [])
        self.domains_at: list[int] = [0 for _ in self.level_names]

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
        lists = self.buckets[level].get(model)
        if not lists:
            return None
        agg = lists[0 if self.per_node[level] else SHAPE_INDEX[shape]].largest()
        return agg.domain if agg is not None else None


_DELTAS: dict[tuple, tuple[tuple[int, int], ...]] = {}


def _deltas(h_old: int | None, h_new: int | None) -> tuple[tuple[int, int], ...]:
    """(shape index, capacity change) for a node going from h_old to h_new free devices; memoized."""
    hit = _DELTAS.get((h_old, h_new))
    if hit is None:
        hit = _DELTAS[(h_old, h_new)] = tuple(
            (i, d) for i, k in enumerate(SHAPES) if (d := (h_new // k if h_new else 0) - (h_old // k if h_old else 0))
        )
    return hit


def _move(agg: Agg, i: int, old: int, new: int) -> None:
    buckets = agg.lists[i]  # type: ignore[index]
    if buckets is not None:  # None: a per-node level keeps only the free-devices bucket
        buckets.move(agg, old, new)


def apply_contribution(node: NodeState, old, new) -> None:
    """Replace a node's contribution `old` by `new` ((free whole, partial states) or None) in all its domains."""
    if old == new:
        return
    h_old, p_old = old if old is not None else (None, ())
    h_new, p_new = new if new is not None else (None, ())
    deltas = _deltas(h_old, h_new) if h_old != h_new else ()
    partial_changed = p_old != p_new
    if h_old is not None and h_new is not None and not partial_changed:
        _move_whole(node.aggs, h_old, h_new, deltas)  # the common event: a whole-GPU pod binds or leaves
        return
    for agg in node.aggs:
        hist = agg.hist
        if h_old is not None:
            hist[h_old] -= 1
            agg.nodes -= 1
        if h_new is not None:
            if len(hist) <= h_new:
                hist.extend([0] * (h_new + 1 - len(hist)))
            hist[h_new] += 1
            agg.nodes += 1
        if deltas:
            caps = agg.caps
            lists = agg.lists
            for i, d in deltas:
                before = caps[i]
                caps[i] = after = before + d
                if lists is not None and lists[i] is not None:
                    lists[i].move(agg, before, after)
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


def move_pod(node: NodeState, old, new, res_old, res) -> None:
    """A pod bound or gone: the node's GPU contribution `old` -> `new` and its resource part `res_old` -> `res`, in one pass.

    The resource parts are recomputed from the node before and after the change rather than
    stored on it: a stored tuple is one more cold object per event at 256k nodes.
    """
    if old is None or new is None or old[1] != new[1] or res_old is None or res is None:
        apply_contribution(node, old, new)  # the rarer shapes of change
        if res != res_old:
            apply_resources(node, res_old, res)
        return
    h_old, h_new = old[0], new[0]
    _move_whole(node.aggs, h_old, h_new, _deltas(h_old, h_new) if h_old != h_new else (),
                packed(res[0] - res_old[0], res[1] - res_old[1], res[2] - res_old[2]))
    _count_free(node.aggs[0].res if node.aggs else None, res_old, res)


def _move_whole(aggs: tuple, h_old: int, h_new: int, deltas: tuple, d_sums: int = 0) -> None:
    """A node stays counted and only its free whole devices (and free cpu/memory/slots, by the packed `d_sums`) change."""
    # Memory-bound at 256k nodes (each cold object costs a cache miss): touch only the agg, its
    # lists and the buckets; the buckets hold aggs, not domains, so hashing needs no extra object.
    for agg in aggs:
        hist = agg.hist
        hist[h_old] -= 1
        if len(hist) <= h_new:
            hist.extend([0] * (h_new + 1 - len(hist)))
        hist[h_new] += 1
        caps = agg.caps
        if d_sums and len(caps) == _WITH_SUMS:  # the resource sums ride in caps (not at per-node levels)
            caps[_SUMS] += d_sums
        if not deltas:
            continue
        lists = agg.lists
        if lists is None:  # a root: nothing to rank
            for i, d in deltas:
                caps[i] += d
            continue
        for i, d in deltas:
            before = caps[i]
            caps[i] = after = before + d
            b = lists[i]
            if b is None:
                continue
            # Buckets.move, inlined: this loop is most of a pod-bind event.
            by_cap = b.by_cap
            if before:
                bucket = by_cap[before]
                del bucket[agg]
                if not bucket:
                    del by_cap[before]
                    order = b.order
                    del order[bisect_left(order, before)]
            if after:
                bucket = by_cap.get(after)
                if bucket is None:
                    by_cap[after] = {agg: None}
                    insort(b.order, after)
                else:
                    bucket[agg] = None


def add_bulk(node: NodeState, contribution) -> None:
    """Add a node's contribution to its domains' histograms only (bulk load; caps and buckets come after)."""
    h, partials = contribution
    for agg in node.aggs:
        hist = agg.hist
        if len(hist) <= h:
            hist.extend([0] * (h + 1 - len(hist)))
        hist[h] += 1
        agg.nodes += 1
        if partials:
            partial = agg.partial
            for state in partials:
                partial[state] = partial.get(state, 0) + 1


def finish_bulk(tree: Tree) -> None:
    """Compute caps from histograms and fill the level buckets, once, after a bulk load."""
    stack = [tree.root]
    while stack:
        domain = stack.pop()
        stack.extend(domain.children.values())
        for agg in domain.aggs.values():
            caps = [0] * len(SHAPES)
            for h, c in enumerate(agg.hist):
                if c and h:
                    for i, per in enumerate(caps_of(h)):
                        caps[i] += per * c
            agg.caps[: len(SHAPES)] = caps  # the resource sums after them stay
            if agg.lists is not None:
                for i, cap in enumerate(caps):
                    if cap:
                        _move(agg, i, 0, cap)
