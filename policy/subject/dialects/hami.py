"""HAMi vGPU resources: `nvidia.com/gpumem` (MiB), `nvidia.com/gpumem-percentage`, `nvidia.com/gpucores`."""

from __future__ import annotations

from policy.subject.model import Problem

from .common import BAD_FRACTION, MALFORMED, MIB, Bad, quantity

GPUMEM = "nvidia.com/gpumem"
GPUMEM_PCT = "nvidia.com/gpumem-percentage"
GPUCORES = "nvidia.com/gpucores"
KEYS = frozenset({GPUMEM, GPUMEM_PCT, GPUCORES})
USE_GPUTYPE = "nvidia.com/use-gputype"  # pod annotation: comma list of acceptable card types


def percent(value: object, path: str) -> int:
    """A whole percentage 1..100 as milli of one device (HAMi takes integers)."""
    try:
        q = quantity(value)
    except ValueError:
        raise Bad(BAD_FRACTION, f"{path}: {value!r} is not a percentage (expected a whole number 1..100)") from None
    if q <= 0 or q > 100 or (type(q) is not int and q.denominator != 1):
        raise Bad(BAD_FRACTION, f"{path}: {value!r} is out of range (expected a whole number 1..100)")
    return int(q) * 10


CLAMPED_CORES = "ClampedGpuCores"  # a warning, not a denial (policy.engine.WARN_PROBLEMS)


def cores(value: object, path: str, problems: list) -> int:
    """`nvidia.com/gpucores` as milli of one device; above 100 it is clamped to 100, as HAMi does, with a warning."""
    try:
        q = quantity(value)
    except ValueError:
        q = None
    if q is not None and q > 100 and (type(q) is int or q.denominator == 1):
        problems.append(Problem(CLAMPED_CORES, f"{path}: {value!r} is above 100; HAMi clamps it to 100 (one whole device's cores)"))
        return 1000
    return percent(value, path)


def mebibytes(value: object, path: str) -> int:
    """HAMi `gpumem` (a count of MiB per device) in bytes."""
    try:
        q = quantity(value)
    except ValueError:
        raise Bad(MALFORMED, f"{path}: {value!r} is not a number of MiB") from None
    if q <= 0 or (type(q) is not int and q.denominator != 1):
        raise Bad(MALFORMED, f"{path}: {value!r} is not a positive whole number of MiB")
    return int(q) * MIB


SHARE_LOWER_BOUND = "GpuShareLowerBound"  # a warning, not a denial (policy.engine.WARN_PROBLEMS)


def share(cores: int | None, mem_pct: int | None, mem: int | None, device_memory: int | None,
          problems: list | None = None, path: str = "") -> int | None:
    """Milli share of one device: the largest of the core, memory-percentage and memory shares known.

    Memory in MiB on a device of unknown size leaves the memory share unknown: the other
    shares are then a lower bound of the device's share, counted as such and said in `problems`.
    """
    best = None
    for s in (cores, mem_pct):
        if s is not None and (best is None or s > best):
            best = s
    if mem is not None and device_memory:
        s = min(1000, -((-mem * 1000) // device_memory))
        if best is None or s > best:
            best = s
    elif mem is not None and best is not None and problems is not None:
        problems.append(Problem(SHARE_LOWER_BOUND, f"{path}[{GPUMEM}]: the device's memory is not known (no node or GPU model of known "
                                f"memory), so the {mem // MIB} MiB asked cannot be read as a share; counted as {best / 10:g}% of a "
                                "GPU (its other shares), a lower bound"))
    return best
