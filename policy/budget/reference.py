"""The budget meter written as plainly as it can be: every budget tested on every pod event, every interval kept.

It is what `BudgetMeter` (policy/budget/meter.py) must equal, and the baseline `allot bench budget`
prints beside it: no index by namespace, no remembered charges, no running sums. A pod's
accrual is a list of intervals (start, end, budget, milli-GPU); a budget's use in a period is
the sum of each interval's overlap with it, computed when asked. Times never go backwards
(an event earlier than the latest one is taken at the latest, as the fast meter folds).
"""

from __future__ import annotations

from collections.abc import Callable

from policy.budget.calendar import Calendar
from policy.budget.meter import BudgetSpec, bound_start, holds_gpus
from policy.cluster.ledger import pod_key


class PlainMeter:
    """Per-pod intervals and a full scan of the budgets per event; use summed on demand."""

    def __init__(self, specs: list[BudgetSpec], to_workload: Callable[[dict], object], calendar: Calendar | None = None):
        self.specs, self.to_workload, self.calendar = specs, to_workload, calendar or Calendar()
        self.open: dict[str, tuple[int, tuple[tuple[int, int], ...]]] = {}  # pod key -> (since, charges)
        self.closed: list[tuple[int, int, int, int]] = []  # (start, end, budget, milli)
        self.latest = 0

    def charges_for(self, w) -> tuple[tuple[int, int], ...]:
        """(budget, milli-GPU) of every budget whose namespace, model and `for` take `w`: each one tested."""
        gpus = w.total_gpus
        return tuple((s.index, gpus) for s in self.specs
                     if gpus > 0 and (s.namespace is None or s.namespace == w.namespace)
                     and (s.model is None or s.model == w.gpu_model) and (s.selector is None or s.selector(w)))

    def attach(self, pods: list[dict], t_ms: int) -> None:
        """The pods bound at `t_ms`, each from its start."""
        self.latest = max(self.latest, t_ms)
        for pod in pods:
            if holds_gpus(pod):
                charges = self.charges_for(self.to_workload(pod))
                if charges:
                    self.open[pod_key(pod)] = (bound_start(pod, t_ms), charges)

    def pod_event(self, event: str, old: dict | None, new: dict | None, t_ms: int) -> None:
        """Close the pod's interval and open the one it holds now (when its charges changed)."""
        t_ms = self.latest = max(self.latest, t_ms)
        key = pod_key(new if new is not None else old)
        charges = self.charges_for(self.to_workload(new)) if event != "DELETED" and new is not None and holds_gpus(new) else ()
        since, held = self.open.get(key, (t_ms, ()))
        if held == charges:
            return
        self.open.pop(key, None)
        self.closed.extend((since, t_ms, i, milli) for i, milli in held)
        if charges:
            self.open[key] = (t_ms, charges)

    def used_at(self, i: int, t_ms: int) -> int:
        """Milli-GPU-ms budget `i` used in the period holding `t_ms`, up to `t_ms`."""
        s = self.specs[i]
        _, start, _ = self.calendar.period(s.period, s.zone, t_ms)
        spans = [(a, b, m) for a, b, j, m in self.closed if j == i]
        spans += [(a, t_ms, m) for a, charges in self.open.values() for j, m in charges if j == i]
        return sum(m * (min(b, t_ms) - max(a, start)) for a, b, m in spans if min(b, t_ms) > max(a, start))
