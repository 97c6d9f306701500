"""The gang query: the tightest domain of a level that holds the whole gang (Kueue TAS BestFit), and its nodes.

See docs/placement.md for the algorithm and its tie-breaks.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Mapping

from policy.placement.aggregates import SHAPE_INDEX, Domain, Tree
from policy.placement.capacity import TAINT_SEP, model_key, tolerates
from policy.placement.devices import FULL, Demand, NodeState
from policy.placement.room import NODE_BUDGET, Need, exact_cap, judge, model_keys_of, most_per_node, room, room_bound, walk
from policy.placement.result import GangRequest, PlacementReason, PlacementResult
from policy.subject.model import PodSet

VERIFY_LIMIT = 32  # mixed gangs: candidate domains packed node by node before giving up
SCAN_LIMIT = 4096  # slow-path shapes: fitting domains compared before taking the tightest seen
WIDE_DOMAIN = 256  # a domain with more nodes directly under it fills first-come instead of best-fit

def demand_of(pod_set: PodSet, gpu_models: Mapping[str, tuple[str, int]]) -> Demand | None:
    """One pod's demand from a pod set (GPUs, and cpu, memory and node filter when `needs` says); None when it asks for no GPU."""
    model = model_key(pod_set.gpu_product, gpu_models) if pod_set.gpu_product else None
    share = pod_set.fraction if pod_set.fraction is not None else pod_set.gpus
    memory = pod_set.gpu_memory or 0
    needs = pod_set.needs
    cpu, ram, flt = (needs.cpu, needs.memory, needs.node_filter) if needs is not None else (0, 0, None)  # type: ignore[attr-defined]
    if 0 < share < FULL and (pod_set.fraction is not None or pod_set.gpus < FULL):
        return Demand(milli=share, memory=memory, model=model, cpu=cpu, ram=ram, node_filter=flt)
    if pod_set.gpus <= 0:
        return None
    return Demand(whole=-(-pod_set.gpus // FULL), memory=memory, model=model, cpu=cpu, ram=ram, node_filter=flt)  # 1.5 GPUs hold 2 devices


def needs_of(gang: GangRequest, gpu_models: Mapping[str, tuple[str, int]]) -> Need:
    """Pods per demand that must fit now (`set_counts`), GPU-less sets dropped."""
    demands = [demand_of(ps, gpu_models) for ps in gang.pod_sets]
    return [(c, d) for c, d in zip(set_counts(gang, demands), demands) if c > 0 and d is not None]


def set_counts(gang: GangRequest, demands: list[Demand | None] | None = None) -> list[int]:
    """Per pod set, the pods that must fit now: each set's own minimum, then the gang's `min_count` from the cheapest sets.

    A set with `min_count` needs at least that many; the rest of the gang's minimum is
    taken from the sets' remaining pods, least demanding first (the scheduler may bind
    any `min_count` members), so the answer does not depend on the order sets are listed.
    """
    sets = gang.pod_sets
    floors = [ps.count if ps.min_count is None else min(ps.min_count, ps.count) for ps in sets]
    if gang.min_count is None or gang.min_count <= 0:
        return floors
    cost = [d.gpu_milli if d is not None else 0 for d in demands] if demands is not None else [ps.gpus for ps in sets]
    counts = [0 if ps.min_count is None else f for ps, f in zip(sets, floors)]
    left = gang.min_count - sum(counts)
    order = sorted(range(len(counts)), key=lambda i: (cost[i], sets[i].name))
    for i in order:
        take = min(max(left, 0), sets[i].count - counts[i])
        counts[i] += take
        left -= take
    if left > 0 and order:  # members not written out yet: shaped like the least demanding set
        counts[order[0]] += left
    return counts


def _with_tolerations(index, needs: Need, tolerations) -> Need:
    ok = frozenset(vk for vk, (_m, taints) in index.variants.items() if all(tolerates(tolerations, t) for t in taints))
    return [(c, replace(d, tolerated=ok)) for c, d in needs] if ok else needs


def _split(items: list[tuple[int, object]], n: int) -> list[tuple[object, int]] | None:
    """Kueue-style: take the roomiest parts until the rest fits one part, then the tightest part for the rest."""
    items = sorted((it for it in items if it[0] > 0), key=lambda it: -it[0])
    chosen: list[tuple[object, int]] = []
    remaining = n
    for pos, (cap, obj) in enumerate(items):
        if cap >= remaining:
            best = pos
            for j in range(pos + 1, len(items)):
                if items[j][0] >= remaining:
                    best = j  # sorted descending: the last one that still fits is the tightest
                else:
                    break
            chosen.append((items[best][1], remaining))
            return chosen
        chosen.append((obj, cap))
        remaining -= cap
    return None


def _node_caps(domain: Domain, demand: Demand, per_gpu, n: int, keys: tuple[str, ...]) -> list[tuple[int, NodeState]]:
    """Node capacities (nodes of the asked models only) for the split; in a huge flat domain only until n fit."""
    if len(domain.nodes) <= WIDE_DOMAIN:
        return [(node.capacity(demand, per_gpu) if node.spec.model in keys else 0, node) for node in domain.nodes]
    items, total = [], 0
    for node in domain.nodes:  # first come: scanning 256k nodes for the tightest would cost ~100 ms
        cap = node.capacity(demand, per_gpu) if node.spec.model in keys else 0
        if cap:
            items.append((cap, node))
            total += cap
            if total >= n:
                break
    return items


def _distribute(index, domain: Domain, demand: Demand, n: int, per_gpu, out: list[tuple[NodeState, int]]) -> bool:
    if domain.nodes:
        parts = _split(_node_caps(domain, demand, per_gpu, n, model_keys_of(index, demand)), n)
        if parts is None:
            return False
        out.extend(parts)  # type: ignore[arg-type]
        return True
    parts = _split([(room(index, child, demand, per_gpu), child) for child in domain.children.values()], n)
    if parts is None:
        return False
    return all(_distribute(index, child, demand, k, per_gpu, out) for child, k in parts)  # type: ignore[arg-type]


def _leaf_nodes(domain: Domain) -> list[NodeState]:
    out: list[NodeState] = []
    stack = [domain]
    while stack:
        d = stack.pop()
        out.extend(d.nodes)
        stack.extend(reversed(list(d.children.values())))
    return out


def _tightest_single(index, tree: Tree, level: int, count: int, demand: Demand, per_gpu) -> tuple[Domain, int] | None:
    keys = model_keys_of(index, demand)
    if level < 0:
        cap = room(index, tree.root, demand, per_gpu)
        return (tree.root, cap) if cap >= count else None
    exact, ok = judge(index, demand, keys)
    if not ok:
        return None  # no node has the cpu, memory or pod slot of one pod
    if not exact and tree.per_node[level] and most_per_node(index, demand, keys) < count:
        return None  # domains of single nodes: none has the cpu, memory or slots for `count` pods
    if demand.whole in SHAPE_INDEX and len(keys) == 1 and exact:
        if room(index, tree.root, demand, per_gpu) < count:
            return None  # also covers a model whose devices are too small for the memory asked
        d = tree.tightest(level, keys[0], demand.whole, count)
        return None if d is None else (d, room(index, d, demand, per_gpu))
    best: tuple[Domain, int] | None = None
    seen = 0
    memory = index.model_memory
    caps: dict[Domain, int] = {}  # the walk's filter already computed each yielded domain's capacity
    seen_nodes = [0]

    def keep(d: Domain) -> bool:
        if exact:
            cap = d.capacity(demand, per_gpu, keys, memory)
        elif d.level < level:  # above the level asked, an upper bound prunes; exact counting only where it answers
            cap = room_bound(index, d, demand, per_gpu, keys)
        else:
            cap = exact_cap(d, demand, per_gpu, keys, memory, seen_nodes)
        caps[d] = cap
        return cap >= count

    for d in walk(tree.root, level, keep):
        cap = caps[d]
        seen += 1
        if best is None or cap < best[1]:
            best = (d, cap)
            if cap == count:
                break  # a perfect fit cannot be beaten
        if seen >= SCAN_LIMIT or seen_nodes[0] >= NODE_BUDGET:
            break  # a huge level: the tightest of the first fitting domains seen (docs/placement.md)
    return best


def _pack_mixed(index, domain: Domain, needs: Need, per_gpu) -> list[tuple[str, int, int]] | None:
    """Greedy packing of several pod sets (most demanding first) on scratch copies of the domain's nodes."""
    scratch = []
    for node in _leaf_nodes(domain):
        copy = NodeState(node.name, node.spec)
        copy.whole_used = node.whole_used
        copy.cpu_used, copy.ram_used = node.cpu_used, node.ram_used
        copy.allocs = dict(node.allocs)  # pod slots taken
        copy.shared = {k: list(v) for k, v in node.shared.items()} if node.shared else None
        scratch.append(copy)
    order = sorted(range(len(needs)), key=lambda i: -needs[i][1].gpu_milli)
    out: list[tuple[str, int, int]] = []
    for i in order:
        count, demand = needs[i]
        keys = model_keys_of(index, demand)
        pool = [n for n in scratch if n.spec and n.spec.model in keys]  # asked models, tolerated taints
        parts = _split([(n.capacity(demand, per_gpu), n) for n in pool], count)
        if parts is None:
            return None
        for node, k in parts:
            for j in range(k):
                node.add((i, j, len(out)), demand, per_gpu)  # type: ignore[union-attr]
            out.append((node.name, i, k))  # type: ignore[union-attr]
    return out


def _place_at(index, tree: Tree, level: int, needs: Need, per_gpu):
    """(domain, assignments) for the tightest domain of `level` holding all needs, or None."""
    if len(needs) == 1:
        count, demand = needs[0]
        hit = _tightest_single(index, tree, level, count, demand, per_gpu)
        if hit is None:
            return None
        parts: list[tuple[NodeState, int]] = []
        if not _distribute(index, hit[0], demand, count, per_gpu, parts):
            return None  # aggregates and nodes disagree: never claim a fit we cannot show
        return hit[0], [(node.name, 0, k) for node, k in parts]
    primary = max(range(len(needs)), key=lambda i: needs[i][1].gpu_milli)

    def holds_each(d: Domain) -> bool:
        return all(room(index, d, dem, per_gpu) >= c for c, dem in needs)

    candidates = [tree.root] if level < 0 else list(walk(tree.root, level, holds_each))
    if level < 0 and not holds_each(tree.root):
        return None
    candidates.sort(key=lambda d: room(index, d, needs[primary][1], per_gpu))
    for d in candidates[:VERIFY_LIMIT]:
        packed = _pack_mixed(index, d, needs, per_gpu)
        if packed is not None:
            return d, packed
    return None


def _levels(tree: Tree, gang: GangRequest) -> tuple[int, int] | str:
    """(start, stop) levels to try, tightest first; or the name of a level the tree lacks."""
    levels: list[int | None] = []
    for name in (gang.required, gang.preferred):
        lvl = None if name is None else tree.level_of(name)
        if name is not None and lvl is None:
            return name
        levels.append(lvl)
    required, preferred = levels
    start = preferred if preferred is not None and (required is None or preferred >= required) else required
    stop = required if required is not None else -1
    return (-1 if start is None else start), stop


def _needs(index, gang: GangRequest) -> Need:
    needs = needs_of(gang, index.gpu_models)
    if gang.models:
        allowed = frozenset(gang.models)
        needs = [(c, replace(d, models=allowed)) for c, d in needs]
    if gang.tolerations and index.variants:
        needs = _with_tolerations(index, needs, gang.tolerations)
    if any(d.node_filter is not None for _c, d in needs):  # a filter every node passes is no filter: keep the fast path
        needs = [(c, replace(d, node_filter=None) if d.node_filter is not None and index.passes_all(d.node_filter, model_keys_of(index, d)) else d)
                 for c, d in needs]
    return needs


def _holds(index, domain: Domain, demand: Demand, n: int, per_gpu) -> bool:
    """Whether `_distribute` would succeed, without building the parts: node capacities summed until n."""
    if not domain.nodes:
        return _distribute(index, domain, demand, n, per_gpu, [])
    keys = model_keys_of(index, demand)
    total = 0
    for node in domain.nodes:
        if node.spec is not None and node.spec.model in keys:
            total += node.capacity(demand, per_gpu)
            if total >= n:
                return True
    return False


def _base_models(index, needs: Need) -> list[str]:
    """The GPU models (taint variants folded) the gang's model-free demands could land on."""
    found: set[str] = set()
    for _c, d in needs:
        if d.model is None:
            found.update(k.split(TAINT_SEP, 1)[0] for k in model_keys_of(index, d))
    return sorted(found)


def _pools_differ(index, needs: Need) -> bool:
    """Whether a demand of unknown model could be placed on nodes of more than one model."""
    return len(_base_models(index, needs)) > 1


def _model_unknown(index, why: str) -> PlacementReason:
    models = sorted({k.split(TAINT_SEP, 1)[0] for k in index.model_memory})
    msg = (f"not yet placeable: {why}, and this cluster's GPU nodes are of {len(models)} models ({', '.join(models)}); "
           "the gang is planned when its first member arrives")
    return PlacementReason("ModelUnknown", msg, {"models": models})


def fits(index, gang: GangRequest) -> bool:
    """`search(index, gang).fits`, without building the placement or its messages (checks needing yes/no)."""
    tree, _problem = index.tree_for(gang.topology)
    if tree is None:
        return False
    bounds = _levels(tree, gang)
    if isinstance(bounds, str):
        return False
    start, stop = bounds
    needs = _needs(index, gang)
    if gang.model_unknown is not None and _pools_differ(index, needs):
        return False
    if len(needs) != 1:
        return bool(needs) and search(index, gang).fits
    count, demand = needs[0]
    for level in range(start, stop - 1, -1):  # the same levels and tests as `_place_at` for one pod set
        hit = _tightest_single(index, tree, level, count, demand, gang.per_gpu)
        if hit is not None and _holds(index, hit[0], demand, count, gang.per_gpu):
            return True
    return False


def search(index, gang: GangRequest) -> PlacementResult:
    """Answer one gang query against the index's current free capacity (reservations included)."""
    tree, problem = index.tree_for(gang.topology)
    if tree is None:
        return PlacementResult(False, topology=gang.topology, reasons=(problem,))
    bounds = _levels(tree, gang)
    if isinstance(bounds, str):
        name = bounds
        msg = f"topology {tree.name} has no level {name!r} (levels: {', '.join(tree.level_names) or 'none'})"
        return PlacementResult(False, topology=tree.name, reasons=(PlacementReason("UnknownLevel", msg, {"level": name}),))
    start, stop = bounds
    needs = _needs(index, gang)
    if not needs:
        msg = "the gang asks for no GPUs: nothing to place"
        return PlacementResult(False, topology=tree.name, reasons=(PlacementReason("NothingToPlace", msg, {}),))
    demands = tuple(d for _c, d in needs)
    if gang.model_unknown is not None and _pools_differ(index, needs):
        return PlacementResult(False, topology=tree.name, reasons=(_model_unknown(index, gang.model_unknown),), demands=demands)
    for level in range(start, stop - 1, -1):
        hit = _place_at(index, tree, level, needs, gang.per_gpu)
        if hit is None:
            continue
        domain, assignments = hit
        nodes: dict[str, int] = {}
        for node, _i, k in assignments:
            nodes[node] = nodes.get(node, 0) + k
        pods = sum(c for c, _d in needs)
        where = domain.describe()
        note = "" if level == start else f" (no {tree.level_names[start]} held it; climbed to {tree.level_names[level] if level >= 0 else 'the whole topology'})"
        msg = f"{where} holds the whole gang, {pods} pod{'s' if pods != 1 else ''}, on {len(nodes)} node{'s' if len(nodes) != 1 else ''}{note}"
        data = {"level": tree.level_names[level] if level >= 0 else None, "domain": domain.value, "pods": pods, "nodes": len(nodes)}
        return PlacementResult(
            True,
            topology=tree.name,
            level=data["level"],  # type: ignore[arg-type]
            label=tree.labels[level] if level >= 0 else None,
            domain=domain.value,
            nodes=nodes,
            reasons=(PlacementReason("Fits", msg, data),),
            assignments=tuple(assignments),
            demands=demands,
            per_gpu=gang.per_gpu,
            path=tuple(zip(tree.labels, domain.path)),
        )
    from policy.placement.explain import explain_unfit

    return PlacementResult(False, topology=tree.name, reasons=explain_unfit(index, tree, stop, needs, gang.per_gpu), demands=demands)
