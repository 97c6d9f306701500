"""Each budget's burn over a simulated trace and when it would be spent (`allot simulate`, docs/budgets.md).

A BudgetMeter (policy/budget/meter.py) follows the simulation's bound pods at the simulation's
time (trace seconds are read as seconds since the epoch, UTC). Between two events every
budget's rate is constant, so the instant it is spent is exact: the last event's time plus the
left milli-GPU-ms over the rate, rounded up to a millisecond. A budget not spent within the
trace is projected at its average burn over the trace (milli-GPU-ms accrued / trace length)
from the trace's end; `None` when the period renews first. All integers.
"""

from __future__ import annotations

from policy.budget.calendar import Calendar, civil_from_days
from policy.budget.figures import hours
from policy.budget.meter import BudgetMeter


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


class BurnWatch:
    """Meters `sim`'s snapshot per budget from `start_s`, noting the first instant each budget is spent."""

    def __init__(self, sim, start_s: float, calendar: Calendar | None = None):
        specs = sim.engine.compiled.budget_specs
        live = sim.engine.state_for(sim.snapshot).live
        self.sim, self.specs = sim, specs
        self.meter = BudgetMeter(specs, getattr(live, "to_workload", live), calendar)
        self.start = self.last = int(start_s * 1000)
        self.spent_at: list[int | None] = [None] * len(specs)
        self.total = [0] * len(specs)  # milli-GPU-ms accrued over the trace, every period
        self.meter.attach(None, self.start)
        for pod in list(sim.snapshot.pods()):  # what the cluster file runs burns from the start
            self.meter.pod_event("ADDED", None, pod, self.start)
        sim.snapshot.subscribe(self.on_event)

    def _to(self, t: int) -> None:
        """Fold the accrual up to `t`, noting budgets spent on the way (rates are constant since the last event)."""
        m = self.meter
        for s in self.specs:
            i, rate = s.index, m.rate[s.index]
            if rate <= 0 or t <= self.last:
                continue
            self.total[i] += rate * (t - self.last)
            if self.spent_at[i] is None:
                at, used, limit = m.at[i], m.used[i], s.amount * 1000
                upto = min(t, m.end[i])
                if used < limit <= used + rate * (upto - at):
                    self.spent_at[i] = at + _ceil_div(limit - used, rate)
            m.used_at(i, t)
        self.last = max(self.last, t)

    def on_event(self, event: str, old: dict | None, new: dict | None) -> None:
        """Snapshot callback: a pod bound or gone at the simulation's time."""
        obj = new if new is not None else old
        if isinstance(obj, dict) and obj.get("kind", "Pod") == "Pod":
            t = int(self.sim.now * 1000)
            self._to(t)
            self.meter.pod_event(event, old, new, t)

    def rows(self, end_s: float) -> list[dict]:
        """Per budget at the trace's end: used this period, amount, average burn, when spent (UTC ms) and how it was found."""
        end = int(end_s * 1000)
        self._to(end)
        span = max(1, end - self.start)
        out = []
        for s in self.specs:
            i, limit = s.index, s.amount * 1000
            used = self.meter.used_at(i, end)
            burn = self.total[i] // span  # milli-GPU on average
            spent, how = self.spent_at[i], "in the trace"
            if spent is None:
                how = "projected"
                spent = end + _ceil_div(limit - used, burn) if burn > 0 else None
                if spent is not None and spent >= self.meter.end[i]:
                    spent, how = None, "not this period"
                elif spent is None:
                    how = "no burn"
            out.append({"budget": s.name, "period": self.meter.key[i], "used": used, "amount": limit, "burn_mgpu": burn,
                        "spent_at": spent, "how": how})
        return out


def when(t_ms: int | None) -> str:
    """`2025-06-03 02:01 UTC`, or `-`."""
    if t_ms is None:
        return "-"
    days, ms = divmod(t_ms, 86_400_000)
    y, mo, d = civil_from_days(days)
    return f"{y:04d}-{mo:02d}-{d:02d} {ms // 3_600_000:02d}:{ms // 60_000 % 60:02d} UTC"


def render(rows: list[dict]) -> list[str]:
    """The report's budget lines."""
    lines = ["budgets (burn over the trace):"]
    for r in rows:
        lines.append(f"  {r['budget']}: {hours(r['used'])} of {hours(r['amount'])} GPU-hours used ({r['period']}), "
                     f"burn {r['burn_mgpu'] / 1000:g} GPUs; spent {when(r['spent_at'])} ({r['how']})")
    return lines


def moves(a: list[dict], b: list[dict]) -> list[dict]:
    """Per budget name in both: when each policy spends it and the move in ms (b - a; None when either does not)."""
    by_name = {r["budget"]: r for r in b}
    out = []
    for r in a:
        o = by_name.get(r["budget"])
        if o is not None:
            move = o["spent_at"] - r["spent_at"] if r["spent_at"] is not None and o["spent_at"] is not None else None
            out.append({"budget": r["budget"], "a": r["spent_at"], "b": o["spent_at"], "move_ms": move,
                        "amount_a": r["amount"], "amount_b": o["amount"]})
    return out


def render_moves(rows: list[dict]) -> list[str]:
    """The --against lines: how a budget change moves the day it is spent."""
    lines = ["budgets spent (this policy -> the other):"]
    for r in rows:
        sign = "+" if (r["move_ms"] or 0) >= 0 else "-"
        move = "" if r["move_ms"] is None else f" ({sign}{hours(abs(r['move_ms']) * 1000)} h)"  # ms x 1000 reads as hours
        lines.append(f"  {r['budget']}: {hours(r['amount_a'])} -> {hours(r['amount_b'])} GPU-hours; "
                     f"spent {when(r['a'])} -> {when(r['b'])}{move}")
    return lines
