"""How many pods of a demand a domain has room for: GPUs from the aggregates, cpu, memory and pod slots where they bind.

Shared by the query (which domain holds the gang) and the explanation (why none does). `index`
arguments are the `PlacementIndex`; they are not annotated so this module imports no module above it.
"""

from __future__ import annotations

from policy.placement.aggregates import Domain, bound, certain, most_free
from policy.placement.devices import Demand

Need = list[tuple[int, Demand]]  # (pods, demand) per pod set, zero-GPU sets dropped


def model_keys_of(index, demand: Demand) -> tuple[str, ...]:
    # No model asked: every model counts (one key in a one-model cluster, so the bucket fast path applies).
    base = (demand.model,) if demand.model else index.model_keys
    if demand.models:  # a gang block's `models`: only those pools
        base = tuple(k for k in base if k in demand.models)
    if not demand.tolerated:
        return base
    # Tainted pools the gang tolerates join; keys with no node drop out, so an all-tainted
    # pool of one model is still a single key (and keeps the bucket fast path).
    wanted = set(base) if demand.model or demand.models else None
    extra = [vk for vk in sorted(demand.tolerated) if wanted is None or index.variants[vk][0] in wanted]
    return tuple(k for k in base if k in index.model_memory) + tuple(extra)


def judge(index, demand: Demand, keys: tuple[str, ...]) -> tuple[bool, bool]:
    """(exact, possible) for `demand`, from the flat root (every node), once per demand and index version.

    exact: cpu, memory and pod slots never run out before GPUs on any node, so the GPU
    aggregates (and the bucket fast path) answer as they are. possible: some node with GPU
    room has the cpu, memory and pod slot one pod asks; when not, nothing holds a pod.
    """
    memo = index.exact_memo
    if memo[0] == index.version and memo[1] is demand:
        return memo[2], memo[3]
    aggs = [agg for key in keys if (agg := index.flat.root.aggs.get(key)) is not None and agg.vec]
    exact = all(certain(agg, demand, index.max_gpus) for agg in aggs)
    ok = exact or any(bound(agg, demand) != 0 for agg in aggs)
    index.exact_memo = (index.version, demand, exact, ok)
    return exact, ok


def exact_everywhere(index, demand: Demand, keys: tuple[str, ...]) -> bool:
    """Whether GPU capacity is exact for `demand` in every domain (see `_judge`)."""
    return judge(index, demand, keys)[0]


NODE_BUDGET = 1024  # nodes counted one by one per query, once a fitting domain is known (docs/placement.md)


def exact_cap(domain: Domain, demand: Demand, per_gpu: int | None, keys: tuple[str, ...], memory: dict[str, int], seen: list[int] | None = None) -> int:
    """Pods of `demand` the domain holds counting cpu, memory, pod slots and the node filter: its GPU capacity where
    the resource aggregates make that certain, 0 where they rule one pod out, else the sum over its children, down
    to its nodes (`seen[0]` counts the nodes looked at)."""
    gpu = domain.capacity(demand, per_gpu, keys, memory)
    if not gpu:
        return 0
    aggs = [agg for key in keys if (agg := domain.aggs.get(key)) is not None and agg.vec]
    if all(certain(agg, demand) for agg in aggs):
        return gpu
    if all(bound(agg, demand) == 0 for agg in aggs):
        return 0
    if domain.nodes:
        nodes = domain.nodes
    elif domain.level + 1 < len(domain.tree.per_node) and domain.tree.per_node[domain.level + 1]:
        nodes = [node for child in domain.children.values() for node in child.nodes]  # hosts: count their nodes directly
    else:
        return sum(exact_cap(child, demand, per_gpu, keys, memory, seen) for child in domain.children.values())
    if seen is not None:
        seen[0] += len(nodes)
    return count_nodes(nodes, demand, per_gpu, keys, memory)


def count_nodes(nodes, demand: Demand, per_gpu: int | None, keys: tuple[str, ...], memory: dict[str, int]) -> int:
    """Σ node.capacity(demand) over the nodes of the asked models; the whole-GPU, unshared case inlined (it is most of them)."""
    total = 0
    whole, cpu, ram, flt = demand.whole, demand.cpu, demand.ram, demand.node_filter
    fits_memory = {key: not demand.memory or memory.get(key, 0) * whole >= demand.memory for key in keys} if whole else None
    for node in nodes:
        spec = node.spec
        if spec is None or spec.model not in keys:
            continue
        if whole and not node.shared and spec.eligible and fits_memory[spec.model]:
            n = (spec.gpus - node.whole_used) // whole
            if n <= 0:
                continue
            slots = spec.pods - len(node.allocs)
            if slots < n:
                n = slots
            if cpu:
                c = (spec.cpu - node.cpu_used) // cpu
                if c < n:
                    n = c
            if ram:
                r = (spec.ram - node.ram_used) // ram
                if r < n:
                    n = r
            if n > 0 and (flt is None or flt.matches(node.name, spec.labels)):
                total += n
        else:
            total += node.capacity(demand, per_gpu)
    return total


def room(index, domain: Domain, demand: Demand, per_gpu: int | None) -> int:
    keys = model_keys_of(index, demand)
    exact, ok = judge(index, demand, keys)
    if exact:
        return domain.capacity(demand, per_gpu, keys, index.model_memory)
    return exact_cap(domain, demand, per_gpu, keys, index.model_memory) if ok else 0


def most_per_node(index, demand: Demand, keys: tuple[str, ...]) -> int:
    """At most this many pods of `demand` on any one node by cpu, memory and pod slots (the flat root's largest free)."""
    best = 0
    for key in keys:
        agg = index.flat.root.aggs.get(key)
        top = most_free(agg) if agg is not None and agg.vec else None
        if top is None:
            continue
        cpu, ram, slots = top
        n = slots
        if demand.cpu:
            n = min(n, cpu // demand.cpu)
        if demand.ram:
            n = min(n, ram // demand.ram)
        best = max(best, n)
    return best


def room_bound(index, domain: Domain, demand: Demand, per_gpu: int | None, keys: tuple[str, ...]) -> int:
    """An upper bound of `_cap` from the aggregates alone: GPU capacity, and per model the cpu/memory/slot sums' bound."""
    if not judge(index, demand, keys)[1]:
        return 0
    total = 0
    memory = index.model_memory
    for key in keys:
        agg = domain.aggs.get(key)
        if agg is None or not agg.vec:
            continue
        gpu = domain.capacity(demand, per_gpu, (key,), memory)
        by_res = bound(agg, demand)
        total += gpu if by_res is None or by_res > gpu else by_res
    return total


def walk(domain: Domain, level: int, keep):
    """Domains of `level` under `domain`, depth first in insertion order, skipping subtrees `keep` rejects."""
    stack = [domain]
    while stack:
        d = stack.pop()
        if not keep(d):
            continue
        if d.level == level:
            yield d
        elif d.children:
            stack.extend(reversed(d.children.values()))  # dict views reverse without a copy
