"""Whole GPUs (`nvidia.com/gpu`, `amd.com/gpu`) and MIG slices (`nvidia.com/mig-<profile>`)."""

from __future__ import annotations

from .common import UNKNOWN_VALUE, Bad, ceil_div, whole_count

WHOLE = ("nvidia.com/gpu", "amd.com/gpu")
MIG_PREFIX = "nvidia.com/mig-"
GIB = 2**30
# A30 cards split into 4 compute slices; A100/H100/H200/B200 into 7.
_FOUR_SLICE = frozenset({"1g.6gb", "2g.12gb", "4g.24gb"})
_PROFILES: dict[str, tuple[int, int]] = {}  # profile -> (milli of one device, bytes); parsed once


def mig_profile(resource: str) -> tuple[int, int]:
    """(milli-GPU share, memory bytes) of one `nvidia.com/mig-<profile>` device, e.g. 1g.10gb -> (143, 10Gi)."""
    cached = _PROFILES.get(resource)
    if cached is not None:
        return cached
    profile = resource[len(MIG_PREFIX):]
    base = profile.split("+", 1)[0]  # "+me", "+gfx" variants have the same size
    parts = base.split(".")
    try:
        mem = parts[-1]
        gi = parts[-2]
        if not (mem.endswith("gb") and gi.endswith("g") and len(parts) in (2, 3)):
            raise ValueError(profile)
        slices = int(gi[:-1])
        memory = int(mem[:-2]) * GIB
        total = 4 if base.split(".", 1)[-1] in _FOUR_SLICE or base in _FOUR_SLICE else 7
        if not 1 <= slices <= total:
            raise ValueError(profile)
    except (ValueError, IndexError):
        raise Bad(UNKNOWN_VALUE, f"{resource!r} is not a MIG profile like nvidia.com/mig-1g.10gb") from None
    share = min(1000, ceil_div(slices * 1000, total))
    _PROFILES[resource] = (share, memory)
    return share, memory


def read_mig(resource: str, value: object, path: str) -> tuple[int, int, int]:
    """(count, milli-GPU, memory bytes) asked by one MIG resource entry."""
    count = whole_count(value, path)
    share, memory = mig_profile(resource)
    return count, count * share, count * memory

