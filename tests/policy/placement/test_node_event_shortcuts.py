"""The shortcuts node events take: NodeSpec read by position, and label counts forgotten on a fast path.

The hot path of a node event reads `NodeSpec` fields by position (a NamedTuple attribute
costs a descriptor call per read in CPython 3.11), so the field order is pinned here: a
field added or moved must fail this test, not silently shift what cordon, delete and add
read. `LabelCounts.add` forgets a node's labels with subscripts inside a `try` and falls
back to the general path for a value not a str or a pair not counted; a property compares
it with a plain recount, odd values included.
"""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from policy.placement.capacity import NodeSpec
from policy.placement.needs import LabelCounts

POSITIONS = ("name", "eligible", "why_not", "model", "gpus", "memory", "paths", "taints", "cpu", "ram", "pods", "labels")


def test_nodespec_fields_stay_where_node_events_read_them():
    assert NodeSpec._fields == POSITIONS
    spec = NodeSpec("n", True, None, "h100", 4, 80, (("b", "r"),), (), 1000, 2**30, 110, {"a": "1"})
    assert tuple(getattr(spec, f) for f in POSITIONS) == tuple(spec)


class Text(str):
    """A str subclass: counted under its text, like a plain str."""


VALUES = st.one_of(st.sampled_from(["a", "b", "c"]), st.integers(0, 2), st.sampled_from([Text("a"), Text("b")]), st.booleans())
LABELS = st.dictionaries(st.sampled_from(["pool", "zone", "kubernetes.io/hostname"]), VALUES, max_size=3)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(LABELS, st.sampled_from([1, 1, -1])), max_size=25))
def test_label_counts_equal_a_recount_whatever_the_values(steps):
    counts = LabelCounts()
    want: Counter = Counter()
    total = 0
    for labels, sign in steps:
        counts.add(labels, sign)
        total += sign
        for k, v in labels.items():
            want[(k, str(v))] += sign
    assert counts.total == total
    got = {(k, v): n for k, values in counts.by_key.items() for v, n in values.items() if n}  # (a forget-first pair may sit at 0)
    assert got == {kv: n for kv, n in want.items() if n}, "every count is the recount's, negative ones (more forgotten) too"
    for (k, v), n in want.items():
        assert counts.count(k, v) == n
        assert all(type(x) is str or isinstance(x, str) for x in counts.by_key[k])


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(LABELS, LABELS), min_size=1, max_size=6))
def test_label_counts_replaced_pair_by_pair_equal_a_forget_and_count(steps):
    """`replace` counts only the pairs that changed (values changed, keys added, keys gone): the same counts as forgetting
    the old labels and counting the new."""
    got, want = LabelCounts(), LabelCounts()
    for old, new in steps:
        got.add(old, +1)
        want.add(old, +1)
        got.replace(old, new)
        want.add(old, -1)
        want.add(new, +1)
        assert got.total == want.total
        assert {k: {v: n for v, n in vs.items() if n} for k, vs in got.by_key.items()} == {
            k: {v: n for v, n in vs.items() if n} for k, vs in want.by_key.items()}
