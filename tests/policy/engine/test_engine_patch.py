"""PatchBuilder: ops apply cleanly to the original object (checked with the jsonpatch library)."""

from __future__ import annotations

import copy
import os

import jsonpatch
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from policy.patch import PatchBuilder, escape, pointer

EXAMPLES = int(os.environ.get("ALLOT_FUZZ_EXAMPLES", "200"))
KEYS = st.sampled_from(["team", "acme.io/vram-floor", "a~b", "x/y~z", "allot.dev/reservation"])
objects = st.fixed_dictionaries(
    {"spec": st.fixed_dictionaries({}, optional={"priority": st.integers(0, 10)})},
    optional={
        "metadata": st.fixed_dictionaries(
            {}, optional={"labels": st.dictionaries(KEYS, st.text(max_size=3), max_size=2), "annotations": st.dictionaries(KEYS, st.text(max_size=3), max_size=2)}
        )
    },
)
sets = st.lists(
    st.tuples(st.sampled_from([("metadata", "labels"), ("metadata", "annotations"), ("spec",)]), KEYS, st.text(max_size=3)),
    max_size=6,
)


@settings(max_examples=EXAMPLES, deadline=None)
@given(objects, sets)
def test_ops_apply_cleanly_and_set_every_value(obj, changes):
    original = copy.deepcopy(obj)
    builder = PatchBuilder(obj)
    want = copy.deepcopy(obj)
    for parent, key, value in changes:
        builder.set(parent + (key,), value)
        node = want
        for part in parent:
            node = node.setdefault(part, {})
        node[key] = value
    patched = jsonpatch.apply_patch(obj, list(builder.ops()))
    assert obj == original, "building a patch must not touch the object"
    assert patched == want


@pytest.mark.parametrize(
    "key, want",
    [("acme.io/vram-floor", "acme.io~1vram-floor"), ("a~b", "a~0b"), ("~/", "~0~1"), ("x~1", "x~01")],
)
def test_rfc6901_escaping(key, want):
    assert escape(key) == want
    assert pointer(("metadata", "labels", key)) == "/metadata/labels/" + want


def test_setting_the_same_value_is_no_op():
    builder = PatchBuilder({"metadata": {"labels": {"team": "a"}}})
    assert builder.set(("metadata", "labels", "team"), "a") is False
    assert builder.ops() == ()


@pytest.mark.parametrize(
    "obj, want_ops",
    [
        ({"spec": {"priority": 0}}, [("add", "/spec/a"), ("replace", "/spec/priority")]),
        ({"spec": {"priority": 5, "a": 1}}, []),
        ({}, [("add", "/spec")]),
    ],
)
def test_set_members_matches_set(obj, want_ops):
    builder = PatchBuilder(obj)
    builder.set_members(("spec",), {"a": 1, "priority": 5})
    assert [(op["op"], op["path"]) for op in builder.ops()] == want_ops
    assert jsonpatch.apply_patch(obj, list(builder.ops()))["spec"] == {**obj.get("spec", {}), "a": 1, "priority": 5}
