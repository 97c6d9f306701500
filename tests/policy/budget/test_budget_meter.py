"""The budget meter: accrual from real pod shapes, exact rollover at a zone's boundary, adoption of another replica's value."""

from __future__ import annotations

import lang
from policy.budget.calendar import Calendar, days_from_civil, parse_time
from policy.budget.meter import BudgetMeter
from policy.engine import Engine
from tests.policy.builders import gpu_container, node, pod, snapshot

H = 3_600_000  # ms in an hour
GH = 3_600_000_000  # milli-GPU-ms in one GPU-hour
JUNE = days_from_civil(2025, 6, 1) * 86_400_000  # 2025-06-01T00:00:00Z in ms
SRC = '''gpu h100 { product "NVIDIA-H100-80GB-HBM3" memory 80Gi }
budget research {
  for namespace == "research"
  gpu_hours 1000
  period day in "Etc/GMT-2"
}
'''


def berlin_summer(zone: str, t_ms: int) -> int:
    """A fixed UTC+2 (as Etc/GMT-2 is), passed in: the meter reads no zone database."""
    return 2 * H if zone == "Etc/GMT-2" else 0


def running(name: str, gpus: str, start: str | None = "2025-06-01T00:00:00Z", ns: str = "research") -> dict:
    p = pod(name, ns, containers=[gpu_container(gpus)], node="n1")
    p["spec"]["nodeName"] = "n1"
    p["status"] = {"phase": "Running", **({"startTime": start} if start else {})}
    return p


def meter_over(*pods) -> tuple[BudgetMeter, object]:
    policy, diags = lang.compile_policies([("t.policy", SRC)])
    assert diags == []
    snap = snapshot(node("n1"), *pods)
    state = Engine(policy).state_for(snap)
    m = BudgetMeter(state.compiled.budget_specs, state.live, Calendar(berlin_summer))
    return m, snap


def test_accrual_is_milli_gpu_times_ms_from_bound_until_it_ends():
    m, snap = meter_over(running("a", "2"))
    m.attach(snap, JUNE + H)  # a pod bound since midnight UTC: 2 GPUs x 1 h, period from 22:00 UTC (local midnight)
    assert m.used_at(0, JUNE + H) == 2000 * H
    m.pod_event("ADDED", None, running("b", "4"), JUNE + 2 * H)
    assert m.used_at(0, JUNE + 3 * H) == 2000 * 3 * H + 4000 * H
    done = running("b", "4")
    done["status"]["phase"] = "Succeeded"
    m.pod_event("MODIFIED", None, done, JUNE + 3 * H)
    assert m.used_at(0, JUNE + 4 * H) == 2000 * 4 * H + 4000 * H


def test_a_pod_neither_bound_nor_in_the_budget_accrues_nothing():
    pending = running("p", "8")
    del pending["spec"]["nodeName"]
    m, snap = meter_over(pending, running("o", "8", ns="other"))
    m.attach(snap, JUNE + H)
    assert (m.rate[0], m.used_at(0, JUNE + 5 * H)) == (0, 0)


def test_a_pod_without_a_start_time_accrues_from_when_it_is_first_seen_bound():
    m, snap = meter_over(running("a", "1", start=None))
    m.attach(snap, JUNE + 5 * H)
    assert m.used_at(0, JUNE + 6 * H) == 1000 * H


def test_the_period_rolls_over_exactly_at_local_midnight():
    m, snap = meter_over(running("a", "1"))
    m.attach(snap, JUNE + H)
    midnight = JUNE + 22 * H  # 2025-06-02T00:00 at UTC+2
    assert m.used_at(0, midnight - 1) == 1000 * (22 * H - 1)  # the period began at 22:00 UTC the day before, the pod at 00:00 UTC
    assert m.key[0] == "2025-06-01"
    assert m.used_at(0, midnight + 10) == 1000 * 10
    assert (m.key[0], m.previous[0]) == ("2025-06-02", ("2025-06-01", 1000 * 22 * H))


def test_adopting_another_replicas_value_adds_only_what_ran_after_it():
    m, snap = meter_over(running("a", "1"))
    m.attach(snap, JUNE + H)
    m.pod_event("ADDED", None, running("b", "2"), JUNE + 2 * H)
    # another replica wrote 50 GPU-hours at 01:30; since then: a for 1.5 h, b for 1 h
    assert m.adopt("research", "2025-06-01", 50 * GH, JUNE + H + H // 2, JUNE + 3 * H) == "adopted"
    assert m.used_at(0, JUNE + 3 * H) == 50 * GH + 1000 * (3 * H // 2) + 2000 * H
    gone = running("b", "2")
    gone["metadata"]["deletionTimestamp"] = "2025-06-01T03:30:00Z"
    m.pod_event("MODIFIED", None, gone, JUNE + 3 * H + H // 2)
    assert m.adopt("research", "2025-06-01", 60 * GH, JUNE + 3 * H, JUNE + 4 * H) == "adopted"
    assert m.used_at(0, JUNE + 4 * H) == 60 * GH + 1000 * H + 2000 * (H // 2)


def test_a_value_of_the_period_before_becomes_previous_and_an_unknown_name_is_said():
    m, snap = meter_over(running("a", "1"))
    m.attach(snap, JUNE + 23 * H)  # already 2025-06-02 local
    assert m.adopt("research", "2025-06-01", 7 * GH, JUNE + 21 * H, JUNE + 23 * H) == "previous"
    assert m.previous[0] == ("2025-06-01", 7 * GH + 1000 * H)
    assert m.adopt("research", "2025-05-31", 7 * GH, JUNE, JUNE + 23 * H) == "stale"
    assert m.adopt("renamed", "2025-06-02", 7 * GH, JUNE, JUNE + 23 * H) == "unknown"


def test_kubernetes_timestamps_parse_exactly():
    assert parse_time("2025-06-01T00:00:00Z") == JUNE
    assert parse_time("2025-06-01T02:00:00.250+02:00") == JUNE + 250
    assert parse_time("yesterday") is None and parse_time(None) is None
