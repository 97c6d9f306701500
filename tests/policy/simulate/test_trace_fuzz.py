"""Whatever text a trace holds, reading it gives a trace or one TraceError, never another exception."""

import json

from hypothesis import given, settings, strategies as st

from policy.simulate.openb import openb_nodes, openb_pods
from policy.simulate.trace import TraceError, parse_allot, parse_decision_log

from test_traces import NODES_CSV, PODS_CSV

JSONISH = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
                       lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.sampled_from(["at", "object", "delete", "duration", "user", "groups", "metadata", "name", "spec", "kind"]), inner, max_size=5),
                       max_leaves=12)


def _reads(fn, text):
    try:
        fn(text)
    except TraceError as exc:
        assert str(exc) and "\n" not in str(exc)


@settings(max_examples=150, deadline=None)
@given(st.lists(JSONISH, max_size=4))
def test_allot_records_never_crash(records):
    _reads(lambda t: parse_allot(t, "t"), "\n".join(json.dumps(r) for r in records))
    _reads(lambda t: parse_decision_log(t.splitlines(), "t"), "\n".join(json.dumps(r) for r in records))


@settings(max_examples=150, deadline=None)
@given(st.text(max_size=200))
def test_any_text_never_crashes(text):
    _reads(lambda t: parse_allot(t, "t"), text)
    _reads(lambda t: openb_pods(t, "p"), text)
    _reads(lambda t: openb_nodes(t, "n"), text)


@settings(max_examples=150, deadline=None)
@given(st.integers(0, len(PODS_CSV) - 1), st.text(alphabet=",|-x0123456789\n", max_size=6))
def test_mangled_openb_rows_never_crash(at, insert):
    _reads(lambda t: openb_pods(t, "p"), PODS_CSV[:at] + insert + PODS_CSV[at:])
    _reads(lambda t: openb_nodes(t, "n"), NODES_CSV[: at % len(NODES_CSV)] + insert + NODES_CSV[at % len(NODES_CSV):])
