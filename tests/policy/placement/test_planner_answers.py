"""GangPlanner.propose re-uses a query answer only while the index is unchanged: any change a query reads asks again."""

from __future__ import annotations

import pytest
from tests.policy.placement.placement_builders import gang, index, node, pod

from policy.placement import GangPlanner


def _planner():
    # Rack r1: two 4-GPU nodes (8 free), rack r2: three (12 free); a 2 x 4 gang fits r1 tightest.
    nodes = [node("a1", rack="r1"), node("a2", rack="r1"), node("b1", rack="r2"), node("b2", rack="r2"), node("b3", rack="r2")]
    return GangPlanner(index(nodes), ttl=100.0)


def _bind_on_a1(p):
    p.index.apply_pod("ADDED", pod("x", "a1", gpus=1))


def _cordon_a2(p):
    p.index.apply_node("MODIFIED", node("a2", rack="r1", cordoned=True))


def _hold_r1_for_another_gang(p):
    p.plan("ns/other", gang(2, 4000, required="rack"), 0.0)


def _heartbeat_a1(p):
    p.index.apply_node("MODIFIED", node("a1", rack="r1"))  # same spec: placement reads nothing new


@pytest.mark.parametrize(
    "change, want_domain, want_same_object",
    [
        (None, "b1-r1", True),
        (_heartbeat_a1, "b1-r1", True),
        (_bind_on_a1, "b1-r2", False),  # r1 no longer holds 2 x 4
        (_cordon_a2, "b1-r2", False),
        (_hold_r1_for_another_gang, "b1-r2", False),
    ],
)
def test_an_answer_is_reused_only_while_the_index_is_unchanged(change, want_domain, want_same_object):
    p = _planner()
    first = p.propose("ns/g", gang(2, 4000, required="rack"), 0.0)
    assert first.fits and first.domain == "b1-r1"
    assert p.index.reservations.get("ns/g") is None  # proposing holds nothing
    if change is not None:
        change(p)
    again = p.propose("ns/g", gang(2, 4000, required="rack"), 0.0)
    assert again.domain == want_domain
    assert (again is first) is want_same_object


def test_a_different_gang_shape_is_asked_afresh():
    p = _planner()
    assert p.propose("ns/g", gang(2, 4000, required="rack"), 0.0).domain == "b1-r1"
    assert p.propose("ns/g", gang(3, 4000, required="rack"), 0.0).domain == "b1-r2"


def test_hold_reserves_a_new_answer_and_extends_a_remembered_one():
    p = _planner()
    result = p.propose("ns/g", gang(2, 4000, required="rack"), 0.0)
    p.hold("ns/g", result, 0.0)
    assert p.index.reservations.get("ns/g").expires_at == 100.0
    recalled = p.propose("ns/g", gang(2, 4000, required="rack"), 40.0)
    assert recalled is result
    p.hold("ns/g", recalled, 40.0)
    assert p.index.reservations.get("ns/g").expires_at == 140.0 and len(p.index.reservations.get("ns/g").slots) == 2
