"""Budget figures for people: GPU-hours from milli-GPU-ms, in integers (no float on the way)."""

from __future__ import annotations

HOUR = 3_600_000_000  # milli-GPU-ms in one GPU-hour
PERIOD_WORDS = {"day": "today", "week": "this week", "month": "this month", "quarter": "this quarter"}


def hours(milli_gpu_ms: int) -> str:
    """`19,870` or `19,870.5`: GPU-hours rounded down to a tenth, thousands separated."""
    sign = "-" if milli_gpu_ms < 0 else ""
    tenths = abs(milli_gpu_ms) * 10 // HOUR
    whole, tenth = divmod(tenths, 10)
    return f"{sign}{whole:,}" + (f".{tenth}" if tenth else "")


def unit(model: str | None) -> str:
    """`H100-hours` for a budget of one model, `GPU-hours` for all."""
    return f"{model.upper()}-hours" if model else "GPU-hours"


def percent(used: int, limit: int) -> str:
    """`80.5 %` of the budget, rounded down to a tenth."""
    tenths = used * 1000 // limit if limit else 0
    return f"{tenths // 10}.{tenths % 10} %" if tenths % 10 else f"{tenths // 10} %"


def duration(seconds: int) -> str:
    """`4h`, `90m`, `1h30m`, `45s`: a stated run time as people write it."""
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return "".join(f"{v}{u}" for v, u in ((h, "h"), (m, "m"), (s, "s")) if v) or "0s"
