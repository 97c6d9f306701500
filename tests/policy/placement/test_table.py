"""Table tests of the placement evaluator: eligibility, models, fractions, levels, reasons."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import pytest
from tests.policy.placement.placement_builders import H100, L4, gang, index, node, pod

from policy.placement import GangRequest

GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
MAINT_TAINT = {"key": "maintenance", "value": "true", "effect": "NoSchedule"}
SOFT_TAINT = {"key": "maintenance", "value": "true", "effect": "PreferNoSchedule"}


@dataclass
class Case:
    name: str
    nodes: list
    gang: GangRequest
    pods: list = field(default_factory=list)
    want_fits: bool = True
    want_domain: object = ...  # ... = not checked; None = the whole topology
    want_nodes: dict | None = None
    want_codes: tuple = ()
    want_in_reason: tuple = ()


CASES = [
    Case("cordoned node is skipped", [node("n1", cordoned=True), node("n2")], gang(4, required="host"),
         want_domain="n2", want_nodes={"n2": 4}),
    Case("NotReady node is skipped", [node("n1", ready=False), node("n2")], gang(4, required="host"),
         want_domain="n2"),
    Case("tainted node is skipped", [node("n1", taints=[MAINT_TAINT]), node("n2")], gang(4, required="host"),
         want_domain="n2"),
    Case("a tainted pool is used by a gang that tolerates it (Equal)",
         [node("n1", taints=[MAINT_TAINT]), node("n2", gpus=8, taints=[MAINT_TAINT])],
         replace(gang(4, required="host"), tolerations=({"key": "maintenance", "operator": "Equal", "value": "true", "effect": "NoSchedule"},)),
         want_domain="n1"),
    Case("Exists with no key tolerates every taint",
         [node("n1", taints=[MAINT_TAINT])], replace(gang(4, required="host"), tolerations=({"operator": "Exists"},)),
         want_domain="n1"),
    Case("a toleration of another value does not",
         [node("n1", taints=[MAINT_TAINT])],
         replace(gang(1, required="host"), tolerations=({"key": "maintenance", "value": "false"},)),
         want_fits=False, want_codes=("UntoleratedTaints",), want_in_reason=("maintenance=true:NoSchedule (1)",)),
    Case("tolerating gangs mix tainted and plain nodes of the model",
         [node("n1", taints=[MAINT_TAINT]), node("n2")],
         replace(gang(8, required="rack"), tolerations=({"key": "maintenance", "operator": "Exists"},)),
         want_nodes={"n1": 4, "n2": 4}),
    Case("the GPU taint is tolerated (ExtendedResourceToleration)", [node("n1", taints=[GPU_TAINT])],
         gang(4, required="host"), want_domain="n1"),
    Case("PreferNoSchedule does not exclude", [node("n1", taints=[SOFT_TAINT])], gang(1, required="host"),
         want_domain="n1"),
    Case("every node excluded: reason counts them",
         [node("n1", cordoned=True), node("n2", ready=False), node("n3", taints=[MAINT_TAINT])],
         gang(1, required="host"), want_fits=False,
         want_codes=("InsufficientCapacity", "NoDomainFits", "UntoleratedTaints", "ExcludedNodes"),
         want_in_reason=("room for 0 of 1",)),
    Case("mixed models: asks for l4, gets the l4 node",
         [node("h", gpus=8, product=H100), node("l", gpus=4, product=L4)], gang(2, product=L4, required="host"),
         want_domain="l"),
    Case("mixed models: not enough of the asked model",
         [node("h", gpus=8, product=H100), node("l", gpus=4, product=L4)], gang(5, product=L4, required="host"),
         want_fits=False, want_in_reason=("room for 4 of 5 pods of 1 GPU of l4",)),
    Case("mixed models in one rack: the pod goes to the asked model's node, not the tighter other one",
         [node("l", gpus=2, product=L4), node("h", gpus=1, product=H100)], gang(1, product=L4, required="rack"),
         want_nodes={"l": 1}),
    Case("mixed models in one rack: model-free gangs use both",
         [node("l", gpus=2, product=L4), node("h", gpus=1, product=H100)], gang(3, required="rack"),
         want_nodes={"l": 2, "h": 1}),
    Case("fractions: four quarters share one GPU", [node("n1", gpus=1)], gang(4, 250, fraction=250, required="host"),
         want_nodes={"n1": 4}),
    Case("fractions: a fifth quarter does not fit on one GPU", [node("n1", gpus=1)],
         gang(5, 250, fraction=250, required="host"), want_fits=False),
    Case("fractions: per_gpu caps sharers", [node("n1", gpus=1)], gang(3, 250, fraction=250, per_gpu=2, required="host"),
         want_fits=False),
    Case("fractions: memory per slice bounds sharers (80Gi / 30Gi = 2)", [node("n1", gpus=1, memory_mib=81920)],
         gang(3, 100, fraction=100, memory=30 * 2**30, required="host"), want_fits=False),
    Case("fractions pack onto the half-used device first", [node("n1", gpus=2)],
         gang(2, 250, fraction=250, required="host"), pods=[pod("s1", "n1", share="0.25")], want_nodes={"n1": 2}),
    Case("whole GPUs skip a device that is shared", [node("n1", gpus=2)], gang(2, required="host"),
         pods=[pod("s1", "n1", share="0.25")], want_fits=False, want_in_reason=("fits 1 of 2",)),
    Case("tightest rack wins (BestFit)",
         [node("a1", rack="r1"), node("a2", rack="r1"), node("b1", rack="r2")], gang(3, required="rack"),
         want_domain="b1-r2", want_nodes={"b1": 3}),
    Case("gang larger than any rack",
         [node("a1", rack="r1"), node("b1", rack="r2")], gang(6, required="rack"),
         want_fits=False, want_codes=("NoDomainFits",), want_in_reason=("fits 4 of 6", "the whole topology fits 8")),
    Case("preferred host falls back to rack",
         [node("a1", rack="r1"), node("a2", rack="r1"), node("c1", block="b2")], gang(6, preferred="host", required="block"),
         want_domain="b1-r1", want_in_reason=("climbed to rack",)),
    Case("preferred without required may end at the whole topology",
         [node("a1"), node("c1", block="b2")], gang(8, preferred="rack"), want_domain=None,
         want_nodes={"a1": 4, "c1": 4}),
    Case("min_count: the minimum fits even if the whole set does not",
         [node("a1")], gang(6, min_count=4, required="host"), want_nodes={"a1": 4}),
    Case("bound pods use capacity", [node("a1"), node("a2")], gang(4, required="host"),
         pods=[pod("p1", "a1", gpus=1)], want_domain="a2"),
    Case("finished pods free capacity", [node("a1")], gang(4, required="host"),
         pods=[pod("p1", "a1", gpus=4, phase="Succeeded")], want_domain="a1"),
    Case("unbound pods use nothing", [node("a1")], gang(4, required="host"), pods=[pod("p1", None, gpus=4)],
         want_domain="a1"),
    Case("unknown level", [node("a1")], gang(1, required="zone"), want_fits=False, want_codes=("UnknownLevel",)),
    Case("unknown topology", [node("a1")], gang(1, topology="nope"), want_fits=False, want_codes=("UnknownTopology",)),
    Case("no GPUs asked", [node("a1")], gang(1, 0), want_fits=False, want_codes=("NothingToPlace",)),
    Case("2 GPUs per pod: 4-GPU hosts take 2 each", [node("a1"), node("a2")], gang(3, 2000, required="rack"),
         want_nodes={"a1": 2, "a2": 1}),
    Case("3 GPUs per pod (no exact bucket: slow path)", [node("a1"), node("a2", rack="r2", gpus=8)],
         gang(2, 3000, required="rack"), want_domain="b1-r2"),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_table(case):
    idx = index(case.nodes, case.pods)
    got = idx.query(case.gang)
    assert got.fits is case.want_fits, got.reason
    if case.want_fits:
        if case.want_domain is not ...:
            assert got.domain == case.want_domain
        if case.want_nodes is not None:
            assert dict(got.nodes) == case.want_nodes
        wanted = case.gang.min_count or sum(ps.count for ps in case.gang.pod_sets)
        assert sum(got.nodes.values()) == wanted
    codes = tuple(r.code for r in got.reasons)
    for code in case.want_codes:
        assert code in codes, codes
    text = " | ".join(r.message for r in got.reasons)
    for part in case.want_in_reason:
        assert part in text, text
