"""UTC offsets of IANA time zones for the budget calendar (policy/budget/calendar.py stays free of datetime)."""

from __future__ import annotations

import datetime
import functools
import zoneinfo


@functools.lru_cache(maxsize=256)
def _zone(name: str) -> datetime.tzinfo:
    return datetime.UTC if name == "UTC" else zoneinfo.ZoneInfo(name)


def offset_ms(zone: str, t_ms: int) -> int:
    """Milliseconds `zone` is ahead of UTC at the instant `t_ms` (DST included)."""
    at = datetime.datetime.fromtimestamp(t_ms / 1000, datetime.UTC)  # the instant, not an amount: float is fine here
    off = at.astimezone(_zone(zone)).utcoffset()
    return (off.days * 86400 + off.seconds) * 1000 if off is not None else 0


def install() -> None:
    """Give every default budget calendar these offsets."""
    from policy.budget.calendar import install_offsets

    install_offsets(offset_ms)
