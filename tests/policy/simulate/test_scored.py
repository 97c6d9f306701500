"""The FGD paper simulator's models in `allot simulate`: which node and device each picks, ties, and the tuned trace."""

from fractions import Fraction

import pytest

from policy.simulate.saturate import allocation_at, tune
from tests.policy.simulate.sim_builders import L4, arrive, gpu_node, simulate

EQUAL = [gpu_node(n) for n in ("a", "b", "c", "d")]


def test_ties_follow_a_seeded_node_order():
    # four empty, equal nodes: every model ties; the seed's order picks, the same for the same seed
    events = [arrive(0, "p", gpus=1)]
    picks = {seed: simulate(EQUAL, events, scheduler="best-fit", seed=seed)[0].outcomes[0].node for seed in range(12)}
    assert picks == {seed: simulate(EQUAL, events, scheduler="best-fit", seed=seed)[0].outcomes[0].node for seed in range(12)}
    assert len(set(picks.values())) > 1  # not always the first by name


def test_best_fit_fills_the_node_it_leaves_least_of():
    # a: 8 H100 (96 cores), b: 4 L4 (48 cores); a 1-GPU pod leaves least on b
    nodes = [gpu_node("a"), gpu_node("b", L4)]
    result, _ = simulate(nodes, [arrive(0, "p", gpus=1, cpu="8")], scheduler="best-fit")
    assert result.outcomes[0].node == "b"


def test_packing_and_clustering_keep_shares_together():
    events = [arrive(0, "s1", gpus=1, cores=30), arrive(1, "w", gpus=1), arrive(2, "s2", gpus=1, cores=30)]
    for scheduler in ("packing", "clustering", "best-fit"):
        result, _ = simulate(EQUAL, events, scheduler=scheduler, seed=3)
        nodes = [o.node for o in result.outcomes]
        assert nodes[2] == nodes[0], scheduler  # the second share joins the first one's device and node


def test_fgd_puts_a_share_where_it_fragments_least():
    # the workload is half-GPU tasks. x (0.4) leaves 0.6 on device 0, still room for a half. y (0.2) on device 0
    # would leave 0.4 no half-GPU task can use (a fragment); fgd puts it on a fresh device, best-fit on the tightest.
    work = [arrive(i, f"h{i}", gpus=1, cores=50) for i in range(20)]
    events = [arrive(0, "x", gpus=1, cores=40), arrive(1, "y", gpus=1, cores=20)]
    want = {"fgd": [600, 800, 1000, 1000], "best-fit": [400, 1000, 1000, 1000]}
    for scheduler, lefts in want.items():
        result, sim = simulate([gpu_node("a", L4)], events, scheduler=scheduler, workload=work)
        assert [o.node for o in result.outcomes] == ["a", "a"]
        assert sim.scheduler.nodes["a"].lefts == lefts, scheduler


def test_random_is_seeded_and_spreads():
    events = [arrive(i, f"p{i}", gpus=1) for i in range(8)]
    first = [o.node for o in simulate(EQUAL, events, scheduler="random", seed=1)[0].outcomes]
    assert first == [o.node for o in simulate(EQUAL, events, scheduler="random", seed=1)[0].outcomes]
    assert len(set(first)) > 1


def test_departures_give_devices_back():
    events = [arrive(0, "a1", gpus=8, duration=10), arrive(20, "a2", gpus=8, duration=10), arrive(40, "a3", gpus=8)]
    result, sim = simulate([gpu_node("a")], events, scheduler="fgd")
    assert [o.final for o in result.outcomes] == ["bound"] * 3
    assert sim.scheduler.gpu_alloc == 8000 and sim.scheduler.nodes["a"].lefts == [0] * 8


def test_unplaceable_names_what_is_short():
    result, _ = simulate([gpu_node("a", L4)], [arrive(0, "big", gpus=8), arrive(1, "fat", gpus=1, cpu="200")], scheduler="packing")
    assert [o.codes for o in result.outcomes] == [("InsufficientGPU",), ("InsufficientCPU",)]
    assert result.outcomes[0].message == "0/1 nodes are available: 1 Insufficient nvidia.com/gpu"


def gpu_shape(obj):
    limits = obj["spec"]["containers"][0]["resources"].get("limits", {})
    n = int(limits.get("nvidia.com/gpu", 0))
    cores = limits.get("nvidia.com/gpucores")
    return (10 * int(cores), 10 * int(cores)) if cores else (1000 * (n > 0), 1000 * n)


def test_tune_keeps_the_whole_trace_then_draws_to_the_target():
    base = [arrive(0, f"p{i}", gpus=1 + i % 2) for i in range(6)]  # 9 GPUs in all
    out = tune(base, gpu_shape, Fraction(13, 10), 10000, seed=5)  # target 13 GPUs
    names = [a.obj["metadata"]["name"] for a in out]
    assert sorted(names[:6]) == [f"p{i}" for i in range(6)] and names[:6] != [f"p{i}" for i in range(6)]  # shuffled, each once
    assert all("-tuned-" in n for n in names[6:]) and names[6:]
    total = sum(gpu_shape(a.obj)[1] for a in out)
    assert 12000 <= total <= 13000  # stopped at the first draw that would pass the target
    assert [a.at for a in out] == [float(t) for t in range(len(out))]
    assert out == tune(base, gpu_shape, Fraction(13, 10), 10000, seed=5)


def test_tune_removes_pods_when_the_trace_is_above_the_target():
    base = [arrive(0, f"p{i}", gpus=2) for i in range(10)]  # 20 GPUs
    out = tune(base, gpu_shape, Fraction(1), 13000, seed=1)
    assert sum(gpu_shape(a.obj)[1] for a in out) == 12000 and len(out) == 6


def test_allocation_at_arrived_is_the_artifacts_mean_per_percent():
    # total 1000 milli: steps at 4, 5, 6 % arrived -> 4 % and 6 % round to themselves, 5 % alone; 7 % has no step -> 6..8
    steps = [(40, 40), (50, 40), (60, 50), (60, 60), (100, 80)]
    got = allocation_at(steps, 1000, 10)
    assert got[4] == 4.0 and got[5] == 4.0 and got[6] == 5.5
    assert got[7] == 5.5  # no step rounds to 7 %: the mean of 6..8 %
    assert got[10] == 8.0 and 2 not in got


@pytest.mark.parametrize("scheduler", ["random", "best-fit", "packing", "dot-product", "clustering", "fgd"])
def test_every_artifact_model_runs_a_saturating_trace(scheduler):
    nodes = [gpu_node("a"), gpu_node("b", L4), gpu_node("c", L4)]
    base = [arrive(0, f"p{i}", gpus=1 + i % 3, cores=(25 if i % 4 == 0 else None)) for i in range(12)]
    events = tune(base, gpu_shape, Fraction(13, 10), 16000, seed=42)
    result, sim = simulate(nodes, events, scheduler=scheduler, seed=42, saturate_target=20800, workload=base)
    assert sim.scheduler.gpu_alloc <= 16000 and result.steps and result.steps[-1][0] <= 20800 + 7000
    assert sum(o.final == "bound" for o in result.outcomes) > 0
