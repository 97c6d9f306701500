"""How long a workload says it runs: the `allot.dev/duration` annotation, else `activeDeadlineSeconds` (docs/budgets.md)."""

from __future__ import annotations

import re

ANNOTATION = "allot.dev/duration"
_PART = re.compile(r"(\d+)(h|m|s)")
_UNITS = {"h": 3600, "m": 60, "s": 1}
MAX_SECONDS = 366 * 86400  # a stated run time past a year is no plan: read as unreadable


def parse_duration(text: object) -> int | None:
    """Seconds of `4h`, `90m`, `1h30m`, `3600s` or a bare `3600`; None when it is none of them (or zero, or past a year)."""
    if type(text) is not str:
        return None
    text = text.strip()
    if text.isascii() and text.isdigit():
        total = int(text)
    else:
        parts = _PART.findall(text)
        if not parts or "".join(n + u for n, u in parts) != text:
            return None
        total = sum(int(n) * _UNITS[u] for n, u in parts)
    return total if 0 < total <= MAX_SECONDS else None


def _deadline(spec: object) -> int | None:
    if not isinstance(spec, dict):
        return None
    v = spec.get("activeDeadlineSeconds")
    return v if type(v) is int and 0 < v <= MAX_SECONDS else None


def stated_duration(w) -> tuple[int | None, str | None]:
    """(seconds, where it was read) of the run time `w` states, or (None, None); (None, problem) for an unreadable annotation."""
    raw = (w.annotations or {}).get(ANNOTATION)
    if raw is not None:
        seconds = parse_duration(raw)
        if seconds is None:
            return None, f"annotation {ANNOTATION}={raw!r} is not a duration like 4h, 90m or 1h30m"
        return seconds, f"annotation {ANNOTATION}"
    obj = w.obj if isinstance(w.obj, dict) else {}
    spec = obj.get("spec")
    seconds = _deadline(spec)  # a Pod's or a Job's own deadline
    if seconds is not None:
        return seconds, "activeDeadlineSeconds"
    if isinstance(spec, dict):  # a JobSet: the longest deadline of its replicated Jobs (they run side by side)
        found = [_deadline(((rj or {}).get("template") or {}).get("spec")) for rj in spec.get("replicatedJobs") or ()
                 if isinstance(rj, dict)]
        found = [s for s in found if s is not None]
        if found and len(found) == len(spec.get("replicatedJobs") or ()):
            return max(found), "activeDeadlineSeconds"
    return None, None
