"""KAI scheduler annotations: `gpu-fraction`, `gpu-memory` (MiB), `gpu-fraction-num-devices`."""

from __future__ import annotations

from typing import Mapping

from .common import BAD_FRACTION, MALFORMED, MIB, Bad, ceil_milli, quantity

FRACTION = "gpu-fraction"
MEMORY = "gpu-memory"
NUM_DEVICES = "gpu-fraction-num-devices"


def read_kai(annotations: Mapping) -> tuple[int, int | None, int | None] | None:
    """(devices, milli share or None, memory bytes per device or None), or None when the pod uses no KAI sharing."""
    frac_raw = annotations.get(FRACTION)
    mem_raw = annotations.get(MEMORY)
    if frac_raw is None and mem_raw is None:
        return None
    devices = 1
    raw = annotations.get(NUM_DEVICES)
    if raw is not None:
        try:
            q = quantity(raw)
        except ValueError:
            q = -1
        if q < 1 or (type(q) is not int and q.denominator != 1):
            raise Bad(MALFORMED, f"metadata.annotations[{NUM_DEVICES}]: {raw!r} is not a whole number of devices >= 1")
        devices = int(q)
    share = memory = None
    if frac_raw is not None:
        path = f"metadata.annotations[{FRACTION}]"
        try:
            q = quantity(frac_raw)
        except ValueError:
            raise Bad(BAD_FRACTION, f"{path}: {frac_raw!r} is not a number (expected a fraction like 0.5)") from None
        if q <= 0 or q > 1:
            raise Bad(BAD_FRACTION, f"{path}: {frac_raw!r} is out of range (expected 0 < fraction <= 1)")
        share = ceil_milli(q)
    if mem_raw is not None:
        path = f"metadata.annotations[{MEMORY}]"
        try:
            q = quantity(mem_raw)
        except ValueError:
            raise Bad(MALFORMED, f"{path}: {mem_raw!r} is not a number of MiB") from None
        if q <= 0:
            raise Bad(MALFORMED, f"{path}: {mem_raw!r} is not a positive number of MiB")
        # KAI documents a bare count of MiB ("2000"); a unit ("20Gi") is read as bytes.
        unitless = type(q) is int or (isinstance(mem_raw, str) and mem_raw.isascii() and mem_raw.strip().replace(".", "", 1).isdigit())
        memory = q * MIB if unitless else q
        memory = -((-memory.numerator) // memory.denominator) if type(memory) is not int else memory
    return devices, share, memory
