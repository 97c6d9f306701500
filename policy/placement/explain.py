"""Why a gang does not fit: ranked reasons with the numbers (best domain, its parent, the whole topology)."""

from __future__ import annotations

from policy.placement.aggregates import SHAPE_INDEX, Domain, Tree, most_free
from policy.placement.capacity import TAINT_SEP
from policy.placement.devices import Demand
from policy.placement.room import Need, exact_everywhere, model_keys_of, room, room_bound, walk
from policy.placement.result import PlacementReason, describe_demand, format_cpu
from lang.quantity import format_bytes_short


EXPLAIN_NODES = 4096  # nodes a reason counts one by one; above, it gives the aggregates' bound ("at most")


def _room(index, domain: Domain, demand: Demand, per_gpu) -> tuple[int, bool]:
    """(pods of `demand` the domain holds, exact?): exact where the aggregates are, or the domain is small enough to
    count node by node; else the aggregates' upper bound, so a does-not-fit answer never scans 256k nodes."""
    keys = model_keys_of(index, demand)
    if exact_everywhere(index, demand, keys):
        return room(index, domain, demand, per_gpu), True
    size = sum(agg.nodes for key in keys if (agg := domain.aggs.get(key)) is not None)
    if size <= EXPLAIN_NODES:
        return room(index, domain, demand, per_gpu), True
    return room_bound(index, domain, demand, per_gpu, keys), False


def _at_most(n: int, exact: bool) -> str:
    return str(n) if exact else f"at most {n}"


def _roomiest(index, tree: Tree, level: int, demand: Demand, per_gpu) -> tuple[Domain | None, int]:
    keys = model_keys_of(index, demand)
    exact = exact_everywhere(index, demand, keys)
    if demand.whole in SHAPE_INDEX and len(keys) == 1 and (not exact or room(index, tree.root, demand, per_gpu) > 0):
        d = tree.largest(level, keys[0], demand.whole)  # when cpu or memory may bind first: the roomiest by GPUs
        return (d, _room(index, d, demand, per_gpu)[0]) if d is not None else (None, 0)
    if not exact and sum(agg.nodes for key in keys if (agg := tree.root.aggs.get(key)) is not None) > EXPLAIN_NODES:
        return None, 0  # finding the roomiest would count every node
    best: tuple[Domain | None, int] = (None, 0)
    for d in walk(tree.root, level, lambda d: room(index, d, demand, per_gpu) > best[1]):
        cap = room(index, d, demand, per_gpu)
        if cap > best[1]:
            best = (d, cap)
    return best


def _excluded(index) -> PlacementReason | None:
    counts = {k: v for k, v in sorted(index.excluded.items()) if v}
    if not counts:
        return None
    total = sum(counts.values())
    parts = ", ".join(f"{v} {k}" for k, v in counts.items())
    return PlacementReason("ExcludedNodes", f"{total} GPU node{'s' if total != 1 else ''} take no pods: {parts}", counts)


def _untolerated(index, needs: Need) -> PlacementReason | None:
    """Eligible GPU nodes the gang may not use because of taints it does not tolerate."""
    ok = needs[0][1].tolerated if needs else frozenset()
    counts: dict[str, int] = {}
    for vk in index.variants:
        agg = index.flat.root.aggs.get(vk)
        if vk not in ok and agg is not None and agg.nodes:
            taints = vk.split(TAINT_SEP, 1)[1]
            counts[taints] = counts.get(taints, 0) + agg.nodes
    if not counts:
        return None
    total = sum(counts.values())
    parts = ", ".join(f"{t} ({n})" for t, n in sorted(counts.items()))
    msg = f"{total} GPU node{'s' if total != 1 else ''} carry taints the gang does not tolerate: {parts}"
    return PlacementReason("UntoleratedTaints", msg, counts)


def _resources(index, tree: Tree, needs: Need, per_gpu) -> tuple[list[PlacementReason], list[PlacementReason]]:
    """(blocking, limiting) reasons from cpu, memory, pod slots and node filters.

    Blocking: no node with GPU room for one pod has what one pod asks (`cpu: 96 requested
    per pod, the best node with room for its GPUs has 64 free`), read from the flat root's
    exact largest free amounts; or no such node passes the node filter (a scan, only for
    gangs with a filter some node fails). Limiting: the topology holds fewer pods than its
    GPUs would.
    """
    blocking: list[PlacementReason] = []
    limiting: list[PlacementReason] = []
    for count, demand in needs:
        keys = model_keys_of(index, demand)
        gpu_only = Demand(demand.whole, demand.milli, demand.memory, demand.model, demand.tolerated)
        by_gpu = tree.root.capacity(gpu_only, per_gpu, keys, index.model_memory)  # GPUs alone
        best = [0, 0, 0]
        for key in keys:
            agg = index.flat.root.aggs.get(key)
            top = most_free(agg) if agg is not None and agg.nodes else None
            if top is not None:
                best = [max(a, b) for a, b in zip(best, top)]
        if not any(best):
            continue  # no node has GPU room: InsufficientCapacity says so
        what = describe_demand(demand)
        found = False
        for name, asked, free, show in (("cpu", demand.cpu, best[0], format_cpu), ("memory", demand.ram, best[1], format_bytes_short),
                                        ("pods", 1, best[2], str)):
            if asked and free < asked:
                if show(asked) == show(free):  # rounded alike: the exact amounts show the shortfall
                    show = str
                msg = f"{name}: {show(asked)} requested per pod, the best node with room for its GPUs has {show(free)} free"
                blocking.append(PlacementReason("InsufficientResource", msg, {"resource": name, "requested": asked, "best_free": free, "demand": what}))
                found = True
        flt = demand.node_filter
        if not found and flt is not None:
            matched = sum(1 for node in index.flat.root.nodes
                          if node.spec is not None and node.spec.model in keys and node.gpu_capacity(gpu_only, per_gpu) > 0
                          and flt.matches(node.name, node.spec.labels))
            if not matched:
                msg = f"node selector: no node with room for its GPUs matches {flt.describe()}"
                blocking.append(PlacementReason("NodeSelectorMismatch", msg, {"matching": 0, "demand": what}))
                found = True
        if found:
            continue
        counted, exact = _room(index, tree.root, demand, per_gpu)
        if exact and counted < by_gpu and counted < count:
            parts = [p for p, on in (("cpu", demand.cpu), ("memory", demand.ram), ("the node filter", flt is not None)) if on] + ["pod slots"]
            msg = (f"with {', '.join(parts[:-1])} and {parts[-1]} counted" if len(parts) > 1 else "with pod slots counted") + (
                f", topology {tree.name} has room for {counted} pods of {what}, not the {by_gpu} its free GPUs hold")
            limiting.append(PlacementReason("ResourcesLimit", msg, {"by_gpus": by_gpu, "fits": counted, "demand": what}))
    return blocking, limiting


def explain_unfit(index, tree: Tree, level: int, needs: Need, per_gpu) -> tuple[PlacementReason, ...]:
    """Ranked reasons a gang fits no domain of `level` (-1: not even the whole topology)."""
    blocking, limiting = _resources(index, tree, needs, per_gpu)
    reasons: list[PlacementReason] = list(blocking)  # the resource that ran out first: it is the story
    mixed = len(needs) > 1
    pods = sum(c for c, _d in needs)
    for count, demand in needs:
        total, exact = _room(index, tree.root, demand, per_gpu)
        if total >= count:
            continue
        what = describe_demand(demand)
        msg = f"topology {tree.name} has room for {_at_most(total, exact)} of {count} pods of {what} in all"
        if tree is not index.flat:
            everywhere, exact_flat = _room(index, index.flat.root, demand, per_gpu)
            if everywhere > total and exact and exact_flat:
                msg += f" ({everywhere - total} more on GPU nodes lacking one or more of its labels {', '.join(tree.labels)})"
        reasons.append(PlacementReason("InsufficientCapacity", msg, {"pods": count, "fits": total, "exact": exact, "demand": what}))
    if level >= 0:
        name = tree.level_names[level]
        if mixed:
            msg = f"no {name} of topology {tree.name} holds the whole gang ({pods} pods in {len(needs)} pod sets)"
            reasons.append(PlacementReason("NoDomainFits", msg, {"level": name, "pods": pods}))
        else:
            count, demand = needs[0]
            best, cap = _roomiest(index, tree, level, demand, per_gpu)
            total, exact = _room(index, tree.root, demand, per_gpu)
            msg = f"no {name} of topology {tree.name} holds {count} pods of {describe_demand(demand)}"
            data: dict[str, object] = {"level": name, "pods": count, "best_fits": cap, "topology_fits": total}
            if best is not None:
                by = "" if exact_everywhere(index, demand, model_keys_of(index, demand)) else " by GPUs"
                msg += f"; the roomiest{by}, {best.describe()}, fits {cap} of {count}"
                data["best_domain"] = best.value
                parent = best.parent
                if parent is not None and parent.level >= 0:
                    held, held_exact = _room(index, parent, demand, per_gpu)
                    msg += f"; {parent.describe()} fits {_at_most(held, held_exact)} across its {name}s"
            msg += f"; the whole topology fits {_at_most(total, exact)}"
            # Ranked after InsufficientCapacity: when capacity is short, fragmentation is not the story.
            reasons.append(PlacementReason("NoDomainFits", msg, data))
    reasons.extend(limiting)
    for extra in (_untolerated(index, needs), _excluded(index)):
        if extra is not None:
            reasons.append(extra)
    if not reasons:
        reasons.append(PlacementReason("NoDomainFits", f"topology {tree.name} cannot hold the whole gang ({pods} pods)", {"pods": pods}))
    return tuple(reasons)
