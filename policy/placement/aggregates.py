"""Per-domain incremental aggregates and per-level capacity buckets, so a query touches domains, not nodes.

Each domain keeps, per GPU model (and `*` for any model): a histogram of its
eligible nodes by free whole devices, the pods of k whole GPUs it holds for each
k in `SHAPES` (exact: sum of `free // k` over its nodes), and a count of its
shared devices by state. Each level keeps, per model and shape, buckets of domains
by capacity, so "the tightest domain that holds n pods" is a walk up from bucket n.
A node event changes one node's contribution and updates its ancestors: O(depth).
"""

from __future__ import annotations

from policy.placement.devices import FULL, Demand, NodeState, device_fit, whole_fit

SHAPES = (1, 2, 4, 8)  # whole-GPU pod sizes with exact per-level buckets; others take the slow path
SHAPE_INDEX = {k: i for i, k in enumerate(SHAPES)}
ANY = "*"


class Agg:
    """One domain's aggregate for one model key."""

    __slots__ = ("hist", "caps", "partial", "nodes")

    def __init__(self) -> None:
        self.hist: list[int] = [0]  # hist[h] = eligible nodes with h free whole devices
        self.caps = [0] * len(SHAPES)  # caps[i] = pods of SHAPES[i] whole GPUs that fit
        self.partial: dict[tuple[int, int, int], int] = {}  # shared device state -> devices
        self.nodes = 0

    def free_whole(self) -> int:
        """Untouched devices in the domain."""
        return sum(h * c for h, c in enumerate(self.hist))


class Domain:
    """One value of one topology level (or the topology's root, level -1)."""

    __slots__ = ("tree", "level", "value", "path", "parent", "children", "nodes", "aggs")

    def __init__(self, tree: "Tree", level: int, path: tuple[str, ...], parent: "Domain | None"):
        self.tree = tree
        self.level = level
        self.path = path
        self.value = path[-1] if path else None
        self.parent = parent
        self.children: dict[str, Domain] = {}
        self.nodes: dict[NodeState, None] = {}  # only at the deepest level; a dict for O(1) removal
        self.aggs: dict[str, Agg] = {}

    def capacity(self, demand: Demand, per_gpu: int | None, models: tuple[str, ...], memory: dict[str, int]) -> int:
        """Exact pods of a single `demand` this domain holds now, over the given model keys."""
        total = 0
        for key in models:
            agg = self.aggs.get(key)
            if agg is None or agg.nodes == 0:
                continue
            if demand.whole:
                i = SHAPE_INDEX.get(demand.whole)
                if demand.memory and key != ANY and whole_fit(1, memory.get(key, 0), demand) == 0:
                    continue
                total += agg.caps[i] if i is not None else sum((h // demand.whole) * c for h, c in enumerate(agg.hist))
            else:
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

    __slots__ = ("name", "level_names", "labels", "root", "buckets", "domains_at")

    def __init__(self, name: str, levels) -> None:
        self.name = name
        self.level_names = tuple(level for level, _label in levels)
        self.labels = tuple(label for _level, label in levels)
        self.root = Domain(self, -1, (), None)
        # buckets[level][model][shape] = list by capacity of insertion-ordered dicts of domains
        self.buckets: list[dict[str, list[list[dict]]]] = [{} for _ in self.level_names]
        self.domains_at: list[int] = [0 for _ in self.level_names]

    def domains_for(self, path: tuple[str, ...]) -> list[Domain]:
        """The chain root → deepest domain for a node's label path, created on first sight."""
        chain = [self.root]
        node = self.root
        for depth, value in enumerate(path):
            child = node.children.get(value)
            if child is None:
                child = Domain(self, depth, path[: depth + 1], node)
                node.children[value] = child
                self.domains_at[depth] += 1
            chain.append(child)
            node = child
        return chain

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
        buckets = lists[SHAPE_INDEX[shape]]
        for cap in range(max(n, 1), len(buckets)):
            b = buckets[cap]
            if b:
                return next(iter(b))
        return None

    def largest(self, level: int, model: str, shape: int) -> Domain | None:
        """A domain of the level with the most capacity for `shape`."""
        lists = self.buckets[level].get(model)
        if not lists:
            return None
        buckets = lists[SHAPE_INDEX[shape]]
        for cap in range(len(buckets) - 1, 0, -1):
            if buckets[cap]:
                return next(iter(buckets[cap]))
        return None


def _move(tree: Tree, domain: Domain, model: str, i: int, old: int, new: int) -> None:
    per_model = tree.buckets[domain.level]
    lists = per_model.get(model)
    if lists is None:
        lists = per_model[model] = [[{}] for _ in SHAPES]
    buckets = lists[i]
    if old:
        del buckets[old][domain]
    if new:
        while len(buckets) <= new:
            buckets.append({})
        buckets[new][domain] = None


def apply_contribution(node: NodeState, model: str, old, new) -> None:
    """Replace a node's contribution `old` by `new` ((free whole, partial states) or None) in all its domains."""
    if old == new:
        return
    h_old, p_old = old if old is not None else (None, ())
    h_new, p_new = new if new is not None else (None, ())
    for domain in node.domains:
        tree = domain.tree
        for key in (model, ANY):
            agg = domain.aggs.get(key)
            if agg is None:
                agg = domain.aggs[key] = Agg()
            hist = agg.hist
            if h_old is not None:
                hist[h_old] -= 1
                agg.nodes -= 1
            if h_new is not None:
                while len(hist) <= h_new:
                    hist.append(0)
                hist[h_new] += 1
                agg.nodes += 1
            if h_old != h_new:
                caps = agg.caps
                for i, k in enumerate(SHAPES):
                    before = caps[i]
                    after = before - (h_old // k if h_old else 0) + (h_new // k if h_new else 0)
                    if after != before:
                        caps[i] = after
                        if domain.level >= 0:
                            _move(tree, domain, key, i, before, after)
            if key == ANY or p_old == p_new:
                continue
            partial = agg.partial
            for state in p_old:
                left = partial[state] - 1
                if left:
                    partial[state] = left
                else:
                    del partial[state]
            for state in p_new:
                partial[state] = partial.get(state, 0) + 1
