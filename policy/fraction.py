"""`fraction` blocks: bounds on shared-GPU slices, a VRAM floor, and sharers per physical GPU.

`per_gpu` needs sharers per physical device. Until the placement index exposes
per-device sharing, `SharerIndex` counts live sharing pods per NODE (incrementally,
from snapshot events) and compares with `per_gpu x GPUs on the node`; every message
says that this is what was counted. A pod not yet bound to a node fits when some node
(of its GPU product, if known) still has a free sharing slot.
"""

from __future__ import annotations

from collections import Counter
from typing import Callable

from lang import ir
from lang.quantity import format_bytes, format_milli
from policy.cluster import is_live
from policy.context import Context, where
from policy.quota import pod_key

HOSTNAME = "kubernetes.io/hostname"


def _gpu_count(node: dict) -> int:
    value = ((node.get("status") or {}).get("allocatable") or {}).get("nvidia.com/gpu")
    try:
        return max(0, int(str(value))) if value is not None else 0
    except ValueError:
        return 0


def bound_node(obj) -> str | None:
    """The node a pod is (or must be) on: `spec.nodeName`, else a hostname node selector."""
    spec = (obj or {}).get("spec") or {}
    return spec.get("nodeName") or (spec.get("nodeSelector") or {}).get(HOSTNAME)


class SharerIndex:
    """Live GPU-sharing pods per node and a histogram of (product, GPUs, sharers) over nodes."""

    def __init__(self, demand: Callable[[dict], object]):
        self.demand = demand  # pod -> PodSet (policy.normalize.pod_demand)
        self.nodes: dict[str, tuple[str | None, int]] = {}  # name -> (product, GPU count)
        self.sharers: Counter = Counter()  # node -> live sharing pods bound to it
        self.pods: dict[str, str] = {}  # pod key -> node, for sharing pods
        self.hist: Counter = Counter()  # (product, gpus, sharers) -> nodes

    def attach(self, snapshot) -> None:
        """Index the snapshot's nodes and pods once, then follow its events."""
        if snapshot is None:
            return
        for node in snapshot.nodes():
            self.on_event("ADDED", None, node)
        for pod in snapshot.pods():
            self.on_event("ADDED", None, pod)
        snapshot.subscribe(self.on_event)

    def _hist(self, node: str, sign: int) -> None:
        if node in self.nodes:
            product, gpus = self.nodes[node]
            key = (product, gpus, self.sharers[node])
            self.hist[key] += sign
            if self.hist[key] <= 0:
                del self.hist[key]

    def on_event(self, event: str, old: dict | None, new: dict | None) -> None:
        """Snapshot callback for Node and Pod changes."""
        obj = new if new is not None else old
        if not isinstance(obj, dict):
            return
        kind = obj.get("kind")
        meta = obj.get("metadata") or {}
        if kind == "Node":
            name = meta.get("name")
            self._hist(name, -1)
            if event == "DELETED" or new is None:
                self.nodes.pop(name, None)
                return
            product = (meta.get("labels") or {}).get("nvidia.com/gpu.product")
            self.nodes[name] = (product, _gpu_count(new))
            self._hist(name, +1)
        elif kind == "Pod":
            key = pod_key(obj)
            previous = self.pods.pop(key, None)
            if previous is not None:
                self._move(previous, -1)
            if event == "DELETED" or new is None:
                return
            if not is_live(new):
                return
            node = (new.get("spec") or {}).get("nodeName")
            if node and self.demand(new).fraction is not None:
                self.pods[key] = node
                self._move(node, +1)

    def _move(self, node: str, delta: int) -> None:
        self._hist(node, -1)
        self.sharers[node] += delta
        self._hist(node, +1)

    def room_somewhere(self, per_gpu: int, product: str | None) -> tuple[bool, int]:
        """(some node has a free sharing slot, GPU nodes considered)."""
        considered = 0
        for (prod, gpus, sharers), count in self.hist.items():
            if gpus <= 0 or (product is not None and prod != product):
                continue
            considered += count
            if sharers + 1 <= per_gpu * gpus:
                return True, considered
        return False, considered


def make_check(f: ir.Fraction, selector, mode: str) -> Callable[[Context], None]:
    """The per-request check of one `fraction` block."""
    block, location = f.id, where(f.span)

    def check(ctx: Context) -> None:
        w = ctx.w
        if w.fraction is None or w.operation not in ("CREATE", "UPDATE"):
            return
        if selector is not None and not selector(w):
            return
        ctx.blocks.append(block)
        share = w.fraction
        data = {"fraction": share, "min": f.min, "max": f.max}
        if f.min is not None and share < f.min:
            ctx.find("FractionOutOfRange", block, location, f"{f.name}: GPU share {format_milli(share)} < min {format_milli(f.min)}", mode, data)
        elif f.max is not None and share > f.max:
            ctx.find("FractionOutOfRange", block, location, f"{f.name}: GPU share {format_milli(share)} > max {format_milli(f.max)}", mode, data)
        else:
            ctx.note(block, location, f"GPU share {format_milli(share)} within bounds")
        if f.memory_floor is not None:
            _check_floor(ctx, f, block, location, mode)
        if f.per_gpu is not None and w.operation == "CREATE":
            _check_sharers(ctx, f, block, location, mode)

    return check


def _check_floor(ctx: Context, f: ir.Fraction, block: str, location: str, mode: str) -> None:
    mem, floor = ctx.w.gpu_memory, f.memory_floor
    data = {"gpu_memory": mem, "floor": floor}
    if mem is None:
        text = f"{f.name}: GPU memory of the slice is unknown (no memory request and no declared GPU model); floor is {format_bytes(floor)}"
        ctx.find("FractionMemoryUnknown", block, location, text, mode, data)
    elif mem < floor:
        ctx.find("FractionMemoryBelowFloor", block, location, f"{f.name}: GPU memory {format_bytes(mem)} < floor {format_bytes(floor)}", mode, data)
    else:
        ctx.note(block, location, f"GPU memory {format_bytes(mem)} >= floor {format_bytes(floor)}")


def _check_sharers(ctx: Context, f: ir.Fraction, block: str, location: str, mode: str) -> None:
    index: SharerIndex = ctx.state.sharers
    per_gpu, node = f.per_gpu, bound_node(ctx.w.obj)
    counted = "counted per node from live pods"
    if node is not None and node in index.nodes:
        gpus, sharers = index.nodes[node][1], index.sharers[node]
        data = {"node": node, "sharers": sharers, "gpus": gpus, "per_gpu": per_gpu}
        text = f"{f.name}: node {node} has {sharers} sharing pods + 1 on {gpus} GPUs"
        if sharers + 1 > per_gpu * gpus:
            ctx.find("FractionSharersExceeded", block, location, f"{text} > {per_gpu} per GPU ({counted})", mode, data)
        else:
            ctx.note(block, location, f"{text} <= {per_gpu} per GPU ({counted})")
        return
    product = ctx.w.gpu_product
    room, considered = index.room_somewhere(per_gpu, product)
    data = {"node": node, "per_gpu": per_gpu, "nodes": considered}
    if considered == 0:
        text = f"{f.name}: per_gpu not evaluated: no GPU node{' of ' + product if product else ''} in the cluster state"
        ctx.find("PerGpuNotEvaluated", block, location, text, "audit" if mode == "audit" else "warn", data)
    elif not room:
        text = f"{f.name}: every one of {considered} GPU nodes already has {per_gpu} sharing pods per GPU ({counted})"
        ctx.find("FractionSharersExceeded", block, location, text, mode, data)
    else:
        ctx.note(block, location, f"some node has fewer than {per_gpu} sharers per GPU ({counted}, {considered} nodes)")
