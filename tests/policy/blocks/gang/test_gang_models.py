"""Gangs know their GPUs: on a mixed H100/L4 cluster a gang is planned on its members' model, never on another pool.

Problem 2 of issue 11: H100 racks plus one L4 rack, a coscheduling PodGroup (minMember
9, minResources 72 GPUs) under a rack `require topology … on unplaceable deny`. The L4
rack holds 72 GPUs, yet the members are H100 pods.
"""

from __future__ import annotations

import dataclasses

import pytest
from tests.policy.blocks.gang.gangs_builders import L4, cluster, engine, member, node, podgroup, rack_of, request

SMALL_H100 = tuple(node(f"h{r}-{i}", f"r{r}") for r in range(2, 5) for i in range(8))  # H100 racks of 64 GPUs: too small
BIG_H100 = tuple(node(f"h1-{i}", "r1") for i in range(12))  # an H100 rack of 96 GPUs
L4_RACK = tuple(node(f"l9-{i}", "r9", product=L4) for i in range(10))  # the L4 rack: 80 GPUs, the tightest that holds 72


def _policy(models: str, on: str) -> str:
    return f"""
gang training {{
  for labels["acme.io/workload"] == "training"
  {models}
  require topology fabric.rack
  on unplaceable {on}
}}
"""


@dataclasses.dataclass(frozen=True)
class Case:
    name: str
    models: str = ""
    on: str = "deny"
    big_h100: bool = True
    want_group_allowed: bool = True
    want_group_codes: tuple = ()
    want_group_rack: str | None = None
    want_member_allowed: bool = True
    want_member_codes: tuple = ()
    want_member_rack: str | None = "r1"


CASES = [
    Case("model unknown: the group is not yet placeable, judged by on unplaceable deny", want_group_allowed=False,
         want_group_codes=("GangNotYetPlaceable",)),
    Case("model unknown under warn: admitted with the reason; the first H100 member plans on H100", on="warn",
         want_group_codes=("GangNotYetPlaceable",)),
    Case("no H100 rack holds the gang: the member is denied, never sent to the L4 rack", on="warn", big_h100=False,
         want_group_codes=("GangNotYetPlaceable",), want_member_codes=("GangUnplaceable",), want_member_rack=None),
    Case("models h100: the group itself is placed on H100", models="models h100", want_group_rack="r1"),
    Case("models h100 and no H100 rack big enough: denied, not placed on L4", models="models h100", big_h100=False,
         want_group_allowed=False, want_group_codes=("GangUnplaceable",), want_member_allowed=False,
         want_member_codes=("GangUnplaceable",), want_member_rack=None),
    Case("models h100, l4: the group may take the L4 rack; its first H100 member re-plans on H100", models="models h100, l4",
         want_group_rack="r9"),
    Case("models l4: an H100 member is not allowed", models="models l4", want_group_rack="r9", want_member_allowed=False,
         want_member_codes=("GangModelNotAllowed",), want_member_rack=None),
]


def _codes(d) -> tuple:
    return tuple(r.code for r in d.reasons if r.block == "gang training")


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_a_gang_is_placed_on_its_members_model(case: Case):
    eng = engine(_policy(case.models, case.on))
    snap = cluster(*(BIG_H100 if case.big_h100 else ()), *SMALL_H100, *L4_RACK)
    group = podgroup("pg", 9, gpus=72)
    g = eng.decide(request(group), snap, 0.0)
    assert g.allowed is case.want_group_allowed, g.reasons
    assert _codes(g) == case.want_group_codes
    assert (g.placement.value if g.placement else None) == case.want_group_rack
    if case.want_group_codes == ("GangNotYetPlaceable",):
        assert "not yet placeable" in g.reasons[0].message and "h100, l4" in g.reasons[0].message
    snap.apply("ADDED", group)
    m = eng.decide(request(member("pg-0", "pg", 8)), snap, 1.0, mutate=True)
    assert m.allowed is case.want_member_allowed, m.reasons
    assert _codes(m) == case.want_member_codes
    assert rack_of(m.patch) == ([case.want_member_rack] if case.want_member_rack else None)


def test_a_re_planned_gang_holds_h100_slots_only():
    eng = engine(_policy("models h100, l4", "deny"))
    snap = cluster(*BIG_H100, *SMALL_H100, *L4_RACK)
    group = podgroup("pg", 9, gpus=72)
    eng.decide(request(group), snap, 0.0)  # validating side: holds 9 slots on the L4 rack
    index = eng.state_for(snap).planner().index
    assert {n for n, _d in index.reservations.get("train/pg").slots.values()} <= {n["metadata"]["name"] for n in L4_RACK}
    snap.apply("ADDED", group)
    m = eng.decide(request(member("pg-0", "pg", 8)), snap, 1.0)  # validating side of the first member
    assert m.allowed and m.placement.value == "r1"
    held = index.reservations.get("train/pg").slots.values()
    assert len(held) == 9 and {n for n, _d in held} <= {n["metadata"]["name"] for n in BIG_H100}


def test_the_gang_view_uses_min_resources_over_the_missing_members():
    """A member of a PodGroup with minResources 72 over 9 is judged as 72 GPUs even before the others arrive."""
    eng = engine(_policy("models h100", "deny") + 'rule size {\n  mode warn\n  for total_gpus > 8\n  deny "{total_gpus}"\n}\n')
    snap = cluster(*BIG_H100, *L4_RACK)
    group = podgroup("pg", 9, gpus=72)
    snap.apply("ADDED", group)
    m = eng.decide(request(member("pg-0", "pg", 8)), snap, 0.0)
    assert m.allowed and m.placement.value == "r1" and m.placement.nodes and sum(m.placement.nodes.values()) == 9


@pytest.mark.parametrize(
    "selector, want_codes",
    [
        ({"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}, []),
        ({"nvidia.com/gpu.product": L4}, ["GangModelNotAllowed"]),
        (None, []),  # a template naming no product: any model, the gang is planned on h100 only
    ],
)
def test_a_group_objects_template_model_is_checked_against_models_without_cluster_state(selector, want_codes):
    """No cluster state (no evaluator): the model check still maps the product to the declared name."""
    eng = engine(_policy("models h100", "warn"))
    tmpl = {"spec": {"containers": [{"name": "w", "resources": {"limits": {"nvidia.com/gpu": "8"}}}]}}
    if selector:
        tmpl["spec"]["nodeSelector"] = selector
    wl = {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "Workload",
          "metadata": {"name": "wl", "namespace": "train", "labels": {"acme.io/workload": "training"}},
          "spec": {"queueName": "q", "podSets": [{"name": "w", "count": 2, "template": tmpl}]}}
    d = eng.decide(request(wl), None, 0.0)
    assert [r.code for r in d.reasons if r.mode == "enforce"] == want_codes
