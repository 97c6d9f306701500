"""The `allot-meter` ConfigMap: what it holds and how it reads back (docs/budgets.md, "The meter object").

    data:
      writer: replica-7f9c-1234          # who writes it now (a lease: renewed every 10 s)
      at: "1748736000000"                # API server time of the write, UTC ms
      budget.research: '{"period": "2025-06", "used_mgpu_ms": 71532900000000, "gpu_hours": "19870.2",
                         "previous": {"period": "2025-05", "used_mgpu_ms": ...}}'

One key per budget so `kubectl edit` can correct one; `gpu_hours` is for people and never read.
An entry that does not read is reported and left out (the replica's own value stands, and the
next write replaces it); a budget no policy declares any more is carried unchanged (`orphaned`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import orjson

from policy.budget.figures import HOUR

NAME = "allot-meter"
LABEL = "allot.dev/meter"
PREFIX = "budget."


@dataclass
class Entry:
    """One budget's stored use."""

    period: str
    used: int  # milli-GPU-ms
    previous: tuple[str, int] | None = None


@dataclass
class Stored:
    """The meter object as read: its resourceVersion, writer, time and entries; `problems` says what did not read."""

    rv: str | None
    writer: str | None
    at: int | None
    entries: dict[str, Entry] = field(default_factory=dict)
    raw: dict[str, str] = field(default_factory=dict)  # every budget key's text as stored (orphans are written back as is)
    problems: list[str] = field(default_factory=list)


def _entry(text: object) -> Entry | None:
    try:
        doc = orjson.loads(text) if isinstance(text, str) else None
    except orjson.JSONDecodeError:
        return None
    if not isinstance(doc, dict):
        return None
    period, used = doc.get("period"), doc.get("used_mgpu_ms")
    if type(period) is not str or type(used) is not int or used < 0:
        return None
    prev = doc.get("previous")
    previous = None
    if isinstance(prev, dict) and type(prev.get("period")) is str and type(prev.get("used_mgpu_ms")) is int and prev["used_mgpu_ms"] >= 0:
        previous = (prev["period"], prev["used_mgpu_ms"])
    return Entry(period, used, previous)


def decode(cm: dict | None) -> Stored | None:
    """The meter object of a ConfigMap as the API returns it (None: there is none)."""
    if cm is None:
        return None
    meta = cm.get("metadata") or {}
    data = cm.get("data") or {}
    if not isinstance(data, dict):
        data = {}
    at = data.get("at")
    out = Stored(meta.get("resourceVersion"), data.get("writer") if isinstance(data.get("writer"), str) else None,
                 int(at) if isinstance(at, str) and at.isascii() and at.isdigit() else None)
    if out.at is None:
        out.problems.append("the meter's `at` is not a time in ms")
    for key, text in data.items():
        if not key.startswith(PREFIX):
            continue
        name = key[len(PREFIX):]
        out.raw[name] = text if isinstance(text, str) else ""
        entry = _entry(text)
        if entry is None:
            out.problems.append(f"budget {name}: the entry does not read (want period and a non-negative used_mgpu_ms)")
        else:
            out.entries[name] = entry
    return out


def _text(period: str, used: int, previous: dict | None) -> str:
    doc = {"period": period, "used_mgpu_ms": used, "gpu_hours": f"{used / HOUR:.1f}"}  # (display only: never read back)
    if previous is not None:
        doc["previous"] = {"period": previous["period"], "used_mgpu_ms": previous["used"]}
    return orjson.dumps(doc).decode()


def encode(namespace: str, writer: str, at: int, values: dict[str, dict], stored: Stored | None) -> dict:
    """The ConfigMap to write: this meter's `values` (snapshot_values), orphans of `stored` kept, conditional on its rv."""
    data = {"writer": writer, "at": str(at)}
    if stored is not None:
        for name, text in stored.raw.items():
            if name not in values:
                data[PREFIX + name] = text  # a budget the policy no longer declares (renamed?): kept for a hand move
    for name, v in values.items():
        data[PREFIX + name] = _text(v["period"], v["used"], v.get("previous"))
    meta = {"name": NAME, "namespace": namespace, "labels": {LABEL: "budgets"}}
    if stored is not None and stored.rv is not None:
        meta["resourceVersion"] = stored.rv
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data}
