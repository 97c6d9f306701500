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


def tune(arrivals: Sequence[Arrival], gpu_of: Callable[[dict], tuple[int, int]], multiple: Fraction, gpu_total: int,
         seed: int) -> list[Arrival]:
    """The FGD paper simulator's workload tuning: the whole trace in seeded shuffled order, then scaled to `multiple`.

    Pods are sorted by name and shuffled; while their GPU demand is below `multiple` × the
    cluster's GPUs, pods drawn at random (with replacement, from the name-sorted trace) are
    appended as `NAME-tuned-K`, stopping at the first whose per-device milli would pass the
    target (the artifact's check; a multi-GPU pod can still end above it); while above it,
    random pods are removed. `gpu_of(pod)` is (milli per device, milli in all).
    One arrival per simulated second, none departs.
    """
    if not arrivals:
        raise ValueError("the trace has no arrivals to draw from")
    by_name = sorted(arrivals, key=lambda a: str((a.obj.get("metadata") or {}).get("name")))
    shapes = [gpu_of(a.obj) for a in by_name]
    if not any(total for _per, total in shapes):
        raise ValueError("no pod of the trace asks for a GPU: GPU demand would never reach the target")
    rng = random.Random(seed)
    order = list(range(len(by_name)))
    rng.shuffle(order)
    picked: list[tuple[int, int]] = [(i, -1) for i in order]  # (trace index, tuned copy number or -1)
    arrived = sum(shapes[i][1] for i in order)
    target = gpu_total * multiple
    k = 0
    while arrived < target or (k and arrived == target):  # once started, CPU-only draws go on until a GPU pod stops it
        i = rng.randrange(len(by_name))
        if arrived + shapes[i][0] > target:
            break
        picked.append((i, k))
        arrived += shapes[i][1]
        k += 1
    while arrived > target:
        i, _k = picked.pop(rng.randrange(len(picked)))
        arrived -= shapes[i][1]
    out: list[Arrival] = []
    for t, (i, copy) in enumerate(picked):
        a = by_name[i]
        obj = a.obj
        if copy >= 0:
            meta = dict(obj.get("metadata") or {})
            meta["name"] = f"{meta.get('name')}-tuned-{copy}"
            obj = {**obj, "metadata": meta}
        out.append(Arrival(float(t), obj, None, a.user, a.groups, a.where))
    return out


def allocation_at(steps: Sequence[tuple[int, int]], gpu_total: int, upto: int) -> dict[int, float]:
    """The artifact's "allocation ratio at arrived X %", X = 0..upto: the mean allocated share (percent, 2 decimals)
    after the attempts whose arrived demand rounds to X % of the cluster's GPUs (else to X ± 1 %)."""
    by: dict[int, list[Fraction]] = {}
    for arrived, alloc in steps:
        x = round(Fraction(100 * arrived, gpu_total))
        by.setdefault(x, []).append(round(Fraction(100 * alloc, gpu_total), 2))
    out: dict[int, float] = {}
    for x in range(upto + 1):
        vals = by.get(x) or [v for d in (x - 1, x, x + 1) for v in by.get(d, ())]
        if vals:
            out[x] = float(round(sum(vals) / len(vals), 2))
    return out
