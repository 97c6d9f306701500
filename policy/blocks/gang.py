"""`gang` blocks: `require min_members`, `require topology T.LEVEL [when …]`, `on unplaceable`.

Inside a gang block a workload is judged as its gang (`gang_view` of the gang request
`policy/placement/request.py` builds: its pod sets, each set's minimum × its shape, on its
members' model), so a size rule such as `require topology fabric.rack when total_gpus
> 8` fires for every member of a big gang, not only for its group object. Everywhere
else (quota, rules) a Pod stays one pod. `models` restricts the pools and denies a
gang asking another model; a group object of unknown model is not yet placeable where
models differ.

A required topology asks the embedded placement evaluator (`policy/placement/`) for
ONE domain of that level that holds the whole gang now. The check only proposes:
`settle` (called by the engine after every block ran) holds the domain when the
request is admitted (not for dryRun or offline decisions) and, on the mutating
side, gives a Pod member required node affinity to it plus the
`allot.dev/reservation` annotation; a request a later block denies holds nothing
and is not patched. Once a gang is placed (by its group object or its first member), every
later member gets the SAME domain whatever its own conditions say, until the
reservation expires (then it is planned afresh). When the evaluator is not available
(no cluster state, no planner) the block reports `PlacementNotEvaluated` as a warning —
never a silent allow.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, is_dataclass, replace
from typing import Callable

from lang import ir
from policy.cluster.ledger import GangChange
from policy.context import Context, where
from policy.placement.request import gang_view, group_of, member_set, own_shape, request_for
from policy.blocks.gang_holds import domain_key, owned_domain
from policy.blocks.models import asked_model
from policy.placement import affinity_patch, gang_key
from policy.placement.capacity import TAINT_SEP
from policy.placement.query import demand_of
from policy.placement.reservations import RESERVATION_ANNOTATION
from policy.placement.result import GangRequest, PlacementResult
from policy.subject.workloads import object_uid, starts_whole

GANG_VIEW_FIELDS = frozenset({"pods", "total_gpus"})  # what the gang view changes


def _reads_gang_view(e) -> bool:
    if isinstance(e, ir.Field):
        return e.name in GANG_VIEW_FIELDS
    if isinstance(e, tuple):
        return any(_reads_gang_view(x) for x in e)
    if is_dataclass(e) and not isinstance(e, type):
        return any(_reads_gang_view(getattr(e, f.name)) for f in fields(e) if f.name != "span")
    return False


def split_selector(expr: ir.Expr | None) -> tuple[ir.Expr | None, ir.Expr | None]:
    """(conjuncts the pipeline may test on the member itself, conjuncts that read `pods`/`total_gpus`).

    The second part must be tested on the gang view, i.e. by the check (`make_check`'s
    `selector`); the rest is the same in both views and stays inline (and keeps its
    namespace key for rule indexing).
    """
    if expr is None:
        return None, None
    items = expr.items if isinstance(expr, ir.And) else (expr,)
    own = tuple(i for i in items if _reads_gang_view(i))
    rest = tuple(i for i in items if not _reads_gang_view(i))

    def join(parts):
        return None if not parts else parts[0] if len(parts) == 1 else ir.And(parts, expr.span)

    return join(rest), join(own)


def _planner(ctx: Context):
    return ctx.state.planner() if ctx.state is not None else None


@dataclass(frozen=True, slots=True)
class Proposed:
    """A fitting gang domain chosen by the checks; `settle` holds it and pins the member only if admitted."""

    planner: object
    key: str
    result: PlacementResult
    gang: GangRequest | None = None  # the query, when `result` was planned here (None: recalled)
    version: int = -1  # the index version `result` was planned at
    unfit: Callable[[Context, PlacementResult], None] | None = None  # reports a re-plan that no longer fits


def remembered(ctx: Context) -> PlacementResult | None:
    """The domain already chosen for this request's gang (by this request, its group object or an earlier member), else None."""
    if ctx.gang is not None:
        return ctx.gang.result
    planner = _planner(ctx)
    if planner is None or not (ctx.w.gang or ctx.w.name):
        return None
    return planner.recall(domain_key(ctx.w), ctx.now)


def join_owner(ctx: Context) -> bool:
    """Pin a GPU pod of a workload holding a domain to that domain, when no gang block placed it (engine, after every block).

    The workload was admitted with its domain held; its pods go there whatever the gang
    blocks' `for` selects (a block `for kind == "JobSet"` never selects the pods).
    """
    if ctx.gang is not None:
        return False
    owned = owned_domain(_planner(ctx), ctx.w, ctx.now)
    if owned is None:
        return False
    ctx.gang = Proposed(_planner(ctx), owned[0], owned[1])
    return True


def settle(ctx: Context, allowed: bool, hold: bool, taken: list | None = None) -> None:
    """After every block: hold the proposed domain (when `hold`) and pin a Pod member to it, only if `allowed`.

    A denied request keeps its Placement (where it would go, no reservation) for the
    record, but holds nothing and gets no patch. A domain newly held goes to `taken` as
    a `GangChange` (a cluster ledger writes it before the answer).
    """
    proposed = ctx.gang
    if proposed is None:
        return
    result = proposed.result
    if not allowed:
        ctx.placement = result.to_placement(None)
        return
    reservation = None
    if hold:
        planner = proposed.planner
        if proposed.gang is not None and planner.index.version != proposed.version:
            # Another decision changed the index since the check (worker threads): ask again before holding.
            result = planner.propose(proposed.key, proposed.gang, ctx.now)
            if not result.fits:
                ctx.placement = None
                if proposed.unfit is not None:
                    proposed.unfit(ctx, result)
                return
        planner.hold(proposed.key, result, ctx.now)
        reservation = proposed.key
        if ctx.w.template_paths and proposed.gang is not None:  # a workload's own domain: a late event of an older object must not release it
            planner.uids[proposed.key] = object_uid(ctx.w.obj)
        if taken is not None and proposed.gang is not None:  # planned here, not recalled: new to the cluster ledger
            resv = planner.index.reservations.get(proposed.key)
            if resv is not None:
                taken.append(GangChange(proposed.key, result, tuple(resv.slots.items()), resv.next_slot, resv.expires_at,
                                        planner))
    ctx.placement = result.to_placement(reservation)
    w = ctx.w
    if not ctx.mutate or w.kind != "Pod" or w.obj is None or result.label is None or result.domain is None:
        return
    ctx.patch.extend(affinity_patch(w.obj, result.label, result.domain, ancestors=tuple(result.path[:-1])))
    if reservation:
        ctx.patch.set(("metadata", "annotations", RESERVATION_ANNOTATION), reservation)


def gang_request_of(w, snapshot, planner, models: tuple[str, ...] = ()):
    """(the gang a workload stands for at admission, the member's group): its group from the cluster state, its members seen by the planner."""
    group = None
    if w.kind == "Pod" and w.gang is not None and snapshot is not None:
        group = group_of(w, snapshot)
    seen = planner.members.of(gang_key(w), exclude=w.name) if planner is not None else ()
    return request_for(w, group=group, seen=seen, models=models), group


def model_mismatch(planner, result: PlacementResult, w) -> bool:
    """Whether a remembered placement sits on nodes of a GPU model other than this member's."""
    model = w.gpu_model or w.gpu_product
    if model is None or planner is None or not result.nodes:
        return False
    nodes = planner.index.nodes
    for name in result.nodes:
        state = nodes.get(name)
        spec = state.spec if state is not None else None
        if spec is not None and spec.model.split(TAINT_SEP, 1)[0] != model:
            return True
    return False


def _shape_unplanned(result: PlacementResult, group, w) -> bool:
    """A member of a gang of several declared sets whose own shape the remembered plan holds no slot for (it was a guess)."""
    if group is None or len(group.pod_sets) < 2 or not w.pod_sets or not result.demands:
        return False
    own = demand_of(w.pod_sets[0], {})
    return own is not None and all((d.whole, d.milli) != (own.whole, own.milli) for d in result.demands)


def make_check(g: ir.Gang, selector, whens: tuple, labels: dict, mode: str) -> Callable[[Context], None]:
    """The per-request check of one gang block; `whens[i]` is the compiled `when` of `g.topology[i]`.

    `selector`, when given, is the block's `for` tested here on the gang view (the
    pipeline then tests only the rest); the `when`s are always tested on the gang view,
    which is the size of the gang request (`policy/placement/request.py`) the placement is asked for.
    """
    block, location = g.id, where(g.span)
    requirements = tuple(zip(g.topology, whens))
    allowed_models = frozenset(g.models)

    def check(ctx: Context) -> None:
        w = ctx.w
        if w.template_paths:  # a workload object: a gang only for gang kinds, when it starts whole (create, resume)
            if w.gang is None or not starts_whole(w):
                return
        elif w.operation != "CREATE" or (w.total_gpus <= 0 and w.kind == "Pod"):
            return
        planner = _planner(ctx)
        request, group = gang_request_of(w, ctx.snapshot, planner, g.models)
        view = gang_view(w, request)
        if selector is not None and not selector(view):
            return
        ctx.blocks.append(block)
        if planner is not None and w.kind == "Pod":
            planner.members.note(gang_key(w), w.name, member_set(w), own_shape(w))
        if allowed_models and not _models_ok(ctx, w):
            return
        if g.require_min_members:
            if w.min_members is None:
                text = f"{g.name}: {w.kind} {w.name or ''} declares no gang minimum (min_members); a gang must say how many members start together"
                ctx.find("GangMinMembersMissing", block, location, text, mode, {"gang": w.gang})
            else:
                ctx.note(block, location, f"gang {w.gang} declares min_members {w.min_members}")
        fresh = False
        if requirements and view.total_gpus <= 0:  # a GPU-less gang passes topology (docs/semantics.md)
            ctx.note(block, location, "the gang asks for no GPUs: no topology to require")
            return
        if requirements and ctx.gang is None:
            owned = owned_domain(planner, w, ctx.now)
            if owned is not None:  # a pod of a workload holding its domain, a child of its controller: it goes there
                _fit(ctx, owned[1], location, f"its workload {owned[0][3:]} holds this domain; it joins it", key=owned[0])
                return
        if requirements:
            known = remembered(ctx)
            if known is not None and w.kind == "Pod" and (model_mismatch(planner, known, w) or _shape_unplanned(known, group, w)):
                ctx.note(block, location, f"the gang was planned before its members' model and shape were known ({known.reason}); planned again")
                if not w.dry_run and ctx.may_reserve and planner is not None:
                    planner.forget(gang_key(w))  # its hold was for the wrong GPUs
                fresh = True
            elif known is not None:  # the gang is placed: this member goes where its gang went (a dict look-up)
                _fit(ctx, known, location, "placed earlier; this member joins it")
                return
        chosen = None
        for req, when in requirements:  # the last matching requirement in source order wins
            if when is None or when(view):
                chosen = req
        if chosen is None:
            return
        label = labels.get((chosen.topology, chosen.level), "")
        _place(ctx, request, chosen.topology, chosen.level, label, where(chosen.span), fresh)

    def _models_ok(ctx: Context, w) -> bool:
        model = asked_model(w)  # a group object's is its sets' one product, as normalization reads it
        if model is None or model in allowed_models:
            return True
        text = f"{g.name}: the gang asks for {model} GPUs, but may use only {', '.join(g.models)}"
        ctx.find("GangModelNotAllowed", block, location, text, mode, {"gang": w.gang, "asked": model, "models": list(g.models)})
        return False

    def _fit(ctx: Context, result: PlacementResult, loc: str, why: str, proposed: Proposed | None = None, key: str | None = None) -> None:
        if ctx.gang is None:
            ctx.gang = proposed or Proposed(_planner(ctx), key or domain_key(ctx.w), result)
        ctx.note(block, loc, f"{why}: {result.reason}")

    def _place(ctx: Context, request: GangRequest, topology: str, level: str, label: str, loc: str, fresh: bool) -> None:
        w, planner = ctx.w, _planner(ctx)
        data = {"topology": topology, "level": level, "label": label, "gang": w.gang}
        if planner is None:
            text = f"{g.name}: placement not evaluated: topology {topology}.{level} is required but no placement evaluator is available"
            ctx.find("PlacementNotEvaluated", block, loc, text, "audit" if mode == "audit" else "warn", data)
            return
        key, request = domain_key(w), replace(request, topology=topology, required=level)
        # holds nothing: `settle` holds once admitted
        result = planner.index.query(request) if fresh else planner.propose(key, request, ctx.now)
        on = mode if g.on_unplaceable == "deny" else ("audit" if mode == "audit" else "warn")

        def unfit(ctx: Context, result: PlacementResult) -> None:
            code = "GangNotYetPlaceable" if result.reasons and result.reasons[0].code == "ModelUnknown" else "GangUnplaceable"
            if code == "GangUnplaceable" and on == "enforce" and ctx.unplaced is None:
                ctx.unplaced = (request, len(ctx.reasons))  # a reclaim plan may free the domain (policy/reclaim/settle.py)
            ctx.find(code, block, loc, f"{g.name}: {result.reason}", on, data)

        if result.fits:
            _fit(ctx, result, loc, "gang fits", Proposed(planner, key, result, request, planner.index.version, unfit))
        else:
            unfit(ctx, result)

    return check


def decide_requirement(policy: ir.PolicySet, w, gang: GangRequest | None = None):
    """(gang block, the `require topology` that applies) for workload `w` judged as its gang, else None.

    The first gang block in source order whose `for` selects the gang view and one of
    whose requirements holds decides (within a block the last matching one wins, as
    on admission); for `allot place`, which asks the policy set what level a gang needs.
    """
    from policy.compiler.expr import Levels, compile_condition

    levels = Levels(policy.topologies)
    view = gang_view(w, gang)
    for g in policy.gangs:
        selector = compile_condition(g.selector, levels)
        if selector is not None and not selector(view):
            continue
        chosen = None
        for req in g.topology:
            when = compile_condition(req.when, levels)
            if when is None or when(view):
                chosen = req
        if chosen is not None:
            return g, chosen
    return None
