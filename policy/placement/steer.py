"""Fragmentation steering: the nodes where one small GPU pod fragments the cluster least (FGD's score, on the live mix).

The typical mix is read from the pods the placement index holds bound (`policy.placement.fragment`:
the commonest shapes covering 95 % of them), cached per index and re-read once the index
has moved on by a sixteenth of its pods (at least `REFRESH` changes): the mix drifts slowly,
and recounting every running pod per decision would cost O(pods). Each node that takes the
pod now (GPUs per device, cpu, memory, pod slots, its node selection and model) is scored
as FGD scores it — the drop in that node's fragmentation the placement causes — and the
best `top` are returned, best first. Equal scores are common (the score is a sigmoid cut
into 100 steps): a node with a GPU in use goes before an untouched one (+0.12 to +0.14 points
on openb at 1.3x), then the order of a hash of the node name, fixed but unrelated to the
names, as the artifact breaks them at random — by name or by the finer drop, pods of a tie
pile onto the same few nodes (openb at 1.3x, seed 42: 94.0 % allocated against 95.2 %); in a
fresh random order per decision they scatter (91.9 %). Pure: no I/O, no clock.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from zlib import crc32

from policy.placement.devices import FULL, Demand
from policy.placement.fragment import Fragmentation, Mix, Shape, placed, typical_mix

TOP = 3  # nodes a pod is steered towards
# Steering visits every node (allot bench steer: 10,000 nodes p50 36 ms, p99 128 ms; 256,000 nodes p50 2.3 s).
# Above this many a decision would cost the mutating path seconds: the pod is not steered, and says so.
NODE_LIMIT = 20_000
REFRESH = 64  # index changes before the live mix is read again (more on large clusters: a sixteenth of the pods)


@dataclass(frozen=True, slots=True)
class Choice:
    """One node a pod is steered to: its FGD score (0..100) and its fragmentation before and after (milli-GPU, mix-weighted)."""

    node: str
    score: int
    before: int
    after: int
    weight: int  # the preferred node affinity weight (1..100): 100 for the best, each next one half the one before


@dataclass(frozen=True, slots=True)
class Steer:
    """The answer for one pod: the chosen nodes (best first), how many nodes took it, and the mix it was scored against."""

    choices: tuple[Choice, ...]
    feasible: int
    shapes: int  # shapes in the typical mix
    pods: int  # running pods the mix was read from (0: the pod's own shape stood in)


def shape_of(d: Demand) -> Shape:
    """A demand as fragmentation sees it: (cpu, milli per GPU, GPUs); cpu 0 counts as 100 millicores, as the artifact does."""
    cpu = d.cpu or 100
    if d.whole:
        return Shape(cpu, FULL, d.whole)
    return Shape(cpu, d.milli, 1 if d.milli else 0)


def weights(n: int) -> list[int]:
    """Affinity weights of `n` ranked nodes: 100, 50, 25, … (never below 1)."""
    return [max(1, 100 >> i) for i in range(n)]


class Steering:
    """Scores nodes of one placement index for a pod against the live typical mix (`steer`)."""

    def __init__(self, index):
        self.index = index
        self._frag: Fragmentation | None = None
        self._access = 0
        self._read_at = -1
        self._pods = 0
        self._memo: dict[Shape, dict[tuple, tuple[int, int, int]]] = {}  # pod shape -> (cpu free, free milli per device) -> placed(); per mix
        self._tie: dict[str, int] = {}  # node name -> its place in the tie order

    def clear(self) -> None:
        """Forget the memos (node scores, fragmentation amounts): the next decision scores every node afresh (`allot bench steer`'s baseline)."""
        self._memo.clear()
        if self._frag is not None:
            self._frag.forget()

    def mix(self) -> tuple[Fragmentation | None, int]:
        """(fragmentation over the live mix, running pods it was read from); None while no pod runs."""
        version = self.index.version
        if self._read_at < 0 or version - self._read_at >= max(REFRESH, self._pods // 16):
            demands = [d for _node, d in self.index.bound()]
            self._pods, self._read_at = len(demands), version
            self._frag = None
            self._memo = {}
            if demands:
                self._frag = Fragmentation(typical_mix(shape_of(d) for d in demands))
                self._access = self._frag.access_id([True] * len(self._frag.mix.shapes))
        return self._frag, self._pods

    def steer(self, demand: Demand, top: int = TOP) -> Steer:
        """The `top` nodes where `demand` fragments least now: best score; equal scores in a fixed pseudo-random order of names."""
        frag, pods = self.mix()
        own = shape_of(demand)
        if frag is None:  # an empty cluster: the pod's own shape is the only mix there is
            frag = Fragmentation(Mix((own,), (1,), 1))
            access = frag.access_id([True])
        else:
            access = self._access
        memo = self._memo if frag is self._frag else {}
        mine = memo.get(own)  # per pod shape, so the inner key is plain ints (a Shape hashes field by field)
        if mine is None:
            if len(memo) > 64:
                memo.clear()  # a bound, not an LRU
            mine = memo[own] = {}
        tie = self._tie
        ranked = []
        for name, state in self.index.nodes.items():
            spec = state.spec
            if spec is None or not spec.eligible or (demand.model is not None and spec.model != demand.model):
                continue
            if (state.capacity(demand) if own.gpus else state.limit(1, demand)) < 1:
                continue
            lefts = (FULL,) * state.free_whole() + tuple(max(0, FULL - t) for t, _s, _m in (state.shared or {}).values())
            key = (spec.cpu - state.cpu_used, tuple(sorted(lefts)))
            got = mine.get(key)
            if got is None:
                got = mine[key] = placed(frag, access, key[0], lefts, own.cpu, own.milli, own.gpus)[:3]
                if len(mine) > 1 << 16:
                    mine.clear()
            h = tie.get(name)
            if h is None:
                h = tie[name] = crc32(name.encode())
            score, before, after = got
            # Among equal scores a node already in use before an untouched one (whole nodes stay whole for whole-node pods)
            ranked.append((-score, not state.whole_used and not state.shared, h, name, before, after, score))
        best = heapq.nsmallest(top, ranked)  # the sort's first `top`, without sorting every node
        total = frag.mix.total
        choices = tuple(Choice(name, score, before // total, after // total, w)
                        for (_s, _u, _d, name, before, after, score), w in zip(best, weights(len(best))))
        return Steer(choices, len(ranked), len(frag.mix.shapes), pods)
