"""What the ledger writes: one ConfigMap per quota root (a shard), its name, and the parts of a write in flight.

The data every other module of the package reads; it imports none of them.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import re
from dataclasses import dataclass, field
from typing import Any

PREFIX = "allot-ledger-"
MAX_HOLDS = 4000  # per shard: ~100 bytes each keeps a ConfigMap far below its 1 MiB limit
MAX_ATTEMPTS = 16  # decisions of one request before a conflict storm answers with --on-error
RELEASE_TRIES = 16  # writes of a release (never awaited) before it is left to the entry's expiry
PRUNE_INTERVAL = 5.0


class LedgerUnavailable(Exception):
    """A shard could not be written (API error, full shard); the request gets the --on-error decision."""


@functools.lru_cache(maxsize=4096)  # asked per hold of every request: the slug and digest once per root
def shard_name(root: str) -> str:
    """The ConfigMap name of a quota root: readable where the id allows, always a valid DNS-1123 name."""
    slug = re.sub(r"[^a-z0-9-]+", "-", root.lower()).strip("-")[:40] or "x"
    digest = hashlib.sha256(root.encode()).hexdigest()[:8]
    return f"{PREFIX}{slug}-{digest}"


def quota_roots(engine: Any) -> dict[str, str]:
    """quota id (`quota NAME`) -> its root (`cohort NAME`, else the quota id) for `engine`'s policy set; {} for stand-in engines."""
    policy_set = getattr(engine, "policy_set", None)
    quotas = getattr(policy_set, "quotas", ()) or ()
    return {q.id: (f"cohort {q.cohort}" if q.cohort else q.id) for q in quotas}


@dataclass
class Shard:
    """One ConfigMap: its last known resourceVersion (None: not created yet) and holds by pod key."""

    name: str
    rv: str | None = None
    entries: dict[str, list] = field(default_factory=dict)  # key -> [expires_at, holds, replica, seen_at|None(, workload fields)]
    text: str | None = None  # the `holds` value last read or written: an event carrying the same is not parsed again
    pending: list = field(default_factory=list)  # (key, holds, expires_at, future, view)
    flushing: bool = False
    read_at: int = 0  # the ledger generation when a read last brought in another replica's holds
    pruned_at: float = 0.0  # when expired and settled holds were last looked for
    write_s: float = 0.002  # moving mean of this replica's successful writes, seconds
    changed: asyncio.Event | None = None  # set when a read (the watch, a get) moves the shard to a newer version
    # Escrow: this replica's slice as last written (quota id -> milli-GPU) and what admissions spent of it.
    slice: dict[str, int] = field(default_factory=dict)
    slice_exp: float = 0.0
    slice_at: float = 0.0  # when the slice was written
    spent: dict[str, int] = field(default_factory=dict)
    unrecorded: dict[str, tuple] = field(default_factory=dict)  # key -> (holds, expires_at): admitted in the slice, not written
    flight: dict | None = None  # the write in flight: {"slice", "exp", "spent", "recorded"}
    used_at: float = 0.0  # the last commit of a hold to this shard (an idle slice is returned)
    rate: float = 0.0  # milli-GPU per second this replica admitted inside its last slice here (sizes the next, with peers)
    wanting: int = 0  # requests of this replica waiting for other replicas' slices (a want entry is written)
    want_exp: float = 0.0


@dataclass(eq=False)
class Changes:
    """One request's part of a shard with workload changes: its pod holds and changes, written together or not at all."""

    puts: dict[str, tuple]  # pod key -> (holds, expires_at)
    changes: list  # (seq, WorkloadChange with holds of this shard only, the request's WorkloadChange it is part of)
    release: bool = False  # only releases: written after the answer, retried on a conflict
    tries: int = 0
    gangs: list = field(default_factory=list)  # GangChange: gang domains newly held (the gangs shard only)
    gang_drops: list = field(default_factory=list)  # (entry key, its expires_at): a released gang's entry, dropped if still that one

