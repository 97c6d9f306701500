"""The scheduler model: which node each policy picks, and what does not fit and why."""

import pytest

from tests.policy.simulate.sim_builders import L4, arrive, gpu_node, node, simulate

NODES = [gpu_node("a"), gpu_node("b"), gpu_node("c")]


@pytest.mark.parametrize("scheduler, want_nodes", [
    # spread (LeastAllocated): each pod on the emptiest node
    ("spread", ["a", "b", "c", "a"]),
    # binpack (MostAllocated): all on the first node, it has room for all four
    ("binpack", ["a", "a", "a", "a"]),
    # least-free-gpu: the tightest GPU fit; equal nodes tie to the first in name order
    ("least-free-gpu", ["a", "a", "a", "a"]),
])
def test_policy_picks_nodes(scheduler, want_nodes):
    events = [arrive(i, f"p{i}", gpus=2, cpu="8", memory="64Gi") for i in range(4)]
    result, _ = simulate(NODES, events, scheduler=scheduler)
    assert [o.node for o in result.outcomes] == want_nodes


def test_least_free_gpu_fills_the_tightest_node():
    # b has 2 GPUs free after the first pod, a 8: a 2-GPU pod goes to b under least-free-gpu, to a under spread
    events = [arrive(0, "big", gpus=6, cpu="8", memory="8Gi", duration=None), arrive(1, "small", gpus=2)]
    nodes = [gpu_node("a"), gpu_node("b")]
    want = {"least-free-gpu": "a", "spread": "b"}
    for scheduler, want_node in want.items():
        result, _ = simulate(nodes, events, scheduler=scheduler)
        assert result.outcomes[0].node == "a"
        assert result.outcomes[1].node == want_node, scheduler


@pytest.mark.parametrize("pods, want_final, want_code", [
    # four quarter shares fill one L4 device: 4 devices take 16, the 17th has no room
    ([("s", 1, 25)] * 16, ["bound"] * 16, None),
    ([("s", 1, 25)] * 17, ["bound"] * 16 + ["unplaceable"], "InsufficientGPU"),
    # a 5-GPU pod on 4-GPU nodes
    ([("w", 5, None)], ["unplaceable"], "InsufficientGPU"),
])
def test_gpu_shares_and_whole_devices(pods, want_final, want_code):
    events = [arrive(i, f"{n}{i}", gpus=g, cores=c, cpu="100m", memory="100Mi") for i, (n, g, c) in enumerate(pods)]
    result, sim = simulate([gpu_node("l4", L4)], events)
    assert [o.final for o in result.outcomes] == want_final
    if want_code:
        assert result.outcomes[-1].codes == (want_code,)
    bound_milli = sum((g * 1000 if c is None else c * 10) for (_, g, c), o in zip(pods, result.outcomes) if o.final == "bound")
    assert sim.scheduler.gpu_alloc == bound_milli


@pytest.mark.parametrize("cpu, memory, want_code", [
    ("97", "1Gi", "InsufficientCPU"),     # the H100 node has 96 cores
    ("1", "2Ti", "InsufficientMemory"),   # and 1 TiB
])
def test_cpu_and_memory_count(cpu, memory, want_code):
    result, _ = simulate([gpu_node("a")], [arrive(0, "p", gpus=1, cpu=cpu, memory=memory)])
    assert result.outcomes[0].final == "unplaceable"
    assert result.outcomes[0].codes == (want_code,)
    assert "0/1 nodes are available" in result.outcomes[0].message


def test_cpu_pods_use_cpu_nodes_and_selectors_are_honoured():
    nodes = [node("cpu-1", None), gpu_node("gpu-1")]
    events = [arrive(0, "web", gpus=None, cpu="60", memory="1Gi"), arrive(1, "pinned", gpus=1, product="NVIDIA-L4")]
    result, _ = simulate(nodes, events)
    assert result.outcomes[0].final == "bound"
    assert result.outcomes[1].final == "unplaceable"
    assert result.outcomes[1].codes == ("NodeAffinity",)


def test_departures_free_capacity_and_gauges_return_to_zero():
    events = [arrive(0, "a", gpus=8, duration=10), arrive(5, "b", gpus=8), arrive(20, "c", gpus=8, duration=5)]
    result, sim = simulate([gpu_node("n")], events)
    assert [o.final for o in result.outcomes] == ["bound", "unplaceable", "bound"]
    assert sim.scheduler.gpu_alloc == 0 and sim.scheduler.cpu_alloc == 0
    assert sim.index.free_gpus("n") == 8


def _l4_affinity(a):
    """The arrival's pod pinned to L4 by required node affinity instead of a nodeSelector."""
    spec = a.obj["spec"]
    spec.pop("nodeSelector", None)
    term = {"matchExpressions": [{"key": "nvidia.com/gpu.product", "operator": "In", "values": [L4[0]]}]}
    spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}}
    return a


@pytest.mark.parametrize("pin", [lambda a: a, _l4_affinity], ids=["nodeSelector", "nodeAffinity"])
def test_a_pod_pinned_to_full_l4_nodes_is_short_of_gpu_not_of_affinity(pin):
    # three H100 nodes the pod may not use, one L4 node it may, already full: the blocker is the L4 GPUs
    nodes = [gpu_node("h1"), gpu_node("h2"), gpu_node("h3"), gpu_node("l4", L4)]
    events = [pin(arrive(0, "fill", gpus=4, product=L4[0])), pin(arrive(1, "late", gpus=1, product=L4[0]))]
    result, _ = simulate(nodes, events)
    assert [o.final for o in result.outcomes] == ["bound", "unplaceable"]
    assert result.outcomes[1].codes == ("InsufficientGPU",)
    # the message still counts every node as kube-scheduler does
    assert "3 node(s) didn't match Pod's node affinity/selector" in result.outcomes[1].message
    assert "1 Insufficient nvidia.com/gpu" in result.outcomes[1].message


def test_a_pod_no_node_matches_is_classified_by_affinity():
    result, _ = simulate([gpu_node("h1"), node("cpu", None)], [arrive(0, "p", gpus=1, product=L4[0])])
    assert result.outcomes[0].codes == ("NodeAffinity",)


def test_a_pod_pinned_by_hostname_to_a_full_node_is_short_of_gpu():
    # the selector reads a per-node label, so each node is asked: the two others fail on affinity, the pinned one on GPU
    nodes = [gpu_node("h1"), gpu_node("h2"), gpu_node("h3")]
    fill = arrive(0, "fill", gpus=8)
    late = arrive(1, "late", gpus=1)
    for a in (fill, late):
        a.obj["spec"]["nodeSelector"] = {"kubernetes.io/hostname": "h1"}
    result, _ = simulate(nodes, [fill, late])
    assert result.outcomes[1].codes == ("InsufficientGPU",)
    assert result.outcomes[1].message == ("0/3 nodes are available: 2 node(s) didn't match Pod's node affinity/selector, "
                                          "1 Insufficient nvidia.com/gpu")
