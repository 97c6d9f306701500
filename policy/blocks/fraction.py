"""`fraction` blocks: bounds on shared-GPU slices, a VRAM floor, and sharers per physical GPU.

`per_gpu` is checked on the placement index's per-device model (`policy/placement/
devices.py`): each node's shared devices with the milli taken, memory taken and
sharers of the live pods bound there (packed best-fit, as the index models them).
A pod bound to a node (`spec.nodeName` or a hostname node selector) is denied when
the node has no untouched GPU and every shared one already has `per_gpu` sharers.
An unbound pod is denied when no GPU of the cluster can take it within the limit
although one could without it; a cluster with no room at all is the scheduler's
business (noted in the trace).
"""

from __future__ import annotations

from typing import Callable

from lang import ir
from lang.quantity import format_bytes_short, format_milli
from policy.context import Context, where
from policy.placement import GangRequest
from policy.placement.index import FLAT
from policy.placement.query import demand_of
from policy.subject.model import PodSet

HOSTNAME = "kubernetes.io/hostname"


def bound_node(obj) -> str | None:
    """The node a pod is (or must be) on: `spec.nodeName`, else a hostname node selector."""
    spec = (obj or {}).get("spec") or {}
    return spec.get("nodeName") or (spec.get("nodeSelector") or {}).get(HOSTNAME)


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
        if w.template_paths:  # a workload object: every template that shares a GPU is bounded, by name
            _check_sets(ctx, f, block, location, mode)
            if f.memory_floor is not None:
                _check_floor(ctx, f, block, location, mode)
            return  # per_gpu sharers are judged on the pods (where they are bound), not on the template
        share = w.fraction
        data = {"fraction": share, "min": f.min, "max": f.max}
        if f.min is not None and share < f.min:
            ctx.find("FractionOutOfRange", block, location, f"{f.name}: GPU share {format_milli(share)} < min {format_milli(f.min)}", mode, data)
        elif f.max is not None and share > f.max:
            ctx.find("FractionOutOfRange", block, location, f"{f.name}: GPU share {format_milli(share)} > max {format_milli(f.max)}", mode, data)
        elif ctx.trace is not None:  # notes are for --explain only: do not format them otherwise
            ctx.note(block, location, f"GPU share {format_milli(share)} within bounds")
        if f.memory_floor is not None:
            _check_floor(ctx, f, block, location, mode)
        if f.per_gpu is not None and w.operation == "CREATE":
            _check_sharers(ctx, f, block, location, mode)

    return check


def _check_sets(ctx: Context, f: ir.Fraction, block: str, location: str, mode: str) -> None:
    """Bounds on each pod set of a workload object that shares a GPU."""
    w = ctx.w
    for ps in w.pod_sets:
        share = ps.fraction
        if share is None or not ps.count:
            continue
        data = {"fraction": share, "min": f.min, "max": f.max, "pod_set": ps.name}
        what = f"{f.name}: pod set {ps.name} of {w.kind} {w.name or ''} ({ps.count} pods)"
        if f.min is not None and share < f.min:
            ctx.find("FractionOutOfRange", block, location, f"{what}: GPU share {format_milli(share)} < min {format_milli(f.min)}", mode, data)
        elif f.max is not None and share > f.max:
            ctx.find("FractionOutOfRange", block, location, f"{what}: GPU share {format_milli(share)} > max {format_milli(f.max)}", mode, data)
        elif ctx.trace is not None:
            ctx.note(block, location, f"pod set {ps.name}: GPU share {format_milli(share)} within bounds")


def _check_floor(ctx: Context, f: ir.Fraction, block: str, location: str, mode: str) -> None:
    mem, floor = ctx.w.gpu_memory, f.memory_floor
    data = {"gpu_memory": mem, "floor": floor}
    if mem is None:
        text = f"{f.name}: GPU memory of the slice is unknown (no memory request and no declared GPU model); floor is {format_bytes_short(floor)}"
        ctx.find("FractionMemoryUnknown", block, location, text, mode, data)
    elif mem < floor:
        ctx.find("FractionMemoryBelowFloor", block, location, f"{f.name}: GPU memory {format_bytes_short(mem)} < floor {format_bytes_short(floor)}", mode, data)
    elif ctx.trace is not None:
        ctx.note(block, location, f"GPU memory {format_bytes_short(mem)} >= floor {format_bytes_short(floor)}")


def _check_sharers(ctx: Context, f: ir.Fraction, block: str, location: str, mode: str) -> None:
    w, per_gpu = ctx.w, f.per_gpu
    planner = ctx.state.planner() if ctx.state is not None else None
    index = planner.index if planner is not None else None
    if index is None or not index.nodes:
        text = f"{f.name}: per_gpu not evaluated: no GPU node in the cluster state"
        ctx.find("PerGpuNotEvaluated", block, location, text, "audit" if mode == "audit" else "warn", {"per_gpu": per_gpu})
        return
    pod_set = PodSet(w.name or "pod", 1, w.gpus, w.fraction, w.gpu_memory, w.gpu_product)
    node = bound_node(w.obj)
    if node is not None and node in index.nodes:
        sharers, untouched = list(index.sharers(node)), index.free_gpus(node)
        data = {"node": node, "sharers": sharers, "untouched_gpus": untouched, "per_gpu": per_gpu}
        if untouched == 0 and all(n >= per_gpu for n in sharers):
            text = (
                f"{f.name}: node {node} has {sum(sharers)} sharing pods + 1 on {len(sharers)} GPUs > {per_gpu} per GPU"
                f" (sharers per GPU: {sharers}; no untouched GPU)"
            )
            ctx.find("FractionSharersExceeded", block, location, text, mode, data)
        elif ctx.trace is not None:
            room = index.capacity(node, demand_of(pod_set, index.gpu_models), per_gpu)
            ctx.note(block, location, f"node {node}: {untouched} untouched GPUs, sharers per shared GPU {sharers}; room for this share: {room}")
        return
    explain = ctx.trace is not None
    fits, reason = _ask(index, GangRequest((pod_set,), topology=FLAT, per_gpu=per_gpu), explain)
    if fits:
        if explain:
            ctx.note(block, location, f"a GPU with fewer than {per_gpu} sharers can take a {format_milli(w.fraction)} share: {reason}")
        return
    fits, reason = _ask(index, GangRequest((pod_set,), topology=FLAT), explain)
    if fits:
        share = format_milli(w.fraction)
        text = f"{f.name}: every GPU that could take a {share} share already has {per_gpu} sharing pods; per_gpu at most {per_gpu}"
        ctx.find("FractionSharersExceeded", block, location, text, mode, {"node": None, "per_gpu": per_gpu})
    elif explain:
        ctx.note(block, location, f"no GPU can take a {format_milli(w.fraction)} share at all (the scheduler will wait): {reason}")


def _ask(index, gang: GangRequest, explain: bool) -> tuple[bool, str]:
    """(fits, reason); without --explain only yes/no is needed, which `fits` answers without building a placement."""
    if not explain:
        return index.fits(gang), ""
    result = index.query(gang)
    return result.fits, result.reason
