"""Calendar periods in integer milliseconds: civil-date arithmetic, the zone's UTC offset passed in.

The offset function (zone, UTC ms) -> offset ms comes from the caller: `datetime` and
`zoneinfo` offsets stay in webhook/meter/zones.py (tests/test_layers.py keeps `datetime` out of
policy), so this module is pure and exact. Periods start at local midnight: `day`, `week`
(Monday), `month`, `quarter` (January, April, July, October).
"""

from __future__ import annotations

import re
from collections.abc import Callable

DAY_MS = 86_400_000
Offset = Callable[[str, int], int]  # (zone, UTC ms) -> ms east of UTC


_installed: list[Offset] = []  # the zone offsets the webhook package installs when it is imported


def install_offsets(fn: Offset) -> None:
    """Make `fn` every default Calendar's zone offsets (webhook/__init__.py installs webhook/meter/zones.py's)."""
    _installed[:] = [fn]


def zone_offset(zone: str, t_ms: int) -> int:
    """The installed offsets; without them only `UTC` is known (pure tests pass their own)."""
    if _installed:
        return _installed[0](zone, t_ms)
    if zone == "UTC":
        return 0
    raise ValueError(f"no time zone offsets are installed for {zone!r} (webhook/meter/zones.py installs them)")


def days_from_civil(y: int, m: int, d: int) -> int:
    """Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's algorithm)."""
    y -= m <= 2
    era = y // 400
    yoe = y - era * 400
    doy = (153 * (m + (-3 if m > 2 else 9)) + 2) // 5 + d - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146097 + doe - 719468


def civil_from_days(z: int) -> tuple[int, int, int]:
    """(year, month, day) of a count of days since 1970-01-01."""
    z += 719468
    era = z // 146097
    doe = z - era * 146097
    yoe = (doe - doe // 1460 + doe // 36524 - doe // 146096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    d = doy - (153 * mp + 2) // 5 + 1
    m = mp + (3 if mp < 10 else -9)
    return yoe + era * 400 + (m <= 2), m, d


def local_bounds(period: str, local_ms: int) -> tuple[str, int, int]:
    """(key, start, end) in local wall-clock ms of the period holding `local_ms`."""
    days = local_ms // DAY_MS
    y, m, d = civil_from_days(days)
    if period == "day":
        return f"{y:04d}-{m:02d}-{d:02d}", days * DAY_MS, (days + 1) * DAY_MS
    if period == "week":
        first = days - (days + 3) % 7  # 1970-01-01 was a Thursday: Monday is (days + 3) % 7 == 0
        fy, fm, fd = civil_from_days(first)
        return f"{fy:04d}-{fm:02d}-{fd:02d}/week", first * DAY_MS, (first + 7) * DAY_MS
    if period == "month":
        start, end = days_from_civil(y, m, 1), days_from_civil(y + (m == 12), m % 12 + 1, 1)
        return f"{y:04d}-{m:02d}", start * DAY_MS, end * DAY_MS
    if period == "quarter":
        q = (m - 1) // 3
        start = days_from_civil(y, 3 * q + 1, 1)
        end = days_from_civil(y + 1, 1, 1) if q == 3 else days_from_civil(y, 3 * q + 4, 1)
        return f"{y:04d}-Q{q + 1}", start * DAY_MS, end * DAY_MS
    raise ValueError(f"unknown period {period!r}")


class Calendar:
    """Period boundaries in UTC ms for (period, zone), exact at the zone's local midnight; `offset` is passed in."""

    def __init__(self, offset: Offset | None = None):
        self.offset = offset or zone_offset

    def _to_utc(self, zone: str, local_ms: int) -> int:
        """The UTC instant of a local wall-clock time (a DST change between: the offset there; a gap: just after it)."""
        u = local_ms - self.offset(zone, local_ms)
        return local_ms - self.offset(zone, u)

    def period(self, period: str, zone: str, t_ms: int) -> tuple[str, int, int]:
        """(key, start, end) in UTC ms of the period holding instant `t_ms`: start <= t_ms < end."""
        key, start, end = local_bounds(period, t_ms + self.offset(zone, t_ms))
        s, e = self._to_utc(zone, start), self._to_utc(zone, end)
        if t_ms >= e:  # an offset change right at the boundary: the next one holds it
            return self.period(period, zone, e)
        if t_ms < s:
            return self.period(period, zone, s - 1)
        return key, s, e


_RFC3339 = re.compile(r"(\d{4})-(\d\d)-(\d\d)[Tt ](\d\d):(\d\d):(\d\d)(?:\.(\d{1,9}))?(Z|z|[+-]\d\d:\d\d)$")


def parse_time(text: object) -> int | None:
    """UTC ms of a Kubernetes timestamp (`2025-06-03T10:00:00Z`, RFC 3339), None when it is not one."""
    if type(text) is not str:
        return None
    m = _RFC3339.match(text)
    if m is None:
        return None
    y, mo, d, h, mi, s = (int(g) for g in m.groups()[:6])
    if not (1 <= mo <= 12 and 1 <= d <= 31 and h < 24 and mi < 60 and s < 61):
        return None
    frac = int((m.group(7) or "0").ljust(3, "0")[:3])
    zone = m.group(8)
    off = 0 if zone in ("Z", "z") else (1 if zone[0] == "+" else -1) * (int(zone[1:3]) * 60 + int(zone[4:6])) * 60_000
    return (days_from_civil(y, mo, d) * 86400 + h * 3600 + mi * 60 + s) * 1000 + frac - off
