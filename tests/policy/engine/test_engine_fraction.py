"""Fraction blocks: min/max share, VRAM floor, sharers per GPU (counted per node from live pods)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from engine_builders import fraction, policy, workload

from policy.cluster import ClusterSnapshot
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
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}, "status": {"allocatable": {"nvidia.com/gpu": str(gpus)}}}


def _sharer(name: str, node: str) -> dict:
    c = {"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpumem-percentage": "25", "nvidia.com/gpucores": "25"}}}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "inf"}, "spec": {"nodeName": node, "containers": [c]}, "status": {"phase": "Running"}}


PER_GPU = fraction("pack", per_gpu=2)


@pytest.mark.parametrize(
    "sharers, node, want_code",
    [
        (3, "n1", None),  # 3 + 1 <= 2 per GPU x 2 GPUs
        (4, "n1", "FractionSharersExceeded"),
        (4, None, None),  # unbound: n2 still has room
    ],
)
def test_per_gpu_counts_sharers_per_node(sharers, node, want_code):
    snap = ClusterSnapshot.from_objects([_node("n1", 2), _node("n2", 1)] + [_sharer(f"s{i}", "n1") for i in range(sharers)])
    engine = Engine(policy(fractions=[PER_GPU]))
    obj = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "new", "namespace": "inf"}, "spec": {"containers": []}}
    if node:
        obj["spec"]["nodeName"] = node
    d = engine.evaluate(workload(gpus=250, fraction=250, namespace="inf", obj=obj), snap, 0.0)
    assert [r.code for r in d.denials] == ([want_code] if want_code else [])
    if want_code:
        assert "counted per node from live pods" in d.denials[0].message


def test_per_gpu_full_everywhere_and_no_nodes():
    snap = ClusterSnapshot.from_objects([_node("n1", 1), _sharer("a", "n1"), _sharer("b", "n1")])
    engine = Engine(policy(fractions=[PER_GPU]))
    w = workload(gpus=250, fraction=250)
    assert [r.code for r in engine.evaluate(w, snap, 0.0).denials] == ["FractionSharersExceeded"]
    empty = Engine(policy(fractions=[PER_GPU])).evaluate(workload(gpus=250, fraction=250), ClusterSnapshot(), 0.0)
    assert empty.allowed and [r.code for r in empty.reasons] == ["PerGpuNotEvaluated"] and empty.warnings
