"""Gang blocks: require min_members, and `require topology` warning until placement is wired in."""

from __future__ import annotations

from dataclasses import replace

import jsonpatch
import pytest
from tests.policy.engine.engine_builders import cmp, field, gang, index, lit, pod, policy, workload

from lang import ir
from lang.span import Span
from policy.cluster.snapshot import ClusterSnapshot
from policy.engine import Engine

S = Span("t.policy", 1, 1, 1, 2)
TRAINING = cmp("==", index("labels", "acme.io/workload"), lit("training", ir.Type.STRING))
RACK = ir.TopologyRequirement("fabric", "rack", cmp(">", field("total_gpus"), lit(8000, ir.Type.GPU)), Span("t.policy", 5, 3, 5, 9))
BLOCK_ = ir.TopologyRequirement("fabric", "block", cmp(">", field("total_gpus"), lit(64000, ir.Type.GPU)), Span("t.policy", 6, 3, 6, 9))
BLOCK = gang("training", selector=TRAINING, topology=[RACK, BLOCK_])
LABELS = {"acme.io/workload": "training"}


def run(w, block=BLOCK):
    engine = Engine(policy(gangs=[block]))
    return engine.evaluate(engine.enrich(w), ClusterSnapshot(), 0.0)


@pytest.mark.parametrize(
    "min_members, want_codes",
    [(None, ["GangMinMembersMissing"]), (4, [])],
)
def test_require_min_members(min_members, want_codes):
    d = run(workload(kind="PodGroup", gpus=1000, pods=min_members or 1, labels=LABELS, gang="g", min_members=min_members))
    assert [r.code for r in d.denials] == want_codes


def _node(name: str, block: str, rack: str) -> dict:
    labels = {
        "kubernetes.io/hostname": name,
        "topology.acme.io/block": block,
        "topology.acme.io/rack": rack,
        "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
    }
    status = {"allocatable": {"nvidia.com/gpu": "8"}, "conditions": [{"type": "Ready", "status": "True"}]}
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}, "spec": {}, "status": status}


# One block, two racks of two 8-GPU nodes: a rack holds 16 GPUs, the block 32.
CLUSTER = [_node("n1", "b1", "r1"), _node("n2", "b1", "r1"), _node("n3", "b1", "r2"), _node("n4", "b1", "r2")]


def _group(pods: int, gpus: int = 8000):
    return workload(kind="PodGroup", gpus=gpus, pods=pods, labels=LABELS, gang="g", min_members=pods, obj={})


@pytest.mark.parametrize(
    "pods, on_unplaceable, want_allowed, want_codes, want_level",
    [
        (1, "deny", True, [], None),  # 8 GPUs: no topology required
        (2, "deny", True, [], "rack"),  # 16 GPUs fit one rack
        (3, "deny", False, ["GangUnplaceable"], None),  # 24 GPUs: no rack holds them
        (3, "warn", True, ["GangUnplaceable"], None),  # ... admitted with a warning
    ],
)
def test_topology_requirement_asks_placement(pods, on_unplaceable, want_allowed, want_codes, want_level):
    block = replace(BLOCK, on_unplaceable=on_unplaceable)
    engine = Engine(policy(gangs=[block]))
    d = engine.evaluate(engine.enrich(_group(pods)), ClusterSnapshot.from_objects(CLUSTER), 0.0)
    assert d.allowed is want_allowed
    assert [r.code for r in d.reasons] == want_codes
    assert (d.placement.level if d.placement else None) == want_level
    if on_unplaceable == "warn" and want_codes:
        assert d.warnings and "rack" in d.warnings[0]


def test_members_are_pinned_to_one_domain_with_a_reservation():
    # `require topology fabric.rack` without `when`: every member (8 GPUs each) is placed.
    engine = Engine(policy(gangs=[replace(BLOCK, topology=(replace(RACK, when=None),))]))
    snap = ClusterSnapshot.from_objects(CLUSTER)
    domains = []
    for name in ("m0", "m1"):
        obj = pod(name, "team-a", gpus=8, labels=LABELS)
        w = workload(name=name, gpus=8000, labels=LABELS, gang="g", min_members=2, obj=obj)
        d = engine.evaluate(engine.enrich(w), snap, 0.0, mutate=True)
        assert d.allowed and d.placement is not None
        patched = jsonpatch.apply_patch(obj, list(d.patch))
        terms = patched["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
        rack = [e for e in terms[0]["matchExpressions"] if e["key"] == "topology.acme.io/rack"]
        domains.append(rack[0]["values"])
        assert patched["metadata"]["annotations"]["allot.dev/reservation"] == "team-a/g"
    assert domains[0] == domains[1]


def test_offline_decisions_hold_nothing():
    engine = Engine(policy(gangs=[BLOCK]))
    snap = ClusterSnapshot.from_objects(CLUSTER)
    for _ in range(3):  # would exhaust both racks if each 16-GPU gang were held
        assert engine.evaluate(engine.enrich(_group(2)), snap, 0.0, reserve=False).placement is not None
    held = [engine.evaluate(engine.enrich(replace(_group(2), gang=f"g{i}")), snap, 0.0).allowed for i in range(3)]
    assert held == [True, True, False]


def test_without_a_cluster_placement_is_not_evaluated_and_warns():
    engine = Engine(policy(gangs=[BLOCK]))
    d = engine.evaluate(engine.enrich(_group(3)), None, 0.0)
    assert d.allowed and [(r.code, r.mode) for r in d.reasons] == [("PlacementNotEvaluated", "warn")]
    assert "placement not evaluated" in d.warnings[0]


def test_unselected_workload_is_not_a_gang_member():
    d = run(workload(gpus=1000, labels={}))
    assert d.allowed and d.blocks == ()


def test_warm_builds_the_placement_index_before_any_request():
    engine = Engine(policy(gangs=[BLOCK]))
    snap = ClusterSnapshot.from_objects(CLUSTER)
    engine.warm(snap)
    state = engine.state_for(snap)
    assert state._planner is not None and set(state._planner.index.nodes) == {"n1", "n2", "n3", "n4"}
    snap.apply("ADDED", _node("n5", "b1", "r3"))  # the warmed index follows events
    assert "n5" in state._planner.index.nodes


def test_cpu_pods_are_not_gang_members():
    # A job's CPU-only launcher pod carries the training label too; objects without GPUs pass.
    d = run(workload(gpus=0, labels=LABELS))
    assert d.allowed and d.reasons == () and d.blocks == ()
