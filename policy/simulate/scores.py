"""The node scores of the FGD paper's simulator (`hkust-adsl/kubernetes-scheduler-simulator`), in integers.

Each score is what that simulator's plugin computes for a pod on a node that passed
the filters (0..100, higher is better), with its floating-point formulas rewritten as
exact integer arithmetic (truncated toward zero, as Go's `int64(x)` does):

- `best-fit`: 100 × (1 − ½·cpu left over / 128 cores − ½·GPU left over / 8 GPUs), left
  over = free − requested: the node the pod leaves least of, cpu and GPU alike.
- `packing`: a shared device already in use (100 − its free tenths / 10, at least 50), then
  untouched devices on a used node (50 − devices, at least 33), then an empty node (33 − GPUs).
- `dot-product` (Tetris): 100 × (1 − free·request), both normalised by 128 cores and 8 GPUs, halved.
- `clustering`: nodes already running pods of the same kind (shared, or k whole GPUs) first,
  then empty nodes, then mixed ones; within each, the fuller node.
- `fgd`: `int(100·sigmoid(Δ/1000))`, Δ the drop of the node's fragmentation the placement
  causes (`policy.placement.fragment`, shared with the webhook's steering); for a share, on its best device.
- `random` scores nothing: one feasible node at random.

A node is `(cpu_free, lefts)`: free millicores and free milli per device in device order.
A pod is `(cpu, milli, gpus)`: millicores (0 counts as 100, as the artifact's resource
reader does), milli per device, devices.
"""

from __future__ import annotations

from collections.abc import Mapping

from policy.placement.fragment import fgd  # noqa: F401  (the placement's own FGD score: one piece of code for both)

FULL = 1000
MAX_CPU, MAX_GPU = 128000, 8000  # the artifact's normalising node (128 cores, 8 GPUs)
ARTIFACT = ("random", "best-fit", "packing", "dot-product", "clustering", "fgd")


def _trunc(num: int, den: int) -> int:
    """num / den truncated toward zero (den > 0)."""
    return num // den if num >= 0 else -((-num) // den)


def best_fit(cpu_free: int, lefts: tuple[int, ...], cpu: int, milli: int, gpus: int) -> int:
    """(256000 − cpu left over − 16 × GPU left over) / 2560, truncated."""
    return _trunc(2 * MAX_CPU - (cpu_free - cpu) - 16 * (sum(lefts) - milli * gpus), 2 * MAX_CPU // 100)


def dot_product(cpu_free: int, lefts: tuple[int, ...], cpu: int, milli: int, gpus: int) -> int:
    """100 × (1 − (cpu_free·cpu / 128000² + gpu_free·gpu / 8000²) / 2), truncated; 0 when cpu falls short."""
    if cpu_free < cpu:
        return 0
    q = MAX_CPU * MAX_CPU
    dot = cpu_free * cpu + (MAX_CPU // MAX_GPU) ** 2 * sum(lefts) * milli * gpus
    return _trunc(100 * q - 50 * dot, q)


def packing(lefts: tuple[int, ...], milli: int, gpus: int) -> int:
    """The artifact's GPU packing tiers (CPU-only pods score 0 everywhere)."""
    if not milli:
        return 0
    n = len(lefts)
    untouched = sum(1 for v in lefts if v == FULL)
    if untouched == n:
        return max(33 - untouched, untouched)
    need, whole_used, used = gpus, 0, []
    for v in sorted(lefts):  # least free first (stable; equal values are interchangeable)
        if not need:
            break
        if milli <= v:
            need -= 1
            used.append(v)
            whole_used += v == FULL
    if need:
        return 0  # filtered out before scoring; the artifact errors here
    if whole_used:
        return max(50 - whole_used, 33)
    return max(100 - sum(v * 100 // FULL for v in used) // 10, 50)


def kind_of(milli: int, gpus: int) -> str | None:
    """The artifact's GPU affinity tag of a pod: None (CPU-only), 'share', or 'k-gpu'."""
    if not gpus or not milli:
        return None
    return "share" if milli < FULL else f"{gpus}-gpu"


def clustering(lefts: tuple[int, ...], kinds: Mapping[str, int], milli: int, gpus: int) -> int:
    """25 × used/8 GPUs, plus 75 (only this kind here), 50 (this kind among others), 25 (no GPU pod yet) or 0."""
    tag = kind_of(milli, gpus)
    if tag is None:
        return 0
    base = 25 * (MAX_GPU - sum(lefts)) // MAX_GPU
    if kinds.get(tag, 0) > 0:
        return base + (75 if len(kinds) == 1 else 50)
    return base + (25 if not kinds else 0)


def take_whole(lefts: tuple[int, ...], milli: int, gpus: int) -> tuple[int, ...]:
    """Device indices a multi-device (or whole) pod takes: the first `gpus` devices with room, in index order."""
    out = []
    for i, v in enumerate(lefts):
        if len(out) == gpus:
            break
        if v >= milli:
            out.append(i)
    return tuple(out)


def tightest(lefts: tuple[int, ...], milli: int) -> int:
    """The device a share goes to under best fit: the least free one with room (first by index)."""
    best = -1
    for i, v in enumerate(lefts):
        if v >= milli and (best < 0 or v < lefts[best]):
            best = i
    return best
