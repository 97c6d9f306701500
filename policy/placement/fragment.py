"""GPU fragmentation against a typical task mix, as the FGD paper defines it (Weng et al., USENIX ATC '23).

One piece of code for both users: `allot simulate`'s `fgd` model (policy/simulate/scored.py)
and the webhook's fragmentation steering (policy/placement/steer.py).

The typical mix is the commonest pod shapes of a workload — `(cpu, milli per GPU,
GPUs, where it may run)` — taken in decreasing count until they cover 95 % of its pods,
each weighted by its count. A node's fragmentation is the mix-weighted GPU milli a
pod of the mix could not use there: all of the node's free GPU for a CPU-only pod, a
pod that may not run on the node, or one that does not fit (GPU or cpu short); for a
pod that fits, the free milli of the devices too small for its per-GPU share.

Everything is an integer: weights are counts, so a node's fragmentation is kept as
`Σ count × milli` (the paper's value times the mix's total count). The FGD score of a
placement, `int(100 × sigmoid(Δ / 1000))` with Δ the drop in the node's fragmentation
(milli), is read from integer cut points of that sigmoid, one per score step.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from decimal import Decimal, getcontext
from fractions import Fraction

FULL = 1000
POPULARITY = 95  # percent of the workload's pods the typical mix covers (the artifact's podPopularityThreshold)


@dataclass(frozen=True, slots=True)
class Shape:
    """A pod as fragmentation sees it: cpu millicores, milli per GPU (1000 whole), GPUs, and a key for where it may run."""

    cpu: int
    milli: int  # per GPU: 1000 for whole devices, the share for a shared one, 0 for CPU-only
    gpus: int
    place: object = None  # a hashable key of the pod's node selection (None: any node)

    def order(self) -> tuple:
        """The artifact's tie order among equally common shapes (larger first once reversed)."""
        return (self.cpu, self.milli, self.gpus, "" if self.place is None else repr(self.place))


@dataclass(frozen=True, slots=True)
class Mix:
    """The typical shapes, each with its count; `total` is their sum (the weights' common denominator)."""

    shapes: tuple[Shape, ...]
    counts: tuple[int, ...]
    total: int


def typical_mix(shapes: Iterable[Shape], popularity: int = POPULARITY) -> Mix:
    """The commonest shapes, in decreasing count (ties: larger shape first), until they cover `popularity` % of all."""
    counts: dict[Shape, int] = {}
    n = 0
    for s in shapes:
        counts[s] = counts.get(s, 0) + 1
        n += 1
    ranked = sorted(counts.items(), key=lambda kv: (kv[1], kv[0].order()), reverse=True)
    kept: list[tuple[Shape, int]] = []
    covered = 0
    for shape, c in ranked:
        if covered * 100 >= popularity * n:
            break
        kept.append((shape, c))
        covered += c
    return Mix(tuple(s for s, _ in kept), tuple(c for _, c in kept), covered)


class Fragmentation:
    """Node fragmentation against one mix, memoised by node state; `access` says which mix shapes may run on a node."""

    def __init__(self, mix: Mix):
        self.mix = mix
        cpus = sorted({s.cpu for s in mix.shapes if s.milli})
        self._cpu_steps = cpus  # fragmentation reads cpu only through which of these it reaches
        self._access: dict[tuple[bool, ...], int] = {}
        self._gpu_shapes: list[tuple[tuple[int, int, int, int], ...]] = []  # per access id: (cpu, milli, gpus, count) by cpu
        self._memo: dict[tuple, int] = {}
        self.cuts = score_cuts(mix.total)

    def access_id(self, allowed: Sequence[bool]) -> int:
        """An id for the set of mix shapes that may run on a node (`allowed[i]` for shape i)."""
        key = tuple(allowed)
        got = self._access.get(key)
        if got is None:
            got = self._access[key] = len(self._gpu_shapes)
            rows = [(s.cpu, s.milli, s.gpus, c) for s, c, ok in zip(self.mix.shapes, self.mix.counts, key) if ok and s.milli]
            self._gpu_shapes.append(tuple(sorted(rows)))
        return got

    def forget(self) -> None:
        """Drop the memoised amounts (they are recomputed on demand)."""
        self._memo.clear()

    def amount(self, access: int, cpu_free: int, lefts: tuple[int, ...]) -> int:
        """Σ count × fragmented milli of a node with `cpu_free` millicores and free milli `lefts` per device."""
        reach = bisect_right(self._cpu_steps, cpu_free)
        key = (access, self._cpu_steps[reach - 1] if reach else -1, tuple(sorted(lefts)))
        got = self._memo.get(key)
        if got is None:
            got = self._memo[key] = self._compute(access, cpu_free, lefts)
        return got

    def _compute(self, access: int, cpu_free: int, lefts: tuple[int, ...]) -> int:
        free = sum(lefts)
        # Every shape counts all free GPU as fragment, except a fitting GPU shape, which counts only the devices
        # too small for its share: subtract, for those, count × the free milli of the devices large enough.
        usable = 0
        for cpu, milli, gpus, count in self._gpu_shapes[access]:
            if cpu > cpu_free:
                break  # sorted by cpu: no later shape fits either
            big = [v for v in lefts if v >= milli]
            if len(big) >= gpus:
                usable += count * sum(big)
        return self.mix.total * free - usable

    def score(self, before: int, after: int) -> int:
        """The FGD score (0..100) of a placement that takes a node's fragmentation from `before` to `after`."""
        return bisect_right(self.cuts, before - after)


def score_cuts(total: int) -> list[int]:
    """Integer cut points: the score is how many of them Δ × total reaches (Δ ≥ 1000·ln(k/(100-k)), k = 1..99)."""
    getcontext().prec = 40
    cuts = []
    for k in range(1, 100):
        t = Fraction(Decimal(1000) * (Decimal(k) / Decimal(100 - k)).ln()) * total
        cuts.append(-((-t.numerator) // t.denominator))  # ceil: an integer Δ·total reaches t iff it reaches ceil(t)
    return cuts


def fgd(frag: Fragmentation, access: int, cpu_free: int, lefts: tuple[int, ...], cpu: int, milli: int, gpus: int) -> tuple[int, int]:
    """(score, device for a share or -1): the fragmentation drop's score; a share on the device that scores best (first)."""
    score, _before, _after, dev = placed(frag, access, cpu_free, lefts, cpu, milli, gpus)
    return score, dev


def placed(frag: Fragmentation, access: int, cpu_free: int, lefts: tuple[int, ...], cpu: int, milli: int,
           gpus: int) -> tuple[int, int, int, int]:
    """(score, fragmentation before, after, device for a share or -1) of placing the pod on a node in this state."""
    before = frag.amount(access, cpu_free, lefts)
    after_cpu = cpu_free - cpu
    if gpus == 1 and milli < FULL:
        best, low, dev = -1, before, -1
        for i, v in enumerate(lefts):
            if v >= milli:
                amount = frag.amount(access, after_cpu, lefts[:i] + (v - milli,) + lefts[i + 1:])
                s = frag.score(before, amount)
                if s > best:
                    best, low, dev = s, amount, i
        return best, before, low, dev
    if gpus:
        after = list(lefts)
        need = gpus
        for i in sorted(range(len(lefts)), key=lefts.__getitem__):  # least free first that fits, as the artifact subtracts
            if need and milli <= after[i]:
                after[i] -= milli
                need -= 1
        lefts = tuple(after)
    amount = frag.amount(access, after_cpu, lefts)
    return frag.score(before, amount), before, amount, -1
