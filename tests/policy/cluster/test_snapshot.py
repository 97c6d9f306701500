"""ClusterSnapshot: loading kubectl Lists, incremental events, callbacks and look-ups."""

import json
import pathlib
from dataclasses import dataclass

import pytest

from policy.cluster.snapshot import ClusterSnapshot, SnapshotError, is_live
from tests.policy.builders import claim, claim_template, namespace, node, pod, podgroup, priority_class, snapshot

FIXTURES = pathlib.Path(__file__).resolve().parents[2] / "fixtures" / "cluster"


def small():
    return ClusterSnapshot.from_text((FIXTURES / "small.yaml").read_text())


def test_small_fixture_loads_everything():
    s = small()
    gpu_nodes = [n for n in s.nodes() if "nvidia.com/gpu.product" in n["metadata"]["labels"]]
    assert len(gpu_nodes) == 8
    assert {n["metadata"]["labels"]["topology.acme.io/rack"] for n in gpu_nodes} == {"rack-11", "rack-12", "rack-21", "rack-22"}
    assert {pc["metadata"]["name"]: pc["value"] for pc in s.priority_classes()} == {
        "critical": 1000, "prod": 500, "batch": 100, "system-cluster-critical": 2000000000}
    assert s.namespace_labels("team-a-dev")["team"] == "team-a"
    assert s.group("team-a", "llama-ft").min_members == 2
    assert sum(1 for p in s.pods() if is_live(p)) == 8
    assert s.resource_version == len(s)


@dataclass
class TextCase:
    name: str
    text: str
    want_nodes: int
    want_pods: int


NODE_JSON = json.dumps(node("n1"))
CASES = [
    TextCase("json list", json.dumps({"apiVersion": "v1", "kind": "List", "items": [node("n1"), pod("p")]}), 1, 1),
    TextCase("json single object", NODE_JSON, 1, 0),
    TextCase("multi-doc yaml", "apiVersion: v1\nkind: Node\nmetadata: {name: a}\n---\napiVersion: v1\nkind: Node\nmetadata: {name: b}\n---\n", 2, 0),
    TextCase("nested lists", json.dumps({"kind": "List", "items": [{"kind": "List", "items": [node("a")]}, pod("p")]}), 1, 1),
    TextCase("typed list items without kind", "apiVersion: v1\nkind: PodList\nitems:\n- metadata: {name: p, namespace: x}\n  spec: {}\n", 0, 1),
    TextCase("empty list", "apiVersion: v1\nkind: List\nitems: []\n", 0, 0),
    TextCase("empty text", "", 0, 0),
    TextCase("null items", "apiVersion: v1\nkind: List\nmetadata: {resourceVersion: ''}\nitems: null\n", 0, 0),
    TextCase("utf-8 bom and comments", "# kubectl get -o yaml\napiVersion: v1\nkind: Node\nmetadata:\n  name: a\n", 1, 0),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_from_text_shapes(case):
    s = ClusterSnapshot.from_text(case.text)
    assert (len(list(s.nodes())), len(list(s.pods()))) == (case.want_nodes, case.want_pods)


@pytest.mark.parametrize("text,want", [
    ("kind: List\nitems:\n- kind: Pod\n  metadata: {namespace: a}\n", "line 3: document.items[0]: Pod has no metadata.name"),
    ("kind: List\nitems:\n- metadata: {name: x}\n", "line 3: document.items[0]: object has no kind"),
    ("kind: List\nitems:\n- 42\n", "document.items[0]: expected an object, got int"),
    ("kind: Node\nmetadata: {name: [x}\n", "line 2, column"),
    ('{"kind": "List", "items": [}', "line 1, column 28: malformed JSON"),
    ("kind: Node\nmetadata: {name: a}\n---\nkind: Pod\nmetadata: {}\n", "line 4: document 2: Pod has no metadata.name"),
    ("- just\n- a list\n", "document: expected an object, got list"),
])
def test_from_text_errors_are_one_located_line(text, want):
    with pytest.raises(SnapshotError) as err:
        ClusterSnapshot.from_text(text)
    assert want in str(err.value) and "\n" not in str(err.value)


def test_apply_events_and_callbacks():
    s = ClusterSnapshot()
    seen = []
    s.subscribe(lambda ev, old, new: seen.append((ev, old and old["metadata"]["resourceVersion"], new and new["metadata"]["resourceVersion"])))
    p1 = pod("p", gpus="1")
    p2 = {**p1, "metadata": {**p1["metadata"], "resourceVersion": "9"}}
    assert s.apply("ADDED", p1)
    assert s.apply("MODIFIED", p2)
    assert s.apply("ADDED", p2)  # re-list delivers ADDED for a known object: reported as MODIFIED
    assert s.apply("DELETED", p2)
    assert not s.apply("DELETED", p2)  # unknown object: no change, no callback
    rv1 = p1["metadata"]["resourceVersion"]
    assert seen == [("ADDED", None, rv1), ("MODIFIED", rv1, "9"), ("MODIFIED", "9", "9"), ("DELETED", "9", None)]
    assert s.resource_version == 4 and s.pod("team-a", "p") is None


@pytest.mark.parametrize("event,obj,want", [
    ("UPSERT", pod("p"), "event 'UPSERT'"),
    ("ADDED", {"metadata": {"name": "x"}}, "no kind"),
    ("ADDED", {"kind": "Pod", "metadata": {}}, "Pod has no metadata.name"),
    ("ADDED", ["not", "a", "dict"], "expected an object"),
])
def test_apply_rejects_unusable_events(event, obj, want):
    with pytest.raises(SnapshotError, match=want):
        ClusterSnapshot().apply(event, obj)


def test_apply_with_kind_for_kindless_watch_objects():
    s = ClusterSnapshot()
    s.apply("ADDED", {"metadata": {"name": "n"}}, kind="Node")
    assert s.node("n")["kind"] == "Node"


def test_pods_on_node_index_follows_moves_and_deletes():
    s = snapshot(node("n1"), node("n2"))
    p = pod("p", gpus="1", node="n1")
    s.apply("ADDED", p)
    moved = {**p, "spec": {**p["spec"], "nodeName": "n2"}}
    s.apply("MODIFIED", moved)
    assert ([x["metadata"]["name"] for x in s.pods_on("n1")], [x["metadata"]["name"] for x in s.pods_on("n2")]) == ([], ["p"])
    s.apply("DELETED", moved)
    assert list(s.pods_on("n2")) == []


def test_group_index_follows_updates_and_deletes():
    s = snapshot()
    g = podgroup("g", minMember=2)
    s.apply("ADDED", g)
    s.apply("MODIFIED", {**g, "spec": {"minMember": 5}})
    assert s.group("team-a", "g").min_members == 5
    assert s.group("team-a", "g", "volcano") is None
    s.apply("DELETED", g)
    assert s.group("team-a", "g") is None and list(s.groups()) == []


def test_same_name_groups_of_two_dialects_are_kept_apart():
    s = snapshot(podgroup("g", minMember=2), podgroup("g", api="scheduling.volcano.sh/v1beta1", minMember=9))
    assert (s.group("team-a", "g", "coscheduling").min_members, s.group("team-a", "g", "volcano").min_members) == (2, 9)


def test_gpu_memory_index():
    s = snapshot(node("h1"), node("h2"), node("l1", "NVIDIA-L4", "23034", "4"))
    assert s.gpu_memory("NVIDIA-L4") == 23034 * 2**20
    assert s.gpu_memory("NVIDIA-H100-80GB-HBM3,NVIDIA-L4") is None  # two sizes: ambiguous
    assert s.gpu_memory(None) is None  # cluster has two sizes
    assert s.gpu_memory(None, "l1") == 23034 * 2**20
    s.apply("DELETED", s.node("l1"))
    assert s.gpu_memory(None) == 81559 * 2**20  # now a single size


def test_lookups_of_every_kind():
    dc = {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "gpu.nvidia.com"}, "spec": {}}
    cq = {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ClusterQueue", "metadata": {"name": "cq"}, "spec": {}}
    s = snapshot(namespace("a"), priority_class("prod", 500), claim("c", "a"), claim_template("t", "a"), dc, cq, pod("p", "a"))
    assert s.namespace("a")["metadata"]["name"] == "a" and s.namespace("b") is None
    assert s.priority_class("prod")["value"] == 500 and s.priority_class("x") is None
    assert s.resource_claim("a", "c") and s.resource_claim_template("a", "t") and s.device_class("gpu.nvidia.com")
    assert s.pod("a", "p") and s.pod("b", "p") is None
    assert [o["metadata"]["name"] for o in s.objects("ClusterQueue")] == ["cq"]
    assert len(s) == 7


@pytest.mark.parametrize("status,meta,want", [
    ({"phase": "Running"}, {}, True),
    ({"phase": "Pending"}, {}, True),
    ({}, {}, True),
    ({"phase": "Succeeded"}, {}, False),
    ({"phase": "Failed"}, {}, False),
    ({"phase": "Running"}, {"deletionTimestamp": "2026-11-30T06:00:00Z"}, False),
])
def test_is_live(status, meta, want):
    p = pod("p")
    p["status"] = status
    p["metadata"].update(meta)
    assert is_live(p) is want


def test_bulk_load_restores_the_collector_even_on_error():
    import gc

    assert gc.isenabled()
    with pytest.raises(SnapshotError):
        ClusterSnapshot.from_text("kind: List\nitems:\n- kind: Pod\n  metadata: {}\n")
    ClusterSnapshot.from_objects([node("n")])
    assert gc.isenabled()
