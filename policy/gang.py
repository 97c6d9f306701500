"""`gang` blocks: `require min_members`, `require topology T.LEVEL [when …]`, `on unplaceable`.

Inside a gang block a Pod member is judged as its gang (`gang_view`): its `pods` is
the gang's minimum members and `total_gpus` is pods × its per-pod GPUs, so a size
rule such as `require topology fabric.rack when total_gpus > 8` fires for every
member of a big gang, not only for its group object. Everywhere else (quota, rules)
a Pod stays one pod.

A required topology asks the embedded placement evaluator (`policy/placement/`) for
ONE domain of that level that holds the whole gang now. When it fits, the domain is
reserved (not for dryRun or offline decisions) and, on the mutating side, a Pod
member gets required node affinity to it plus the `allot.dev/reservation`
annotation. Once a gang is placed (by its group object or its first member), every
later member gets the SAME domain whatever its own conditions say, until the
reservation expires (then it is planned afresh). When the evaluator is not available
(`place_gang` returns None) the block reports `PlacementNotEvaluated` as a warning —
never a silent allow.
"""

from __future__ import annotations

from dataclasses import fields, is_dataclass, replace
from typing import Callable

from lang import ir
from policy.context import Context, where
from policy.placement import affinity_patch, gang_key, place_member
from policy.placement.reservations import RESERVATION_ANNOTATION
from policy.subject import replace_workload


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


def place_gang(ctx: Context, topology: str, level: str, label: str):
    """Ask the placement evaluator for one domain of `level` holding the gang (None: evaluator unavailable)."""
    planner = _planner(ctx)
    if planner is None:
        return None
    w = ctx.w
    if not ctx.may_reserve and not w.dry_run:
        w = replace(w, dry_run=True)  # offline decisions hold nothing
    return place_member(planner, w, topology, level, ctx.now)


def remembered(ctx: Context):
    """The domain already chosen for this request's gang (by its group object or an earlier member), else None."""
    planner = _planner(ctx)
    if planner is None or not (ctx.w.gang or ctx.w.name):
        return None
    return planner.recall(gang_key(ctx.w), ctx.now)


def _record_fit(ctx: Context, m) -> None:
    """Keep the Placement; on the mutating side pin a Pod member to the domain."""
    ctx.placement = m.placement
    w, result = ctx.w, m.result
    if not ctx.mutate or w.kind != "Pod" or w.obj is None or result.label is None or result.domain is None:
        return
    ctx.patch.extend(affinity_patch(w.obj, result.label, result.domain, ancestors=tuple(result.path[:-1])))
    if m.placement is not None and m.placement.reservation:
        ctx.patch.set(("metadata", "annotations", RESERVATION_ANNOTATION), m.placement.reservation)


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
            if known is not None:  # the gang is placed: this member goes where its gang went
                _place(ctx, known.topology or "", known.level or "", known.label or "", location, pinned=True)
                return
        chosen = None
        for req, when in requirements:  # the last matching requirement in source order wins
            if when is None or when(view):
                chosen = req
        if chosen is None:
            return
        label = labels.get((chosen.topology, chosen.level), "")
        _place(ctx, chosen.topology, chosen.level, label, where(chosen.span))

    def _place(ctx: Context, topology: str, level: str, label: str, loc: str, pinned: bool = False) -> None:
        w = ctx.w
        result = place_gang(ctx, topology, level, label)
        data = {"topology": topology, "level": level, "label": label, "gang": w.gang}
        if result is None:
            text = f"{g.name}: placement not evaluated: topology {topology}.{level} is required but no placement evaluator is available"
            ctx.find("PlacementNotEvaluated", block, loc, text, "audit" if mode == "audit" else "warn", data)
            return
        if result.fits:
            _record_fit(ctx, result)
            why = "placed earlier; this member joins it" if pinned else "gang fits"
            ctx.note(block, loc, f"{why}: {result.reason}")
            return
        on = mode if g.on_unplaceable == "deny" else ("audit" if mode == "audit" else "warn")
        ctx.find("GangUnplaceable", block, loc, f"{g.name}: {result.reason}", on, data)

    return check


def decide_requirement(policy: ir.PolicySet, w):
    """(gang block, the `require topology` that applies) for workload `w` judged as its gang, else None.

    The first gang block in source order whose `for` selects the gang view and one of
    whose requirements holds decides (within a block the last matching one wins, as
    on admission); for `allot place`, which asks the policy set what level a gang needs.
    """
    from policy.expr import Levels, compile_condition

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
