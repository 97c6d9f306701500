"""Gang blocks: require min_members, and `require topology` warning until placement is wired in."""

from __future__ import annotations

import pytest
from engine_builders import cmp, field, gang, index, lit, policy, workload

from lang import ir
from lang.span import Span
from policy.cluster import ClusterSnapshot
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


@pytest.mark.parametrize(
    "pods, want_level",
    [
        (2, None),  # 8 GPUs: no topology required
        (3, "rack"),  # 12 GPUs > 8
        (17, "block"),  # 68 GPUs > 64: the last matching requirement wins
    ],
)
def test_topology_requirement_warns_placement_not_evaluated(pods, want_level):
    d = run(workload(kind="PodGroup", gpus=4000, pods=pods, labels=LABELS, gang="g", min_members=pods))
    assert d.allowed, "placement not evaluated must not deny"
    codes = [(r.code, r.mode, r.data.get("level")) for r in d.reasons]
    assert codes == ([("PlacementNotEvaluated", "warn", want_level)] if want_level else [])
    if want_level:
        assert "placement not evaluated" in d.warnings[0]


def test_unselected_workload_is_not_a_gang_member():
    d = run(workload(gpus=1000, labels={}))
    assert d.allowed and d.blocks == ()
