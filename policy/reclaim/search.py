"""Choosing victims: candidates in the documented order, taken until the request fits and lands, then trimmed to the minimum.

Order (docs/reclaim.md): borrowers from other quotas before anything else, the one furthest
above its fair share first; then lowest priority; then most recently admitted; then fewest
GPUs wasted (freed beyond what is still needed); then by name, so plans are deterministic.
A workload of another quota is a candidate only while that quota stays at or above its nominal
without it (a reclaim never takes what a quota holds within its nominal). The placement
evaluator decides whether the request lands: a what-if takes the victims' pods off their nodes.
"""

from __future__ import annotations

from dataclasses import dataclass
from collections.abc import Callable


@dataclass(frozen=True, slots=True)
class Need:
    """One quota the request must fit once victims are gone (`requested` milli-GPU; 0 for a placement-only reclaim)."""

    qi: int
    requested: int


@dataclass(slots=True)
class Candidate:
    """A unit that may give way, with the facts its order key reads."""

    unit: object
    other: bool  # charged to another quota (a borrower), not to the requesting one
    share: int  # its borrowing quota's weighted share (0 for the requesting quota's own workloads)
    reason: str


def order_key(c: Candidate, need: int) -> tuple:
    """The documented victim order (smaller first)."""
    u = c.unit
    gpus = u.gpus()
    wasted = gpus - need if gpus > need else 0
    return (0 if c.other else 1, -c.share, u.lowest_priority(), _newest_first(u.first_admitted()), wasted, u.key)


def _newest_first(stamp: str) -> tuple:
    # RFC 3339 UTC timestamps order as text; the most recent must sort first, and a pod without one last.
    return (0, tuple(-ord(ch) for ch in stamp)) if stamp else (1, ())


RETRIES = 16  # candidates tried first in turn when taking them in order never lands (a gang needs one domain freed)


def choose(candidates: list[Candidate], *, used: list[int], nominal: list[int], quota_fits: Callable[[list[int]], bool],
           lands: Callable[..., bool] | None, need: int) -> list[Candidate] | None:
    """The victims (in plan order) that make `quota_fits(used')` true and the request land, minimal; None when none do.

    `lands(drop, keep, ask=True)` answers the placement what-if with the pods of `drop` out (it keeps them
    out between calls); `keep` are those to put back first. When taking candidates in order never
    lands (the first ones free GPUs in the wrong domain, and the quota rule stops the rest), each
    of the first `RETRIES` candidates is tried first in turn, the others in order after it.
    """
    ordered = sorted(candidates, key=lambda c: order_key(c, need))
    for start in range(min(len(ordered), RETRIES) if lands is not None else 1):
        trial = ordered if start == 0 else [ordered[start], *ordered[:start], *ordered[start + 1:]]
        chosen = _greedy(trial, used, nominal, quota_fits, lands)
        if chosen is not None:
            return chosen
    return None


def _greedy(ordered, used, nominal, quota_fits, lands) -> list[Candidate] | None:
    after = list(used)
    chosen: list[Candidate] = []
    fits = False
    for c in ordered:
        charges = c.unit.milli
        if c.other and any(after[qi] - m < nominal[qi] for qi, m in charges.items() if qi < len(nominal)):
            continue  # its quota would drop below its nominal: part of it is not borrowed
        chosen.append(c)
        for qi, m in charges.items():
            after[qi] -= m
        if not quota_fits(after):
            if lands is not None:
                lands([c], [], False)  # out, for the answer once the quota fits
            continue
        if lands is None or lands([c], []):
            fits = True
            break
    if not fits:
        if lands is not None:
            lands([], chosen, False)  # everything back for the next attempt
        return None
    # Minimal: drop every victim the request fits and lands without, last chosen first (Kueue does the same).
    for c in reversed(chosen[:-1]):
        trial = list(after)
        for qi, m in c.unit.milli.items():
            trial[qi] += m
        if quota_fits(trial) and (lands is None or lands([], [c])):
            chosen.remove(c)
            after = trial
        elif lands is not None:
            lands([c], [], False)  # it stays a victim: its pods go out again
    return chosen
