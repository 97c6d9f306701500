"""GangPlanner.recall / plan: one domain per gang key until the reservation expires; dry runs neither hold nor extend."""

from __future__ import annotations

import pytest
from tests.policy.placement.placement_builders import gang, index, node

from policy.placement import GangPlanner

TTL = 100.0


def _planner():
    # Rack r1: two 4-GPU nodes (8 free), rack r2: three (12 free); a 2 x 4 gang fits r1 tightest.
    nodes = [node("a1", rack="r1"), node("a2", rack="r1"), node("b1", rack="r2"), node("b2", rack="r2"), node("b3", rack="r2")]
    return GangPlanner(index(nodes), ttl=TTL)


@pytest.mark.parametrize(
    "dry_run, ask_at, want_recalled, want_expiry",
    [
        (False, 50.0, True, 150.0),  # alive: recalled; plan() pushes the hold to now + ttl
        (False, TTL, False, None),  # expired exactly at ttl: forgotten, nothing held
        (True, 50.0, False, None),  # a dry run was never remembered nor held
    ],
)
def test_recall_until_the_reservation_expires(dry_run, ask_at, want_recalled, want_expiry):
    p = _planner()
    first = p.plan("ns/g", gang(2, 4000, required="rack"), 0.0, dry_run=dry_run)
    assert first.fits and first.domain == "b1-r1"
    assert (p.recall("ns/g", ask_at) is not None) is want_recalled
    again = p.plan("ns/g", gang(2, 4000, required="rack"), ask_at)
    resv = p.index.reservations.get("ns/g")
    assert again.domain == "b1-r1" and resv is not None
    assert resv.expires_at == (want_expiry if want_expiry is not None else ask_at + TTL)


def test_after_expiry_the_gang_is_planned_again_where_there_is_room():
    p = _planner()
    assert p.plan("ns/g", gang(2, 4000, required="rack"), 0.0).domain == "b1-r1"
    assert p.plan("ns/other", gang(2, 4000, required="rack"), TTL + 1).domain == "b1-r1"  # g's hold expired first
    assert p.recall("ns/g", TTL + 1) is None
    assert p.plan("ns/g", gang(2, 4000, required="rack"), TTL + 1).domain == "b1-r2"


def test_a_dry_run_of_a_remembered_gang_does_not_extend_its_hold():
    p = _planner()
    p.plan("ns/g", gang(2, 4000, required="rack"), 0.0)
    assert p.plan("ns/g", gang(2, 4000, required="rack"), 60.0, dry_run=True).domain == "b1-r1"
    assert p.index.reservations.get("ns/g").expires_at == TTL
    assert p.recall("ns/g", TTL) is None  # it expired on schedule
