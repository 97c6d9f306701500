"""The JSONPatch applier behind `patched` expectations (RFC 6902 ops, RFC 6901 escaping)."""

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from policy.testing.patch import PatchError, apply_patch

BASE = {"metadata": {"labels": {"a": "1"}}, "spec": {"containers": [{"name": "m"}]}}

CASES = [
    # (name, ops, want_subset_path, want_value)
    ("add escaped key", [{"op": "add", "path": "/metadata/labels/acme.io~1vram-floor", "value": "40Gi"}],
     ("metadata", "labels", "acme.io/vram-floor"), "40Gi"),
    ("tilde escape", [{"op": "add", "path": "/metadata/labels/a~0b", "value": "x"}], ("metadata", "labels", "a~b"), "x"),
    ("replace", [{"op": "replace", "path": "/metadata/labels/a", "value": "2"}], ("metadata", "labels", "a"), "2"),
    ("append to list", [{"op": "add", "path": "/spec/containers/-", "value": {"name": "s"}}], ("spec", "containers", 1), {"name": "s"}),
    ("insert into list", [{"op": "add", "path": "/spec/containers/0", "value": {"name": "s"}}], ("spec", "containers", 1), {"name": "m"}),
    ("copy", [{"op": "copy", "from": "/metadata/labels/a", "path": "/metadata/labels/b"}], ("metadata", "labels", "b"), "1"),
    ("move", [{"op": "move", "from": "/metadata/labels/a", "path": "/metadata/labels/c"}], ("metadata", "labels", "c"), "1"),
]


def _at(doc, path):
    for p in path:
        doc = doc[p]
    return doc


@pytest.mark.parametrize("name,ops,want_path,want_value", CASES, ids=[c[0] for c in CASES])
def test_apply(name, ops, want_path, want_value):
    got = apply_patch(BASE, ops)
    assert _at(got, want_path) == want_value
    assert BASE["metadata"]["labels"] == {"a": "1"}  # the original is never modified


BAD = [
    ("remove missing", [{"op": "remove", "path": "/metadata/labels/zz"}]),
    ("replace missing", [{"op": "replace", "path": "/spec/nope", "value": 1}]),
    ("add under missing parent", [{"op": "add", "path": "/metadata/annotations/x", "value": "1"}]),
    ("index out of range", [{"op": "add", "path": "/spec/containers/5", "value": {}}]),
    ("failed test op", [{"op": "test", "path": "/metadata/labels/a", "value": "9"}]),
    ("unknown op", [{"op": "merge", "path": "/x"}]),
    ("pointer without slash", [{"op": "add", "path": "metadata", "value": 1}]),
]


@pytest.mark.parametrize("name,ops", BAD, ids=[b[0] for b in BAD])
def test_apply_rejects(name, ops):
    with pytest.raises(PatchError):
        apply_patch(BASE, ops)


def test_remove_from_list_then_object():
    got = apply_patch(BASE, [{"op": "remove", "path": "/spec/containers/0"}, {"op": "remove", "path": "/metadata/labels/a"}])
    assert got == {"metadata": {"labels": {}}, "spec": {"containers": []}}

EXAMPLES = int(os.environ.get("ALLOT_FUZZ_EXAMPLES", "60"))
KEYS = st.text(alphabet="ab/~01.-", min_size=1, max_size=6)


def _escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


@settings(max_examples=EXAMPLES, deadline=None)
@given(labels=st.dictionaries(KEYS, st.text(max_size=3), max_size=4), key=KEYS, value=st.text(max_size=5))
def test_add_then_remove_an_escaped_key_round_trips(labels, key, value):
    doc = {"metadata": {"labels": dict(labels)}}
    path = "/metadata/labels/" + _escape(key)
    added = apply_patch(doc, [{"op": "add", "path": path, "value": value}])
    assert added["metadata"]["labels"] == {**labels, key: value}
    removed = apply_patch(added, [{"op": "remove", "path": path}])
    assert removed["metadata"]["labels"] == {k: v for k, v in labels.items() if k != key}
