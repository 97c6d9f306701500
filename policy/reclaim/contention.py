"""`Contention`: what a quota check leaves for the reclaim step (a leaf module: the quota block imports it)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Contention:
    """What a quota check left for this step: the quota, the kind, the milli-GPU asked, and the denial it deferred."""

    spec: object
    kind: str
    requested: int
    finding: tuple | None = None  # (code, text, data) of a deferred QuotaExceeded
