"""Properties of `set_counts` (per-set minimums, then the cheapest pods): order-free, within bounds, exactly the minimum."""

from hypothesis import given, settings
from hypothesis import strategies as st

from policy.placement import GangRequest
from policy.placement.query import set_counts
from policy.subject.model import PodSet

SETS = st.lists(
    st.tuples(st.integers(0, 6), st.sampled_from([0, 250, 1000, 2000, 8000]), st.one_of(st.none(), st.integers(0, 6))),
    min_size=1, max_size=4,
)


def _gang(sets, minimum, order):
    pod_sets = tuple(PodSet(f"s{i}", c, g, min_count=None if m is None else min(m, c)) for i, (c, g, m) in enumerate(sets))
    return GangRequest(tuple(pod_sets[i] for i in order), min_count=minimum)


@settings(max_examples=200, deadline=None)
@given(SETS, st.one_of(st.none(), st.integers(1, 30)), st.randoms(use_true_random=False))
def test_set_counts_do_not_depend_on_the_order_sets_are_listed(sets, minimum, rnd):
    order = list(range(len(sets)))
    shuffled = order[:]
    rnd.shuffle(shuffled)
    base = dict(zip((ps.name for ps in _gang(sets, minimum, order).pod_sets), set_counts(_gang(sets, minimum, order))))
    again = _gang(sets, minimum, shuffled)
    assert dict(zip((ps.name for ps in again.pod_sets), set_counts(again))) == base


@settings(max_examples=200, deadline=None)
@given(SETS, st.one_of(st.none(), st.integers(1, 30)))
def test_set_counts_keep_each_sets_minimum_and_meet_the_gangs(sets, minimum):
    gang = _gang(sets, minimum, range(len(sets)))
    counts = set_counts(gang)
    floors = [ps.min_count if ps.min_count is not None else (ps.count if minimum is None else 0) for ps in gang.pod_sets]
    assert all(c >= f for c, f in zip(counts, floors))
    if minimum is not None:
        assert sum(counts) == max(minimum, sum(f for f in floors))
    else:
        assert counts == [ps.count if ps.min_count is None else ps.min_count for ps in gang.pod_sets]
