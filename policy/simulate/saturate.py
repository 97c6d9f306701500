"""Saturation traces: arrivals without departures, drawn from a trace in seeded shuffled order.

The capacity-planning experiment of the openb studies: pods are drawn from the trace
in an order shuffled with `seed` (each once, then with replacement once the trace is
used up) until the GPU demand that arrived reaches `multiple` × the cluster's GPUs.
One arrival per simulated second, none departs.
"""

from __future__ import annotations

import random
from fractions import Fraction
from typing import Callable, Sequence

from policy.simulate.trace import Arrival


def parse_multiple(text: str) -> Fraction:
    """`1.3` -> Fraction(13, 10); ValueError unless a positive finite decimal."""
    try:
        value = Fraction(str(text).strip())
    except (ValueError, ZeroDivisionError):
        raise ValueError(f"{text!r} is not a number (expected a multiple of the cluster's GPUs, like 1.3)") from None
    if value <= 0 or value > 100:
        raise ValueError(f"{text!r} is out of range (expected 0 < multiple <= 100)")
    return value


def target_milli(gpu_total: int, multiple: Fraction) -> int:
    """The arrived milli-GPU the run stops at (rounded up)."""
    q = gpu_total * multiple
    return -(-q.numerator // q.denominator)


def saturate(arrivals: Sequence[Arrival], gpu_of: Callable[[dict], int], target: int, seed: int) -> list[Arrival]:
    """Arrivals (at 0, 1, 2, … seconds, no duration) whose GPU demand first reaches `target` milli-GPU."""
    if not arrivals:
        raise ValueError("the trace has no arrivals to draw from")
    gpus = [gpu_of(a.obj) for a in arrivals]
    if not any(gpus):
        raise ValueError("no pod of the trace asks for a GPU: GPU demand would never reach the target")
    rng = random.Random(seed)
    order = list(range(len(arrivals)))
    rng.shuffle(order)
    out: list[Arrival] = []
    arrived = 0
    draw = 0
    while arrived < target:
        if draw < len(order):
            i = order[draw]
            obj = arrivals[i].obj
        else:
            i = rng.randrange(len(arrivals))
            base = arrivals[i].obj
            meta = dict(base.get("metadata") or {})
            meta["name"] = f"{meta.get('name')}-r{draw}"  # drawn again: a new pod of the same shape
            obj = {**base, "metadata": meta}
        a = arrivals[i]
        out.append(Arrival(float(draw), obj, None, a.user, a.groups, a.where))
        arrived += gpus[i]
        draw += 1
    return out
