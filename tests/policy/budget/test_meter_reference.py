"""The fast meter (namespace index, remembered charges, running sums) equals the plain one over generated pod event sequences."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import lang
from policy.budget.calendar import Calendar, days_from_civil
from policy.budget.meter import BudgetMeter
from policy.budget.reference import PlainMeter
from policy.engine import Engine
from tests.policy.builders import gpu_container, node, pod, snapshot

H = 3_600_000
JUNE = days_from_civil(2025, 6, 1) * 86_400_000
# Every kind the meter indexes differently: keyed by namespace with and without a selector after it,
# unkeyed with a label selector, by model, for all, and periods that roll over inside the sequences.
SRC = '''gpu h100 { product "NVIDIA-H100-80GB-HBM3" memory 80Gi }
gpu l4 { product "NVIDIA-L4" memory 24Gi }
budget all { gpu_hours 100000  period month }
budget a { for namespace == "a"  gpu_hours 10  period day in "Etc/GMT-2" }
budget a-h100 { for namespace == "a"  gpu_hours 10 of h100  period day }
budget a-big { for namespace == "a" and labels["size"] == "big"  gpu_hours 10  period week }
budget big { for labels["size"] == "big"  gpu_hours 10  period day in "Etc/GMT-2" }
budget bc { for namespace matches "[bc]"  gpu_hours 10 of l4  period day }
'''
# Only namespace keys and models (as `allot bench budget`'s): the charges are remembered per (namespace, GPUs, model).
KEYED = '''gpu h100 { product "NVIDIA-H100-80GB-HBM3" memory 80Gi }
gpu l4 { product "NVIDIA-L4" memory 24Gi }
budget all { gpu_hours 100000  period day in "Etc/GMT-2" }
budget l4 { gpu_hours 100000 of l4  period day }
budget a { for namespace == "a"  gpu_hours 10  period day in "Etc/GMT-2" }
budget a-h100 { for namespace == "a"  gpu_hours 10 of h100  period day }
budget b { for namespace == "b"  gpu_hours 10  period week }
'''
PRODUCTS = {"h100": "NVIDIA-H100-80GB-HBM3", "l4": "NVIDIA-L4"}


def plus_two(zone: str, t_ms: int) -> int:
    return 2 * H if zone == "Etc/GMT-2" else 0


def a_pod(name: str, ns: str, gpus: str, model: str, big: bool, bound: bool, phase: str, deleting: bool) -> dict:
    p = pod(name, ns, containers=[gpu_container(gpus)], labels={"size": "big"} if big else {},
            node=f"n-{model}" if bound else None, nodeSelector={"nvidia.com/gpu.product": PRODUCTS[model]})
    p["status"] = {"phase": phase}
    if deleting:
        p["metadata"]["deletionTimestamp"] = "2025-06-01T00:00:00Z"
    return p


often = st.sampled_from([True, True, True, False])
pods = st.builds(a_pod, st.sampled_from("pqrs"), st.sampled_from("aabcd"), st.sampled_from(["0", "1", "2", "8"]),
                 st.sampled_from(["h100", "l4"]), st.booleans(), often,
                 st.sampled_from(["Running", "Running", "Running", "Pending", "Succeeded", "Failed"]), often.map(lambda b: not b))
events = st.lists(st.tuples(st.sampled_from(["ADDED", "MODIFIED", "MODIFIED", "DELETED"]), pods,
                            st.sampled_from([0, 1, 999, H // 2, H // 2, H - 1, 7 * H, 30 * H])), max_size=40)


def meters(src: str = SRC):
    policy, diags = lang.compile_policies([("t.policy", src)])
    assert [d for d in diags if d.severity == "error"] == []
    state = Engine(policy).state_for(snapshot(node("n-h100"), node("n-l4", product=PRODUCTS["l4"], memory_mib="23034")))
    to_workload = getattr(state.live, "to_workload", state.live)  # the plain function: events hand new dicts
    specs = state.compiled.budget_specs
    return BudgetMeter(specs, to_workload, Calendar(plus_two)), PlainMeter(specs, to_workload, Calendar(plus_two)), specs


@pytest.mark.parametrize("src", [SRC, KEYED], ids=["selectors", "keyed"])
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(seq=events)
def test_fast_and_plain_meters_agree_at_every_event(src, seq):
    fast, plain, specs = meters(src)
    assert (src is KEYED) == bool(fast.selector_free) and fast.unkeyed_free == (src is KEYED)  # both of the fast paths
    t = JUNE + 21 * H  # an hour before the UTC+2 day ends: steps of H land on the boundary
    fast.attach(None, t)
    plain.attach([], t)
    for event, obj, step in seq:
        t += step
        old, new = (obj, None) if event == "DELETED" else (None, obj)
        fast.pod_event(event, old, new, t)
        plain.pod_event(event, old, new, t)
        for s in specs:
            assert fast.used_at(s.index, t) == plain.used_at(s.index, t), (s.name, t)
    for s in specs:
        assert fast.used_at(s.index, t + 5 * H) == plain.used_at(s.index, t + 5 * H), s.name


def test_the_reference_tests_every_budget_and_counts_the_overlap():
    _, plain, specs = meters()
    plain.attach([], JUNE)
    big_a = a_pod("p", "a", "2", "h100", True, True, "Running", False)
    plain.pod_event("ADDED", None, big_a, JUNE)
    assert [specs[i].name for i, _ in plain.open["a/p"][1]] == ["all", "a", "a-h100", "a-big", "big"]
    plain.pod_event("DELETED", big_a, None, JUNE + H)
    assert plain.used_at(1, JUNE + 3 * H) == 2000 * H
    assert plain.used_at(1, JUNE + 23 * H) == 0  # the UTC+2 day began at 22:00 UTC
