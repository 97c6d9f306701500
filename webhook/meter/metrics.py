"""Prometheus metrics per budget, computed at scrape time from the meter this replica serves with (docs/budgets.md, Metrics)."""

from __future__ import annotations

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from policy.budget.figures import HOUR
from policy.budget.report import usage


class BudgetCollector:
    """`allot_budget_*` families for `service` (a MeterService); rows are the last ones computed when a decision holds the meter."""

    def __init__(self, service) -> None:
        self.service = service
        self.rows: list[dict] = []

    def _rows(self) -> list[dict]:
        s = self.service
        if s.meter is not None:
            s._gated(lambda: setattr(self, "rows", usage(s.meter, s.clock.now_ms())))
        return self.rows

    def collect(self):
        """Metric families for the registry."""
        rows = self._rows()
        used = GaugeMetricFamily("allot_budget_used_gpu_hours", "GPU-hours a budget used in its current period.", labels=["budget", "period"])
        amount = GaugeMetricFamily("allot_budget_gpu_hours", "GPU-hours a budget gives per period.", labels=["budget"])
        burn = GaugeMetricFamily("allot_budget_burn_gpus", "GPUs a budget's pods hold now (GPU-hours per hour).", labels=["budget"])
        out = GaugeMetricFamily("allot_budget_runs_out_timestamp_seconds",
                                "When a budget is spent at the current burn rate (absent: not within this period).", labels=["budget"])
        for r in rows:
            used.add_metric([r["budget"], r["period"]], r["used"] / HOUR)
            amount.add_metric([r["budget"]], r["amount"] / HOUR)
            burn.add_metric([r["budget"]], r["rate"] / 1000)
            if r["runs_out"] is not None:
                out.add_metric([r["budget"]], r["runs_out"] / 1000)
        yield from (used, amount, burn, out)
        writes = CounterMetricFamily("allot_budget_meter_writes", "Writes of the allot-meter object by result.", labels=["result"])
        for result, n in self.service.writes.items():
            writes.add_metric([result], n)
        yield writes
        problems = CounterMetricFamily("allot_budget_meter_problems", "Parts of the meter object that did not read.", labels=["problem"])
        for problem, n in self.service.problems.items():
            problems.add_metric([problem], n)
        yield problems
        stored = self.service.stored
        writer = GaugeMetricFamily("allot_budget_meter_writer", "1 while this replica writes the meter object.")
        writer.add_metric([], 1.0 if stored is not None and stored.writer == self.service.identity else 0.0)
        yield writer
