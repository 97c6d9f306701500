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
import heapq
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
    """The documented victim order (smaller first); the admission time is the timestamp's digits, negated (newest first)."""
    priority, newest, gpus = c.unit.facts()
    wasted = gpus - need if gpus > need else 0
    return (0 if c.other else 1, -c.share, priority, newest, wasted, c.unit.key)


RETRIES = 16  # domains (or, without domains, candidates taken first) tried in turn


def choose(candidates: list[Candidate], *, used: list[int], nominal: list[int], quota_fits: Callable[[list[int]], bool],
           lands: Callable[..., bool] | None, need: int, domains: Callable[[Candidate], frozenset] | None = None) -> list[Candidate] | None:
    """The victims (in plan order) that make `quota_fits(used')` true and the request land, minimal; None when none do.

    `lands(drop, keep, ask=True)` answers the placement what-if with the pods of `drop` out (it
    keeps them out between calls); `keep` are those to put back first. When the request must land
    in one domain (`domains(c)`: the domains a candidate's pods free GPUs in — its nodes for a single
    pod, the required level's values for a gang), victims are sought domain by domain, in the order
    of each domain's most preferred candidate, then its name (at most `RETRIES` domains), so GPUs freed elsewhere
    never count. Otherwise candidates are taken in order; when that never lands, each of the first
    `RETRIES` is tried first in turn.
    """
    keyed = [(order_key(c, need), c) for c in candidates]
    if lands is not None and domains is not None:
        by_domain: dict = {}
        for item in keyed:
            for d in domains(item[1]):
                by_domain.setdefault(d, []).append(item)
        # the domains of the most preferred candidates first, without sorting every candidate
        best = heapq.nsmallest(RETRIES, by_domain.items(), key=lambda kv: (min(k for k, _c in kv[1]), kv[0]))  # ties: by name
        for _d, items in best:
            items.sort(key=lambda item: item[0])
            chosen = _greedy([c for _k, c in items], used, nominal, quota_fits, lands)
            if chosen is not None:
                return chosen
        return None
    keyed.sort(key=lambda item: item[0])
    ordered = [c for _k, c in keyed]
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
