"""`gang` blocks: `require min_members`, `require topology T.LEVEL [when …]`, `on unplaceable`.

Placement is a separate component (`policy/placement/`). Until it is wired in,
`place_gang` returns None and a required topology yields the WARNING reason
`PlacementNotEvaluated` ("placement not evaluated") — never a silent allow.
"""

from __future__ import annotations

from typing import Callable

from lang import ir
from policy.context import Context, where


def place_gang(ctx: Context, topology: str, level: str, label: str):
    """SEAM for the placement engineer: ask the evaluator for one domain of `level` holding the gang.

    Return None when placement is not available (the caller warns), else an object with
    `fits: bool`, `reason: str`, and for a fit the `Placement` to record and the
    affinity JSONPatch ops for this member. Not wired yet: always None.
    """
    return None


def make_check(g: ir.Gang, selector, whens: tuple, labels: dict, mode: str) -> Callable[[Context], None]:
    """The per-request check of one gang block; `whens[i]` is the compiled `when` of `g.topology[i]`."""
    block, location = g.id, where(g.span)
    requirements = tuple(zip(g.topology, whens))

    def check(ctx: Context) -> None:
        w = ctx.w
        if w.operation != "CREATE":
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
            text = f"{g.name}: placement not evaluated: topology {chosen.topology}.{chosen.level} is required but the placement evaluator is not wired in yet"
            ctx.find("PlacementNotEvaluated", block, loc, text, "audit" if mode == "audit" else "warn", data)
            return
        if result.fits:
            ctx.note(block, loc, f"gang fits: {result.reason}")
            return
        on = mode if g.on_unplaceable == "deny" else ("audit" if mode == "audit" else "warn")
        ctx.find("GangUnplaceable", block, loc, f"{g.name}: {result.reason}", on, data)

    return check
