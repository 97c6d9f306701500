"""GPU-hour budgets: the calendar, the meter (accrual from pod intervals) and the stated duration of a workload; pure (docs/budgets.md)."""
