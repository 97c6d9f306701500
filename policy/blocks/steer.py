"""`steer` blocks: preferred node affinity for GPU pods towards the nodes they fragment least (docs/placement.md).

On the mutating side, a Pod CREATE (a GPU share, whole GPUs of any count, or no GPU),
not a gang member and not a pod of a workload holding a gang domain, is scored on every
node that takes it now (policy/placement/steer.py: FGD's fragmentation drop, on the
cluster's live mix); the best `nodes` get `preferredDuringSchedulingIgnoredDuringExecution`
terms, weights 100, 50, 25, …, after any the pod already has. Never a required term: the
scheduler may still go elsewhere. The first steer block whose `for` matches steers; the
finding `PlacementSteered` (audit: it never denies) names the nodes, weights and scores.
`mode audit` records where the pod would be steered (`SteerWouldPrefer`) and patches nothing;
`mode warn` patches and adds an admission warning.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from lang import ir
from policy.blocks.gang_holds import owned_domain
from policy.context import Context, where
from policy.placement.affinity import preferred_patch
from policy.placement.devices import Demand
from policy.placement.query import demand_of
from policy.placement.request import request_for
from policy.placement.steer import NODE_LIMIT

GUARD = "w.kind == 'Pod' and w.operation == 'CREATE' and w.gang is None and not w.template_paths"


def make_check(steers: Sequence[tuple[ir.Steer, Callable | None, str]]) -> Callable[[Context], None]:
    """One check for every steer block, in source order: the first whose `for` matches steers the pod."""
    located = [(s, sel, mode, s.id, where(s.span)) for s, sel, mode in steers]

    def check(ctx: Context) -> None:
        w = ctx.w
        # Any size: left to LeastAllocated, an 8-GPU pod takes the node with the most cpu free, the one a later cpu-heavy
        # 8-GPU pod needed (openb at 1.3x: +0.09 points over steering only pods of up to 4 GPUs, docs/history/placement.md).
        if not (ctx.mutate or ctx.trace is not None) or w.pods > 1:
            return
        spec = w.obj.get("spec") if isinstance(w.obj, dict) else None
        if not isinstance(spec, dict) or spec.get("nodeName"):
            return  # bound already (a static or pre-scheduled pod): nothing to steer
        chosen = next(((s, mode, block, loc) for s, sel, mode, block, loc in located if sel is None or sel(w)), None)
        if chosen is None:
            return
        s, mode, block, loc = chosen
        ctx.blocks.append(block)
        planner = ctx.state.planner() if ctx.state is not None else None
        if planner is None:
            ctx.note(block, loc, "no cluster state to score nodes on: not steered")
            return
        if len(planner.index.nodes) > NODE_LIMIT:
            ctx.note(block, loc, f"the cluster has {len(planner.index.nodes):,} nodes; steering visits every node and is "
                                 f"capped at {NODE_LIMIT:,} (docs/placement.md, known limits): not steered")
            return
        if owned_domain(planner, w, ctx.now) is not None:
            ctx.note(block, loc, "the pod's workload holds a gang domain: it goes there, not steered")
            return
        sets = request_for(w).pod_sets
        if not sets:
            return
        demand = demand_of(sets[0], planner.index.gpu_models)
        if demand is None:  # a CPU-only pod: steered off the nodes where its cpu would strand GPUs
            needs = sets[0].needs
            demand = Demand(cpu=needs.cpu, ram=needs.memory, node_filter=needs.node_filter) if needs is not None else Demand()
        got = ctx.state.steering().steer(demand, s.nodes)
        if not got.choices:
            ctx.note(block, loc, "no node takes the pod now: nothing to steer towards")
            return
        parts = ", ".join(f"{c.node} (weight {c.weight}, FGD score {c.score}: fragmentation {c.before} -> {c.after} milli-GPU)"
                          for c in got.choices)
        mix = f"{got.shapes} shape(s) from {got.pods} running pod(s)" if got.pods else "the pod's own shape (no pod runs yet)"
        data = {"nodes": [c.node for c in got.choices], "weights": [c.weight for c in got.choices],
                "scores": [c.score for c in got.choices], "before": [c.before for c in got.choices],
                "after": [c.after for c in got.choices], "feasible": got.feasible, "mix_shapes": got.shapes, "mix_pods": got.pods}
        if mode == "audit":
            ctx.find("SteerWouldPrefer", block, loc, f"{s.name}: would prefer {parts}; {got.feasible} node(s) take the pod; live mix: {mix}",
                     "audit", data)
            return
        message = f"{s.name}: preferred node affinity to {parts}; {got.feasible} node(s) take the pod; live mix: {mix}"
        ctx.find("PlacementSteered", block, loc, message, "audit", data)
        if mode == "warn":
            ctx.find("PlacementSteered", block, loc, f"{s.name}: steered to {', '.join(data['nodes'])}", "warn", data)
        if ctx.mutate and w.obj is not None:
            ctx.patch.extend(preferred_patch(w.obj, [(c.node, c.weight) for c in got.choices]))

    return check
