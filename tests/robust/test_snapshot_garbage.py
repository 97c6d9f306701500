"""Malformed cluster objects: a located SnapshotError on load, a skipped and counted event on watch, indexes intact."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from policy.cluster.snapshot import ClusterSnapshot, SnapshotError
from tests.policy.builders import node, pod, podgroup
from tests.robust.robust_objects import EVENTS, garbage_object, spoiled

EXAMPLES = int(os.environ.get("ALLOT_FUZZ_EXAMPLES", "150"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@dataclass
class ShapeCase:
    name: str
    obj: dict
    want_error: str | None


SHAPES = [
    ShapeCase("nodeName list", spoiled(pod("x", gpus="1"), ("spec", "nodeName"), ["n1"]),
              "objects[1]: Pod team-a/x: spec.nodeName must be a string, not a list"),
    ShapeCase("spec a number", spoiled(pod("x"), ("spec",), 1), "objects[1]: Pod team-a/x: spec must be a map, not a number"),
    ShapeCase("status a string", spoiled(pod("x"), ("status",), "Running"), "objects[1]: Pod team-a/x: status must be a map, not a string"),
    ShapeCase("phase a list", spoiled(pod("x", phase="Running"), ("status", "phase"), ["Running"]), "objects[1]: Pod team-a/x: status.phase must be a string, not a list"),
    ShapeCase("labels a number", spoiled(node("n9"), ("metadata", "labels"), 1), "objects[1]: Node n9: metadata.labels must be a map of strings, not a number"),
    ShapeCase("label value a list", spoiled(node("n9"), ("metadata", "labels", "nvidia.com/gpu.product"), ["a"]),
              "objects[1]: Node n9: metadata.labels['nvidia.com/gpu.product'] must be a string, not a list"),
    ShapeCase("annotation a number", spoiled(pod("x"), ("metadata", "annotations"), {"a": 1}), "objects[1]: Pod team-a/x: metadata.annotations['a'] must be a string, not a number"),
    ShapeCase("apiVersion a number", spoiled(podgroup("g"), ("apiVersion",), 1), "objects[1]: PodGroup team-a/g: apiVersion must be a string"),
    ShapeCase("namespace a list", spoiled(pod("x"), ("metadata", "namespace"), ["a"]), "objects[1]: Pod x: metadata.namespace must be a string"),
    ShapeCase("volcano minTaskMember a number", podgroup("v", api="scheduling.volcano.sh/v1beta1", minTaskMember=1),
              "objects[1]: PodGroup team-a/v: unreadable group object"),
    ShapeCase("healthy pod", pod("x", gpus="1", node="n1"), None),
    ShapeCase("null spec is empty", spoiled(pod("x"), ("spec",), None), None),
]


@pytest.mark.parametrize("case", SHAPES, ids=lambda c: c.name)
def test_from_objects_locates_the_bad_field(case):
    if case.want_error is None:
        assert len(ClusterSnapshot.from_objects([node("n1"), case.obj])) == 2
        return
    with pytest.raises(SnapshotError) as exc:
        ClusterSnapshot.from_objects([node("n1"), case.obj])
    assert str(exc.value).startswith(case.want_error), str(exc.value)
    assert "\n" not in str(exc.value)


def test_from_text_locates_the_bad_item_by_line():
    text = yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": [node("n1"), spoiled(pod("x"), ("spec", "nodeName"), ["n1"])]})
    with pytest.raises(SnapshotError) as exc:
        ClusterSnapshot.from_text(text)
    assert "document.items[1]: Pod team-a/x: spec.nodeName must be a string, not a list" in str(exc.value)
    assert str(exc.value).startswith("line ")


def test_rejected_event_changes_nothing_and_is_counted():
    snap = ClusterSnapshot.from_objects([node("n1"), pod("x", gpus="1", node="n1")])
    seen = []
    snap.subscribe(lambda *e: seen.append(e))
    version = snap.resource_version
    with pytest.raises(SnapshotError):
        snap.apply("MODIFIED", spoiled(pod("x", gpus="1", node="n1"), ("spec", "nodeName"), ["n2"]))
    assert (snap.rejected, snap.resource_version, seen) == (1, version, [])
    assert [p["metadata"]["name"] for p in snap.pods_on("n1")] == ["x"]
    assert snap.apply("DELETED", spoiled(pod("x"), ("spec",), 7))  # a delete needs only the key
    assert list(snap.pods_on("n1")) == []


def _one_line_error(call) -> bool:
    try:
        call()
    except SnapshotError as exc:
        assert "\n" not in str(exc) and str(exc)
        return False
    return True


@FUZZ
@given(st.lists(garbage_object(), max_size=6))
def test_from_objects_never_raises_anything_else(objs):
    _one_line_error(lambda: ClusterSnapshot.from_objects(objs))


@FUZZ
@given(st.lists(garbage_object(), max_size=5), st.sampled_from(["yaml", "json", "multi"]))
def test_from_text_never_raises_anything_else(objs, form):
    if form == "json":
        text = json.dumps({"apiVersion": "v1", "kind": "List", "items": objs}, default=str)
    elif form == "yaml":
        text = yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": objs})
    else:
        text = yaml.safe_dump_all(objs)
    _one_line_error(lambda: ClusterSnapshot.from_text(text))


@FUZZ
@given(st.text(max_size=60))
def test_from_text_of_any_text(text):
    _one_line_error(lambda: ClusterSnapshot.from_text(text))


def indexes(snap: ClusterSnapshot) -> dict:
    """Everything the snapshot derives from its stores, comparable across snapshots."""
    return {
        "by_node": {n: sorted(p) for n, p in snap._pods_by_node.items()},
        "groups": {k: {f: (g.name, g.min_members) for f, g in v.items()} for k, v in snap._groups.items()},
        "memory": (snap._gpu_memory.by_node, snap._gpu_memory.by_product, snap._gpu_memory.all),
        "len": len(snap),
    }


@FUZZ
@given(st.lists(EVENTS, max_size=12))
def test_watch_events_skip_bad_objects_and_keep_indexes_equal_to_a_rebuild(events):
    snap = ClusterSnapshot()
    rejected = 0
    for event, obj in events:
        try:
            snap.apply(event, obj)
        except SnapshotError:
            rejected += 1
    assert snap.rejected == rejected
    rebuilt = ClusterSnapshot.from_objects(_stored(snap))
    assert indexes(rebuilt) == indexes(snap)


def _stored(snap: ClusterSnapshot) -> list[dict]:
    stores = (snap._nodes, snap._pods, snap._namespaces, snap._priority_classes, snap._device_classes,
              snap._claims, snap._claim_templates, snap._group_objs, snap._other)
    return [o for s in stores for o in s.values()]


@pytest.fixture(scope="module")
def policy_set():
    from tests.robust.robust_engine import real_policy_set

    return real_policy_set()


@settings(max_examples=max(20, EXAMPLES // 3), deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.one_of(st.lists(EVENTS, max_size=10), st.lists(EVENTS.filter(lambda e: e[1].get("kind") == "Pod"), max_size=10)))
def test_watch_events_with_engine_indexes_attached(policy_set, events):
    from policy.engine import Engine

    snap = ClusterSnapshot.from_objects([node("n1"), node("n2")])
    engine = Engine(policy_set)
    engine.warm(snap)
    state = engine.state_for(snap)
    state.planner()  # placement index subscribed too
    for event, obj in events:
        try:
            snap.apply(event, obj)
        except SnapshotError:
            pass
    if all(obj.get("kind") == "Pod" for _, obj in events):
        # Charges are computed when a pod's event arrives; a later node or namespace change does not
        # re-charge it, so a rebuild agrees only when pods alone changed.
        fresh = Engine(policy_set).state_for(ClusterSnapshot.from_objects(_stored(snap)))
        assert (state.quota.used, state.quota.memory) == (fresh.quota.used, fresh.quota.memory)


def test_empty_values_of_any_type_read_as_absent():
    for empty in ({}, [], 0, False, ""):
        snap = ClusterSnapshot.from_objects([spoiled(pod("x", node="n1"), ("spec", "nodeName"), empty)])
        assert list(snap.pods_on("n1")) == [] and snap.pod("team-a", "x") is not None


@pytest.mark.parametrize("text,want", [
    ("a: " + "[" * 60000, "nested deeper than 1000 levels"),  # libyaml's C composer would crash the process
    ("a:\n" + "- " * 60000 + "x", "nested deeper than 1000 levels"),
    ("[" * 100000, "malformed JSON: depth limit exceeded"),
    ('{"a":' * 5000, "malformed JSON"),
    ("\ud800", "lone surrogate"),
])
def test_pathological_text_is_a_located_error(text, want):
    with pytest.raises(SnapshotError) as exc:
        ClusterSnapshot.from_text(text)
    assert want in str(exc.value) and "\n" not in str(exc.value)
