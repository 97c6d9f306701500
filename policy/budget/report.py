"""Per-budget usage at an instant: used, left, burn rate and when it runs out at that rate (for `allot usage` and /metrics)."""

from __future__ import annotations


def usage(meter, t_ms: int) -> list[dict]:
    """One row per budget: milli-GPU-ms `used`, `amount`, `left`, `rate` (milli-GPU now), `runs_out` (UTC ms, None: not this period)."""
    rows = []
    for s in meter.specs:
        i = s.index
        used = meter.used_at(i, t_ms)
        limit = s.amount * 1000
        left = max(0, limit - used)
        rate = meter.rate[i]
        if used >= limit:
            runs_out = t_ms  # already spent
        elif rate > 0:
            runs_out = t_ms + -(-left // rate)  # ms until `left` is burnt at `rate`, rounded up
            if runs_out >= meter.end[i]:
                runs_out = None  # the period renews first
        else:
            runs_out = None
        rows.append({"budget": s.name, "model": s.model, "period": meter.key[i], "zone": s.zone, "used": used, "amount": limit,
                     "left": left, "rate": rate, "runs_out": runs_out, "period_end": meter.end[i], "spent": used >= limit})
    return rows
