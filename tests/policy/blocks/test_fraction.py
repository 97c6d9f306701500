"""Fraction blocks: min/max share, VRAM floor, sharers per GPU (counted per node from live pods)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from tests.policy.engine.engine_builders import fraction, policy, workload

from policy.cluster.snapshot import ClusterSnapshot
from policy.engine import Engine

Gi = 2**30
BLOCK = fraction("shared", min=100, max=500, memory_floor=10 * Gi)


@dataclass
class Case:
    name: str
    share: int | None
    memory: int | None
    want_codes: list


CASES = [
    Case("inside the bounds", 250, 20 * Gi, []),
    Case("exactly min", 100, 10 * Gi, []),
    Case("exactly max", 500, 40 * Gi, []),
    Case("below min", 99, 10 * Gi, ["FractionOutOfRange"]),
    Case("above max", 501, 40 * Gi, ["FractionOutOfRange"]),
    Case("under the VRAM floor", 250, 10 * Gi - 1, ["FractionMemoryBelowFloor"]),
    Case("memory unknown", 250, None, ["FractionMemoryUnknown"]),
    Case("not shared: block does not apply", None, None, []),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_fraction_bounds_and_floor(case: Case):
    engine = Engine(policy(fractions=[BLOCK]))
    w = workload(gpus=case.share or 1000, fraction=case.share, gpu_memory=case.memory)
    d = engine.evaluate(engine.enrich(w), ClusterSnapshot(), 0.0)
    assert [r.code for r in d.denials] == case.want_codes
    assert ("fraction shared" in d.blocks) is (case.share is not None)


def test_memory_is_implied_by_model_times_share():
    # 0.25 of an l4 (24Gi) = 6Gi < 10Gi floor.
    engine = Engine(policy(fractions=[BLOCK]))
    w = engine.enrich(workload(gpus=250, fraction=250, gpu_product="NVIDIA-L4"))
    assert w.gpu_model == "l4" and w.gpu_memory == 6 * Gi
    (r,) = engine.evaluate(w, ClusterSnapshot(), 0.0).denials
    assert r.message == "shared: GPU memory 6Gi < floor 10Gi"


def _node(name: str, gpus: int) -> dict:
    labels = {"nvidia.com/gpu.product": "NVIDIA-L4", "kubernetes.io/hostname": name}
    status = {"allocatable": {"nvidia.com/gpu": str(gpus)}, "conditions": [{"type": "Ready", "status": "True"}]}
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}, "spec": {}, "status": status}


def _sharer(name: str, node: str) -> dict:
    """A live HAMi pod holding a quarter of one GPU on `node`."""
    c = {"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "25", "nvidia.com/gpucores": "25"}}}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "inf"}, "spec": {"nodeName": node, "containers": [c]}, "status": {"phase": "Running"}}


PER_GPU = fraction("pack", per_gpu=2)


def _new(node: str | None):
    obj = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "new", "namespace": "inf"}, "spec": {"containers": []}}
    if node:
        obj["spec"]["nodeName"] = node
    return workload(gpus=250, fraction=250, namespace="inf", obj=obj)


@pytest.mark.parametrize(
    "n1_sharers, n2_sharers, node, want_code",
    [
        (1, 0, "n1", None),  # 1 + 1 <= 2 on n1's single GPU
        (2, 0, "n1", "FractionSharersExceeded"),  # 3 > 2, though the GPU has 0.5 left
        (2, 0, None, None),  # unbound: n2's GPU is free
        (2, 2, None, "FractionSharersExceeded"),  # every GPU that has room has 2 sharers
        (4, 4, None, None),  # both GPUs full: not a per_gpu matter, the scheduler waits
    ],
)
def test_per_gpu_counts_sharers_per_physical_gpu(n1_sharers, n2_sharers, node, want_code):
    objs = [_node("n1", 1), _node("n2", 1)]
    objs += [_sharer(f"a{i}", "n1") for i in range(n1_sharers)] + [_sharer(f"b{i}", "n2") for i in range(n2_sharers)]
    engine = Engine(policy(fractions=[PER_GPU]))
    d = engine.evaluate(engine.enrich(_new(node)), ClusterSnapshot.from_objects(objs), 0.0)
    assert [r.code for r in d.denials] == ([want_code] if want_code else [])
    if want_code and node:
        assert d.denials[0].data["sharers"] == [2]


def test_per_gpu_without_gpu_nodes_warns():
    for snap in (ClusterSnapshot(), None):
        d = Engine(policy(fractions=[PER_GPU])).evaluate(_new(None), snap, 0.0)
        assert d.allowed and [r.code for r in d.reasons] == ["PerGpuNotEvaluated"] and d.warnings
