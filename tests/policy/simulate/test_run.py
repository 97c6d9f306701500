"""The simulation loop: decisions through the Engine, resubmission, saturation, timelines."""

import pytest

from policy.simulate.report import build_report, differences, render_text
from policy.simulate.saturate import parse_multiple, saturate, target_milli
from tests.policy.simulate.sim_builders import Departure, arrive, gpu_node, simulate

QUOTA = """
quota team-a {
  for namespace == "team-a"
  gpus 4
}

rule no-eight {
  for namespace == "team-b"
  when gpus >= 8
  deny "{name}: no whole hosts"
}
"""


def test_denials_count_by_reason_and_block_and_quota_is_charged():
    events = [arrive(0, "a1", gpus=2), arrive(1, "a2", gpus=2), arrive(2, "a3", gpus=1),
              arrive(3, "b1", ns="team-b", gpus=8)]
    result, sim = simulate([gpu_node("n1"), gpu_node("n2")], events, QUOTA)
    assert [o.final for o in result.outcomes] == ["bound", "bound", "denied", "denied"]
    assert result.outcomes[2].codes == ("QuotaExceeded",) and result.outcomes[2].blocks == ("quota team-a",)
    assert result.outcomes[3].codes == ("RuleDenied",) and result.outcomes[3].blocks == ("rule no-eight",)
    rep = build_report(result, {"policy": "t"}, sim.quota.specs)
    assert rep["denied_by_reason"] == {"QuotaExceeded": 1, "RuleDenied": 1}
    assert rep["denied_by_block"] == {"quota team-a": 1, "rule no-eight": 1}
    assert rep["quota"][0]["peak_used_milli"] == 4000 and rep["quota"][0]["nominal_milli"] == 4000


@pytest.mark.parametrize("retry, deadline, want_final, want_waited, want_attempts", [
    (None, 3600.0, "denied", None, 1),      # dropped at once
    (30.0, 3600.0, "bound", 120.0, 5),      # t=0 denied, retried at 30, 60, 90; bound at 120 after a1 left at 100
    (30.0, 60.0, "denied", None, 3),        # gave up: attempts at 0, 30, 60
])
def test_resubmission_waits_until_quota_frees(retry, deadline, want_final, want_waited, want_attempts):
    events = [arrive(0, "a1", gpus=4, duration=100), arrive(0, "a2", gpus=1, duration=10)]
    result, _ = simulate([gpu_node("n")], events, QUOTA, retry=retry, deadline=deadline)
    late = result.outcomes[1]
    assert (late.final, late.waited, late.attempts) == (want_final, want_waited, want_attempts)


def test_unplaceable_is_resubmitted_and_waits_for_capacity():
    events = [arrive(0, "big", gpus=8, duration=50), arrive(1, "next", gpus=8, duration=5)]
    result, _ = simulate([gpu_node("n")], events, retry=20.0)
    assert result.outcomes[1].final == "bound"
    assert result.outcomes[1].waited == 60.0  # tried at 1, 21, 41 (full), bound at 61 after big left at 50
    assert result.unplaceable_attempts == {"InsufficientGPU": 3}


def test_trace_departure_removes_a_bound_pod_and_withdraws_a_waiting_one():
    events = [arrive(0, "a", gpus=8), arrive(1, "b", gpus=8), Departure(5, "team-a/b"), Departure(10, "team-a/a")]
    result, sim = simulate([gpu_node("n")], events, retry=2.0)
    assert [o.final for o in result.outcomes] == ["bound", "withdrawn"]
    assert sim.scheduler.gpu_alloc == 0


def test_name_clash_is_a_conflict_not_a_crash():
    result, _ = simulate([gpu_node("n")], [arrive(0, "a", gpus=1), arrive(1, "a", gpus=1)])
    assert [o.final for o in result.outcomes] == ["bound", "conflict"]


def test_timeline_samples_allocation_over_time():
    events = [arrive(0, "a", gpus=4, duration=50), arrive(50, "b", gpus=8, duration=50)]
    result, _ = simulate([gpu_node("n")], events, samples=4)
    # samples at t = 0, 25, 50, 75, 100, each after the events at that time: a runs 0..50, b 50..100
    assert [s[0] for s in result.samples] == [0, 25, 50, 75, 100]
    assert [s[3] for s in result.samples] == [4000, 4000, 8000, 8000, 0]


def test_saturation_draws_until_the_multiple_and_is_seeded():
    base = [arrive(i, f"p{i}", gpus=1 + i % 2, cpu="1", memory="1Gi") for i in range(6)]
    gpu_of = lambda obj: 1000 * int(obj["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"])  # noqa: E731
    target = target_milli(16000, parse_multiple("1.3"))
    assert target == 20800
    a = saturate(base, gpu_of, target, seed=1)
    b = saturate(base, gpu_of, target, seed=1)
    c = saturate(base, gpu_of, target, seed=2)
    assert [x.obj["metadata"]["name"] for x in a] == [x.obj["metadata"]["name"] for x in b]
    assert [x.obj["metadata"]["name"] for x in a] != [x.obj["metadata"]["name"] for x in c]
    demand = [gpu_of(x.obj) for x in a]
    assert sum(demand) >= target and sum(demand[:-1]) < target
    names = [x.obj["metadata"]["name"] for x in a]
    assert len(set(names)) == len(names)  # drawn again once used up, under a new name
    assert sorted(names[:6]) == sorted(f"p{i}" for i in range(6))


def test_saturation_run_reports_allocation_against_demand():
    base = [arrive(i, f"p{i}", gpus=3, cpu="1", memory="1Gi") for i in range(4)]
    result, sim = simulate([gpu_node("n1"), gpu_node("n2")], [], samples=10)
    target = target_milli(sim.scheduler.gpu_total, parse_multiple("1.3"))
    events = saturate(base, sim.gpu_of, target, seed=0)
    result = sim.run(events, saturate_target=target)
    rep = build_report(result, {"saturate": "1.3"})
    assert rep["gpu"]["arrived_demand_share"] >= 1.3
    assert rep["gpu"]["allocated_final_share"] == 0.75  # 3-GPU pods: two per 8-GPU node, 12 of 16
    assert rep["objects"]["unplaceable"] == len(events) - 4


@pytest.mark.parametrize("text", ["0", "-1", "abc", "1000"])
def test_saturate_multiple_must_be_sane(text):
    with pytest.raises(ValueError):
        parse_multiple(text)


def test_differences_list_changed_decisions():
    events = [arrive(0, "a1", gpus=4), arrive(1, "a2", gpus=1)]
    a, _ = simulate([gpu_node("n")], events, QUOTA)
    b, _ = simulate([gpu_node("n")], events)
    diff = differences(a, b)
    assert diff["count"] == 1
    assert diff["listed"][0]["object"] == "team-a/a2"
    assert diff["listed"][0]["a"]["final"] == "denied" and diff["listed"][0]["b"]["final"] == "bound"


@pytest.mark.parametrize("spec", [
    {"containers": "not-a-list"},
    {"containers": [{"name": "c", "resources": {"requests": {"cpu": "lots"}}}]},
    {"containers": [{"name": "c", "resources": {"requests": {"memory": "-1Gi"}}}]},
])
def test_malformed_pods_are_refused_not_crashed(spec):
    from policy.simulate.trace import Arrival

    obj = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "bad", "namespace": "team-a"}, "spec": spec}
    result, sim = simulate([gpu_node("n")], [Arrival(0, obj), arrive(1, "good", gpus=1)])
    assert result.outcomes[0].final == "denied" and result.outcomes[0].codes
    assert result.outcomes[1].final == "bound"


def _running(name, node, gpus):
    """A pod the cluster file already runs on `node`."""
    p = arrive(0, name, gpus=gpus).obj
    p["spec"]["nodeName"] = node
    p["status"] = {"phase": "Running"}
    return p


@pytest.mark.parametrize("events, want_demand", [
    # 4 GPUs already running, 2 arrive and run: demand is the 6 allocated, never the 2 that arrived
    ([arrive(0, "new", gpus=2, duration=10)], [6000, 6000, 4000]),
    # the running pod leaves by name: demand falls with it, to what is left (the arrival, then nothing)
    ([arrive(0, "new", gpus=2, duration=20), Departure(10, "team-a/old")], [6000, 2000, 0]),
])
def test_demand_counts_the_pods_already_running(events, want_demand):
    result, _ = simulate([gpu_node("n"), _running("old", "n", 4)], events, samples=2)
    i_demand, i_alloc = 2, 3
    assert [s[i_demand] for s in result.samples] == want_demand
    assert all(s[i_demand] >= s[i_alloc] for s in result.samples)  # nothing runs that is not demanded
    rep = build_report(result, {})
    assert rep["gpu"]["demand_peak_share"] >= rep["gpu"]["allocated_peak_share"]
    assert "peak demand (running, the starting cluster's pods too, + waiting) 75.0%" in render_text(rep)
