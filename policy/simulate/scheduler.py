"""The scheduler model: binds admitted pods to nodes, counting GPUs (whole and shared), cpu and memory.

GPU feasibility is the placement index's own per-device model (`policy.placement`):
whole devices, shared devices packed by milli and memory. Cpu and memory are
`status.allocatable` minus the requests of bound pods. Policies (kube-scheduler's
NodeResourcesFit scoring strategies, over cpu, memory and — for GPU pods — GPU):

- `spread`: LeastAllocated, the kube-scheduler default: the node left emptiest after placing.
- `binpack`: MostAllocated: the node left fullest.
- `least-free-gpu`: the node whose free GPU the pod fills most tightly (then the fullest), so
  whole devices stay whole for whole-GPU pods.

Scores are exact fractions; ties go to the node first in name order (kube-scheduler
breaks ties at random; a simulation must not). Nodes with equal allocatable and GPU
model form a group kept sorted by usage, so choosing a node costs one feasible
candidate per group, not a scan of the cluster.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Iterable, Mapping

from sortedcontainers import SortedList

from policy.placement.devices import FULL, Demand
from policy.simulate.resources import NodeAllocatable, NodeSelection

SCHEDULERS = ("spread", "binpack", "least-free-gpu", "default")  # default: policy/simulate/default.py
GPU_PRODUCT = "nvidia.com/gpu.product"
# Labels that describe a node's hardware (GFD, node.kubernetes.io/instance-type) join its group's shape; the
# rest (hostname, rack, zone…) vary per node and would split groups down to single nodes.
SHAPE_LABELS = ("nvidia.com/", "node.kubernetes.io/instance-type", "kubernetes.io/arch", "kubernetes.io/os")
STARVED_CPU = 1000  # millicores: below this free cpu a node's idle GPUs count as stranded by cpu
STARVED_MEMORY = 2**30  # bytes: likewise for memory

# Why a node cannot take a pod, in the order they are checked (kube-scheduler's wording).
WHY = {
    "NodeUnschedulable": "node(s) were unschedulable or not Ready",
    "NodeAffinity": "node(s) didn't match Pod's node affinity/selector",
    "InsufficientGPU": "Insufficient nvidia.com/gpu",
    "InsufficientCPU": "Insufficient cpu",
    "InsufficientMemory": "Insufficient memory",
}


@dataclass(frozen=True, slots=True)
class PodRequest:
    """What one pod asks of a node."""

    cpu: int
    memory: int
    gpu_milli: int  # GPU-equivalents held, milli (whole devices × 1000, or the share)
    demand: Demand | None  # the placement index's per-device demand; None for CPU-only pods
    selection: NodeSelection
    signature: tuple  # equal signatures, equal feasibility
    prefer: tuple = ()  # (weight, NodeFilter) of its preferred node-affinity terms (the `default` model scores them)


def pod_request(cpu: int, memory: int, demand: Demand | None, selection: NodeSelection, prefer: tuple = ()) -> PodRequest:
    """A PodRequest; the signature keys the 'does not fit anywhere' cache."""
    sel = None if selection.empty else selection.filter
    gpu = demand.gpu_milli if demand is not None else 0
    d = (demand.whole, demand.milli, demand.memory, demand.model) if demand is not None else None
    return PodRequest(cpu, memory, gpu, demand, selection, (cpu, memory, d, sel), prefer)


class SimNode:
    """One node's allocatable and what bound pods use of it."""

    __slots__ = ("i", "alloc", "gpus", "group", "cpu_used", "mem_used", "gpu_used", "pods", "gauges", "gkey", "glist", "ckey")

    def __init__(self, i: int, alloc: NodeAllocatable, gpus: int):
        self.i = i
        self.alloc = alloc
        self.gpus = gpus
        self.group: Group | None = None
        self.cpu_used = self.mem_used = self.gpu_used = self.pods = 0
        self.gauges = (0, 0, 0, 0)
        self.gkey = self.ckey = self.glist = None


class Group:
    """Nodes of one shape (cpu, memory, GPUs, hardware labels), sorted by usage."""

    __slots__ = ("cap_cpu", "cap_mem", "cap_gpu", "labels", "nodes", "by_gpu", "by_cpu")
    # by_gpu: (untouched devices h, b) -> SortedList of (key, i, node), best first, for nodes with some GPU free.
    # b is -1 when h > 0 (a share fits an untouched device), else the largest free share of a shared device // 100,
    # so a GPU pod visits only lists that can hold it instead of walking full nodes.

    def __init__(self, cap_cpu: int, cap_mem: int, gpus: int, labels: Mapping[str, str]):
        self.cap_cpu, self.cap_mem, self.cap_gpu = cap_cpu, cap_mem, gpus * FULL
        self.labels = labels
        self.nodes: list[SimNode] = []
        self.by_gpu: dict[tuple[int, int], SortedList] = {}
        self.by_cpu = SortedList()  # (key, i, node) of every node, best first for CPU-only pods


def move_gauges(sched, node, used: int, partial_free: int, cpu_free: int, mem_free: int) -> None:
    """Set a node's gauges (GPU used, idle on shared devices, idle on a used node, idle where cpu or memory ran out)
    and move the scheduler's cluster totals by the change."""
    free = node.gpus * FULL - used
    starved = free if free and (cpu_free < STARVED_CPU or mem_free < STARVED_MEMORY) else 0
    gauges = (used, partial_free, free if used and free else 0, starved)
    old = node.gauges
    sched.gpu_alloc += gauges[0] - old[0]
    sched.frag_device += gauges[1] - old[1]
    sched.frag_node += gauges[2] - old[2]
    sched.frag_starved += gauges[3] - old[3]
    node.gauges = gauges


class Scheduler:
    """Chooses a node for each admitted pod and keeps usage, allocation and fragmentation gauges."""

    def __init__(self, kind: str, index, nodes: Iterable[Mapping], allocatable):
        if kind not in SCHEDULERS:
            raise ValueError(f"unknown scheduler {kind!r} (expected one of {', '.join(SCHEDULERS)})")
        self.kind = kind
        self.index = index  # a policy.placement.PlacementIndex over the simulated snapshot (GPU devices)
        self.nodes: dict[str, SimNode] = {}
        self.groups: list[Group] = []
        by_shape: dict[tuple, Group] = {}
        allocs = sorted((allocatable(n) for n in nodes), key=lambda a: a.name)
        self.gpu_total = self.cpu_total = self.mem_total = 0
        # Gauges (milli-GPU): allocated; idle on shared devices; idle on nodes with a GPU in use; idle where cpu/memory ran out.
        self.gpu_alloc = self.frag_device = self.frag_node = self.frag_starved = 0
        self.cpu_alloc = self.mem_alloc = 0
        self._epoch = 0  # bumped when capacity is freed: a cached "fits nowhere" stays true until then
        self._nowhere: dict[tuple, tuple[int, str, str]] = {}
        for i, a in enumerate(allocs):
            state = index.nodes.get(a.name)
            gpus = state.gpus if state is not None and state.spec is not None and state.spec.eligible else 0
            node = self.nodes[a.name] = SimNode(i, a, gpus)
            if not a.schedulable:
                continue
            labels = {k: v for k, v in a.labels.items() if k.startswith(SHAPE_LABELS)}
            shape = (a.cpu, a.memory, gpus, json.dumps(labels, sort_keys=True))
            group = by_shape.get(shape)
            if group is None:
                group = by_shape[shape] = Group(a.cpu, a.memory, gpus, labels)
                self.groups.append(group)
            group.nodes.append(node)
            node.group = group
            self.gpu_total += gpus * FULL
            self.cpu_total += a.cpu
            self.mem_total += a.memory
        self.unschedulable = sum(1 for n in self.nodes.values() if n.group is None)
        for node in self.nodes.values():
            if node.group is not None:
                self._refresh(node)

    # ---- usage ---------------------------------------------------------------------------
    def bind(self, node_name: str, req: PodRequest, key: str | None = None) -> None:
        """Count a pod bound to the node (after the placement index saw the bind)."""
        node = self.nodes.get(node_name)
        if node is None:
            return
        node.cpu_used += req.cpu
        node.mem_used += req.memory
        node.pods += 1
        self.cpu_alloc += req.cpu
        self.mem_alloc += req.memory
        if node.group is not None:
            self._refresh(node)

    def unbind(self, node_name: str, req: PodRequest, key: str | None = None) -> None:
        """Forget a bound pod (after the placement index saw it go)."""
        node = self.nodes.get(node_name)
        if node is None:
            return
        node.cpu_used -= req.cpu
        node.mem_used -= req.memory
        node.pods -= 1
        self.cpu_alloc -= req.cpu
        self.mem_alloc -= req.memory
        self._epoch += 1
        if node.group is not None:
            self._refresh(node)

    def _refresh(self, node: SimNode) -> None:
        """Re-read the node's GPU state from the placement index; move it in its group's order and the gauges."""
        group = node.group
        state = self.index.nodes.get(node.alloc.name)
        partial_free = 0
        free_whole = 0
        best_share = 0
        if node.gpus and state is not None:
            free_whole = state.free_whole()
            for taken, _sharers, _mem in (state.shared or {}).values():
                if taken < FULL:
                    partial_free += FULL - taken
                    if FULL - taken > best_share:
                        best_share = FULL - taken
            used = node.gpus * FULL - free_whole * FULL - partial_free
        else:
            used = 0
        free = node.gpus * FULL - used
        move_gauges(self, node, used, partial_free, group.cap_cpu - node.cpu_used, group.cap_mem - node.mem_used)
        node.gpu_used = used
        if node.gkey is not None:
            lst = group.by_gpu[node.glist]
            lst.remove(node.gkey)
            if not lst:
                del group.by_gpu[node.glist]
            node.gkey = None
        if node.gpus and free > 0:
            node.gkey = (self._gpu_key(group, node, free), node.i, node)
            node.glist = (free_whole, -1) if free_whole else (0, best_share // 100)
            lst = group.by_gpu.get(node.glist)
            if lst is None:
                lst = group.by_gpu[node.glist] = SortedList()
            lst.add(node.gkey)
        if node.ckey is not None:
            group.by_cpu.remove(node.ckey)
        node.ckey = (self._cpu_key(group, node), node.i, node)
        group.by_cpu.add(node.ckey)

    def _gpu_key(self, g: Group, n: SimNode, free: int):
        if self.kind == "default":  # kube-scheduler's default NodeResourcesFit scores cpu and memory only
            return n.cpu_used * g.cap_mem + n.mem_used * g.cap_cpu
        util = n.gpu_used * g.cap_cpu * g.cap_mem + (n.cpu_used * g.cap_mem + n.mem_used * g.cap_cpu) * g.cap_gpu
        if self.kind == "spread":
            return util
        if self.kind == "binpack":
            return -util
        return (free, -util)

    def _cpu_key(self, g: Group, n: SimNode):
        util = n.cpu_used * g.cap_mem + n.mem_used * g.cap_cpu
        return util if self.kind in ("spread", "default") else -util

    # ---- choosing a node -----------------------------------------------------------------
    def _why_not(self, node: SimNode, req: PodRequest, group_ok: bool | None = None) -> str | None:
        """The first filter the node fails for the pod, or None when it fits."""
        if node.group is None:
            return "NodeUnschedulable"
        sel = req.selection
        if group_ok is False or (group_ok is None and not sel.empty and not sel.matches(node.alloc.labels)):
            return "NodeAffinity"
        g = node.group
        if req.demand is not None:
            state = self.index.nodes.get(node.alloc.name) if node.gpus else None
            if state is None or state.capacity(req.demand) < 1:
                return "InsufficientGPU"
        if g.cap_cpu - node.cpu_used < req.cpu:
            return "InsufficientCPU"
        if g.cap_mem - node.mem_used < req.memory:
            return "InsufficientMemory"
        return None

    def _filled(self, node: SimNode, req: PodRequest) -> tuple[int, int]:
        """Σ over scored resources of (used + requested) / allocatable, as an exact (numerator, denominator)."""
        g = node.group
        num, den = 0, 1
        for used, cap in ((node.cpu_used + req.cpu, g.cap_cpu), (node.mem_used + req.memory, g.cap_mem),
                          (node.gpu_used + req.gpu_milli, g.cap_gpu if req.demand is not None and self.kind != "default" else 0)):
            if cap > 0:
                num, den = num * cap + used * den, den * cap
        return num, den

    def _better(self, a: SimNode, b: SimNode, req: PodRequest) -> bool:
        """Whether node `a` scores above node `b` for the pod (ties: the first in name order)."""
        if self.kind == "least-free-gpu" and req.demand is not None:
            left_a, left_b = a.group.cap_gpu - a.gpu_used, b.group.cap_gpu - b.gpu_used
            if left_a != left_b:
                return left_a < left_b
        na, da = self._filled(a, req)
        nb, db = self._filled(b, req)
        x, y = na * db, nb * da
        if x == y:
            return a.i < b.i
        return x < y if self.kind in ("spread", "default") else x > y

    def _group_selects(self, group: Group, sel: NodeSelection) -> bool | None:
        """True/False when the selector only reads labels the whole group shares; None when it must ask each node."""
        if sel.empty:
            return True
        if not all(k.startswith(SHAPE_LABELS) for k in sel.keys):
            return None
        return sel.matches(group.labels)

    def place(self, req: PodRequest) -> tuple[str | None, str | None, str | None]:
        """(node name, None, None), or (None, reason code, kube-scheduler style message) when no node takes the pod."""
        cached = self._nowhere.get(req.signature)
        if cached is not None and cached[0] == self._epoch:
            return None, cached[1], cached[2]
        best = None
        demand = req.demand
        for group in self.groups:
            ok = self._group_selects(group, req.selection)
            if ok is False:
                continue
            orders = self._orders(group, demand)
            if not orders:
                continue
            head = None
            for order in orders:
                for entry in order:
                    if head is not None and entry >= head:
                        break  # this list cannot beat the group's best so far
                    if self._why_not(entry[2], req, ok) is None:
                        head = entry
                        break
            if head is not None and (best is None or self._better(head[2], best, req)):
                best = head[2]
        if best is not None:
            return best.alloc.name, None, None
        code, message = self._explain(req)
        self._nowhere[req.signature] = (self._epoch, code, message)
        return None, code, message

    @staticmethod
    def _orders(group: Group, demand: Demand | None) -> list:
        """The group's sorted lists that may hold a node for `demand` (others are short of GPU by construction)."""
        if demand is None:
            return [group.by_cpu]
        if not group.cap_gpu:
            return []
        if demand.whole:
            k = demand.whole
            return [lst for (h, _b), lst in group.by_gpu.items() if h >= k]
        floor = demand.milli // 100
        return [lst for (h, b), lst in group.by_gpu.items() if h or b >= floor]

    def _explain(self, req: PodRequest) -> tuple[str, str]:
        """Count every node's first failing filter for the message (as kube-scheduler lists them all); the code is
        the commonest among the nodes the pod's selector and affinity allow — what blocks it there (GPU, cpu…),
        not that the many nodes it never asked for do not match — and NodeAffinity only when none is allowed.

        Per group: nodes outside the lists that could hold the pod lack GPU by construction, so only
        the candidates are asked one by one (the same nodes `place` just walked).
        """
        counts: dict[str, int] = {}
        allowed: dict[str, int] = {}  # the same, over the nodes the pod's selector and affinity allow

        def add(why: str, n: int, ok: bool = True) -> None:
            if n:
                counts[why] = counts.get(why, 0) + n
                if ok and why != "NodeAffinity":
                    allowed[why] = allowed.get(why, 0) + n

        sel = req.selection
        off = [n for n in self.nodes.values() if n.group is None]
        matching = sum(1 for n in off if sel.empty or sel.matches(n.alloc.labels))
        add("NodeUnschedulable", matching)
        add("NodeUnschedulable", len(off) - matching, ok=False)  # never the pod's nodes: not what blocks it
        for group in self.groups:
            ok = self._group_selects(group, req.selection)
            if ok is False:
                add("NodeAffinity", len(group.nodes))
                continue
            orders = self._orders(group, req.demand)
            asked: list[SimNode] = []
            for order in orders:
                for _key, _i, node in order:
                    asked.append(node)
                    add(self._why_not(node, req, ok) or "InsufficientGPU", 1)  # a fit here cannot happen: place found none
            short = len(group.nodes) - len(asked)  # the rest are short of GPU by construction
            if ok is None and short:  # the selector reads per-node labels: a node it rejects fails on affinity first
                seen = {n.i for n in asked}
                mismatched = sum(1 for n in group.nodes if n.i not in seen and not sel.matches(n.alloc.labels))
                add("NodeAffinity", mismatched)
                short -= mismatched
            add("InsufficientGPU", short)
        if not counts:  # no nodes at all (`allot simulate` refuses such a cluster): kube-scheduler's words
            return "NoNodes", "0/0 nodes are available: no nodes available to schedule pods"
        order = list(WHY)
        ranked = sorted(((k, n) for k, n in counts.items() if n), key=lambda kv: (-kv[1], order.index(kv[0])))
        blocking = sorted(allowed.items(), key=lambda kv: (-kv[1], order.index(kv[0])))
        detail = ", ".join(f"{n} {WHY[k]}" for k, n in ranked)
        code = blocking[0][0] if blocking else "NodeAffinity" if ranked else "InsufficientGPU"  # no nodes at all: nothing has GPUs
        return code, f"0/{len(self.nodes)} nodes are available: {detail}"
