"""Gang members end to end: the gang view inside gang blocks, the same domain for every member, re-planning after expiry."""

from __future__ import annotations

import pytest
from tests.policy.blocks.gang.gangs_builders import CONTRACT_GANG, bound, cluster, engine, kueue_member, kueue_workload, node, rack_of, request

# Rack r1 holds 16 free GPUs (the tightest for a 2 x 8 gang), rack r2 24.
NODES = (node("n1", "r1"), node("n2", "r1"), node("n3", "r2"), node("n4", "r2"), node("n5", "r2"))
TTL = 300.0  # GangPlanner's default
BIG_PODS = """
rule big-pods {
  mode warn
  for total_gpus > 8
  deny "one pod of {total_gpus}"
}
"""


def _held(eng, snap) -> dict:
    """Reservation id -> held slots in the engine's placement index."""
    return {rid: len(r.slots) for rid, r in eng.state_for(snap).planner().index.reservations.by_id.items()}


@pytest.mark.parametrize(
    "gpus, total, want_level, want_rule",
    [
        (8, 2, "rack", False),  # gang of 16 > 8: pinned although the pod itself has 8
        (4, 2, None, False),  # gang of 8: no topology required
        (4, 3, "rack", False),  # gang of 12
        (8, 1, None, False),  # a gang of one 8-GPU pod
        (12, 1, "rack", True),  # the pod alone is > 8: the rule outside the gang block sees it too
    ],
)
def test_inside_a_gang_block_a_member_is_judged_as_its_gang_elsewhere_as_one_pod(gpus, total, want_level, want_rule):
    eng = engine(CONTRACT_GANG + BIG_PODS)
    nodes = (*NODES, node("n6", "r3", gpus=16))
    d = eng.decide(request(kueue_member("m0", "g", gpus, total)), cluster(*nodes), 0.0)
    assert d.allowed
    assert (d.placement.level if d.placement else None) == want_level
    assert any(r.block == "rule big-pods" for r in d.reasons) is want_rule


def test_group_first_then_a_member_joins_its_rack_whatever_its_own_size():
    eng, snap = engine(), cluster(*NODES)
    g = eng.decide(request(kueue_workload("g", 2, 8)), snap, 0.0)
    assert g.allowed and g.placement.value == "r1" and _held(eng, snap) == {"train/g": 2}
    # This member asks 4 GPUs: its own gang view (2 x 4 = 8) requires no topology, yet its gang is placed.
    d = eng.decide(request(kueue_member("g-0", "g", 4, 2)), snap, 1.0, mutate=True)
    assert d.allowed and d.placement.value == "r1"
    assert rack_of(d.patch) == ["r1"]
    assert _held(eng, snap) == {"train/g": 2}  # joined the group's reservation, no second one


def test_members_first_then_the_group_object_gets_the_same_rack():
    eng, snap = engine(), cluster(*NODES)
    m = eng.decide(request(kueue_member("g-0", "g", 8, 2)), snap, 0.0, mutate=True)
    assert rack_of(m.patch) == ["r1"]
    assert eng.decide(request(kueue_member("g-0", "g", 8, 2)), snap, 0.0).placement.value == "r1"  # validating side
    g = eng.decide(request(kueue_workload("g", 2, 8)), snap, 1.0)
    assert g.allowed and g.placement.value == "r1" and _held(eng, snap) == {"train/g": 2}


def test_members_only_every_member_gets_the_first_members_rack():
    eng, snap = engine(), cluster(*NODES)
    racks = [rack_of(eng.decide(request(kueue_member(f"g-{i}", "g", 8, 2)), snap, float(i), mutate=True).patch) for i in range(2)]
    other = eng.decide(request(kueue_member("h-0", "h", 8, 2)), snap, 2.0, mutate=True)  # another gang: r1 is held
    assert racks == [["r1"], ["r1"]] and rack_of(other.patch) == ["r2"]


@pytest.mark.parametrize(
    "member_at, want_rack, want_reason",
    [
        (10.0, "r1", "placed earlier"),  # the group's reservation is alive: pinned to it
        (TTL + 1, "r2", "gang fits"),  # it expired and another gang took r1: planned afresh
    ],
)
def test_a_member_after_its_gangs_reservation_expired_is_planned_again(member_at, want_rack, want_reason):
    eng, snap = engine(), cluster(*NODES)
    assert eng.decide(request(kueue_workload("g", 2, 8)), snap, 0.0).placement.value == "r1"
    eng.decide(request(kueue_workload("other", 2, 8)), snap, member_at)  # r2 while g holds r1, else r1
    d, trace, _ = eng.explain(request(kueue_member("g-0", "g", 8, 2)), snap, member_at)
    assert d.placement.value == want_rack
    assert any(want_reason in text for _, _, text in trace)


def test_a_2x4_member_is_placed_as_its_whole_gang_not_a_gang_of_one():
    # Regression: a member was once placed as one pod, e.g. on a host with only 4 free GPUs, nodes={host: 1}.
    text = CONTRACT_GANG.replace("require topology fabric.rack  when total_gpus > 8", "require topology fabric.host")
    eng = engine(text)
    snap = cluster(node("half", "r1"), node("full", "r2"), bound("busy", "half", 4))
    d = eng.decide(request(kueue_member("p-0", "p", 4, 2)), snap, 0.0, mutate=True)
    assert d.allowed and d.placement.level == "host"
    assert (d.placement.value, dict(d.placement.nodes)) == ("full", {"full": 2})


def test_a_dry_run_member_sees_the_domain_but_holds_nothing_more():
    eng, snap = engine(), cluster(*NODES)
    eng.decide(request(kueue_workload("g", 2, 8)), snap, 0.0)
    planner = eng.state_for(snap).planner()
    before = planner.index.reservations.get("train/g").expires_at
    d = eng.decide(request(kueue_member("g-0", "g", 8, 2), dry_run=True), snap, 100.0, mutate=True)
    assert rack_of(d.patch) == ["r1"]
    assert planner.index.reservations.get("train/g").expires_at == before  # a dry run does not keep the gang alive


def _selector(text: str):
    from tests.policy.blocks.gang.gangs_builders import DECLS

    from lang import compile_policies

    policy, diags = compile_policies([("d.policy", DECLS), ("g.policy", f"gang g {{\n  for {text}\n  require min_members\n}}\n")])
    assert policy is not None, [d.message for d in diags]
    return policy.gangs[0].selector


@pytest.mark.parametrize(
    "selector, want_inline, want_own",
    [
        ('namespace == "train"', True, False),
        ("total_gpus > 8", False, True),
        ('namespace == "train" and total_gpus > 8', True, True),
        ('namespace == "train" or pods > 2', False, True),  # one conjunct reading the gang's size
        ('labels["a"] == "b" and gpus > 1', True, False),  # per-pod gpus are the same in both views
    ],
)
def test_split_selector_leaves_only_gang_size_conjuncts_to_the_check(selector, want_inline, want_own):
    from policy.blocks.gang import split_selector

    inline, own = split_selector(_selector(selector))
    assert (inline is not None, own is not None) == (want_inline, want_own)


def test_a_for_over_total_gpus_given_to_the_check_sees_the_gang_view():
    # policy/compiler/passes.py passes the selector inline today; this is the check's side of the hand-over.
    from policy.context import Context
    from policy.compiler.expr import compile_condition
    from policy.blocks.gang import make_check, split_selector
    from policy.subject.normalize import normalize

    sel = _selector('namespace == "train" and total_gpus > 8')
    _, own = split_selector(sel)
    policy_gang = engine().policy_set.gangs[0]
    check = make_check(policy_gang, compile_condition(own), (None, None), {}, "enforce")
    got = {}
    for total in (1, 2):
        ctx = Context(normalize(request(kueue_member("m", "g", 8, total)), None), None, 0.0, False)
        check(ctx)
        got[total] = ctx.blocks
    assert got == {1: [], 2: ["gang training"]}  # 8 GPUs alone: not selected; as a gang of 16: selected
