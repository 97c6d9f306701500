"""`gang` blocks: `require min_members`, `require topology T.LEVEL [when …]`, `on unplaceable`.

Inside a gang block a Pod member is judged as its gang (`gang_view`): its `pods` is
the gang's minimum members and `total_gpus` is pods × its per-pod GPUs, so a size
rule such as `require topology fabric.rack when total_gpus > 8` fires for every
member of a big gang, not only for its group object. Everywhere else (quota, rules)
a Pod stays one pod.

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

from dataclasses import dataclass, fields, is_dataclass
from typing import Callable

from lang import ir
from policy.context import Context, where
from policy.placement import affinity_patch, gang_key
from policy.placement.member import gang_request
from policy.placement.reservations import RESERVATION_ANNOTATION
from policy.placement.result import GangRequest, PlacementResult
from policy.subject.model import replace_workload


def gang_view(w):
    """The workload as its gang: a Pod member stands for `min_members` pods like it; others are unchanged."""
    if w.kind != "Pod" or not w.min_members or w.min_members <= 1 or w.gang is None:
        return w
    return replace_workload(w, pods=w.min_members, total_gpus=w.min_members * w.gpus)


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
    return planner.recall(gang_key(ctx.w), ctx.now)


def settle(ctx: Context, allowed: bool, hold: bool) -> None:
    """After every block: hold the proposed domain (when `hold`) and pin a Pod member to it, only if `allowed`.

    A denied request keeps its Placement (where it would go, no reservation) for the
    record, but holds nothing and gets no patch.
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
    ctx.placement = result.to_placement(reservation)
    w = ctx.w
    if not ctx.mutate or w.kind != "Pod" or w.obj is None or result.label is None or result.domain is None:
        return
    ctx.patch.extend(affinity_patch(w.obj, result.label, result.domain, ancestors=tuple(result.path[:-1])))
    if reservation:
        ctx.patch.set(("metadata", "annotations", RESERVATION_ANNOTATION), reservation)


def make_check(g: ir.Gang, selector, whens: tuple, labels: dict, mode: str) -> Callable[[Context], None]:
    """The per-request check of one gang block; `whens[i]` is the compiled `when` of `g.topology[i]`.

    `selector`, when given, is the block's `for` tested here on the gang view (the
    pipeline then tests only the rest); the `when`s are always tested on the gang view.
    """
    block, location = g.id, where(g.span)
    requirements = tuple(zip(g.topology, whens))

    def check(ctx: Context) -> None:
        w = ctx.w
        if w.operation != "CREATE" or (w.total_gpus <= 0 and w.kind == "Pod"):
            return
        view = gang_view(w)
        if selector is not None and not selector(view):
            return
        ctx.blocks.append(block)
        if g.require_min_members:
            if w.min_members is None:
                text = f"{g.name}: {w.kind} {w.name or ''} declares no gang minimum (min_members); a gang must say how many members start together"
                ctx.find("GangMinMembersMissing", block, location, text, mode, {"gang": w.gang})
            else:
                ctx.note(block, location, f"gang {w.gang} declares min_members {w.min_members}")
        if requirements:
            known = remembered(ctx)
            if known is not None:  # the gang is placed: this member goes where its gang went (a dict look-up)
                _fit(ctx, known, location, "placed earlier; this member joins it")
                return
        chosen = None
        for req, when in requirements:  # the last matching requirement in source order wins
            if when is None or when(view):
                chosen = req
        if chosen is None:
            return
        label = labels.get((chosen.topology, chosen.level), "")
        _place(ctx, chosen.topology, chosen.level, label, where(chosen.span))

    def _fit(ctx: Context, result: PlacementResult, loc: str, why: str, proposed: Proposed | None = None) -> None:
        if ctx.gang is None:
            ctx.gang = proposed or Proposed(_planner(ctx), gang_key(ctx.w), result)
        ctx.note(block, loc, f"{why}: {result.reason}")

    def _place(ctx: Context, topology: str, level: str, label: str, loc: str) -> None:
        w, planner = ctx.w, _planner(ctx)
        data = {"topology": topology, "level": level, "label": label, "gang": w.gang}
        if planner is None:
            text = f"{g.name}: placement not evaluated: topology {topology}.{level} is required but no placement evaluator is available"
            ctx.find("PlacementNotEvaluated", block, loc, text, "audit" if mode == "audit" else "warn", data)
            return
        key, request = gang_key(w), gang_request(w, topology, level)
        result = planner.propose(key, request, ctx.now)  # holds nothing: `settle` holds once admitted
        on = mode if g.on_unplaceable == "deny" else ("audit" if mode == "audit" else "warn")

        def unfit(ctx: Context, result: PlacementResult) -> None:
            ctx.find("GangUnplaceable", block, loc, f"{g.name}: {result.reason}", on, data)

        if result.fits:
            _fit(ctx, result, loc, "gang fits", Proposed(planner, key, result, request, planner.index.version, unfit))
        else:
            unfit(ctx, result)

    return check


def decide_requirement(policy: ir.PolicySet, w):
    """(gang block, the `require topology` that applies) for workload `w` judged as its gang, else None.

    The first gang block in source order whose `for` selects the gang view and one of
    whose requirements holds decides (within a block the last matching one wins, as
    on admission); for `allot place`, which asks the policy set what level a gang needs.
    """
    from policy.compiler.expr import Levels, compile_condition

    levels = Levels(policy.topologies)
    view = gang_view(w)
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
