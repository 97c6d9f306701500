"""`gang` blocks: `require min_members`, `require topology T.LEVEL [when …]`, `on unplaceable`.

A required topology asks the embedded placement evaluator (`policy/placement/`) for
ONE domain of that level that holds the whole gang now. When it fits, the domain is
reserved (not for dryRun or offline decisions) and, on the mutating side, a Pod
member gets required node affinity to it plus the `allot.dev/reservation`
annotation; every member of the gang gets the same domain. When the evaluator is not
available (`place_gang` returns None) the block reports `PlacementNotEvaluated` as a
warning — never a silent allow.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Callable

from lang import ir
from policy.context import Context, where
from policy.placement import affinity_patch, place_member
from policy.placement.reservations import RESERVATION_ANNOTATION


def place_gang(ctx: Context, topology: str, level: str, label: str):
    """Ask the placement evaluator for one domain of `level` holding the gang (None: evaluator unavailable)."""
    planner = ctx.state.planner() if ctx.state is not None else None
    if planner is None:
        return None
    w = ctx.w
    if not ctx.may_reserve and not w.dry_run:
        w = replace(w, dry_run=True)  # offline decisions hold nothing
    return place_member(planner, w, topology, level, ctx.now)


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
    """The per-request check of one gang block; `whens[i]` is the compiled `when` of `g.topology[i]`."""
    block, location = g.id, where(g.span)
    requirements = tuple(zip(g.topology, whens))

    def check(ctx: Context) -> None:
        w = ctx.w
        if w.operation != "CREATE" or (w.total_gpus <= 0 and w.kind == "Pod"):
            return
        if selector is not None and not selector(w):
            return
        ctx.blocks.append(block)
        if g.require_min_members:
            if w.min_members is None:
                text = f"{g.name}: {w.kind} {w.name or ''} declares no gang minimum (min_members); a gang must say how many members start together"
                ctx.find("GangMinMembersMissing", block, location, text, mode, {"gang": w.gang})
            else:
                ctx.note(block, location, f"gang {w.gang} declares min_members {w.min_members}")
        chosen = None
        for req, when in requirements:  # the last matching requirement in source order wins
            if when is None or when(w):
                chosen = req
        if chosen is None:
            return
        label = labels.get((chosen.topology, chosen.level), "")
        loc = where(chosen.span)
        result = place_gang(ctx, chosen.topology, chosen.level, label)
        data = {"topology": chosen.topology, "level": chosen.level, "label": label, "gang": w.gang}
        if result is None:
            text = f"{g.name}: placement not evaluated: topology {chosen.topology}.{chosen.level} is required but no placement evaluator is available"
            ctx.find("PlacementNotEvaluated", block, loc, text, "audit" if mode == "audit" else "warn", data)
            return
        if result.fits:
            _record_fit(ctx, result)
            ctx.note(block, loc, f"gang fits: {result.reason}")
            return
        on = mode if g.on_unplaceable == "deny" else ("audit" if mode == "audit" else "warn")
        ctx.find("GangUnplaceable", block, loc, f"{g.name}: {result.reason}", on, data)

    return check
