"""A pod of an upstream PodGroup under a CompositePodGroup (`spec.parentCompositePodGroupName`) is judged as a member of its root composite's gang.

Shapes as in the Kubernetes source (staging/src/k8s.io/api/scheduling/v1alpha3 and v1beta1
types.go): PodGroup `spec.{parentCompositePodGroupName, schedulingPolicy.gang.minCount,
schedulingConstraints.topology[].key}`, CompositePodGroup `spec.{parentCompositePodGroupName,
schedulingPolicy.{basic | gang.minGroupCount}, schedulingConstraints}`, a pod's
`spec.schedulingGroup.podGroupName`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from policy.cluster.snapshot import ClusterSnapshot
from policy.subject.normalize import normalize
from tests.policy.blocks.gang.gangs_builders import H100, cluster, engine, node, rack_of, request as gang_request
from tests.policy.subject.test_composite_podgroup import cpg

RACK = "topology.acme.io/rack"


def pg(name: str, min_count: int | None, parent: str | None = "root", key: str | None = None) -> dict:
    """A v1beta1 PodGroup (a gang of `min_count`, basic when None) under `parent`."""
    spec: dict = {"schedulingPolicy": {"gang": {"minCount": min_count}} if min_count else {"basic": {}}}
    if parent:
        spec["parentCompositePodGroupName"] = parent
    if key:
        spec["schedulingConstraints"] = {"topology": [{"key": key}]}
    return {"apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup", "metadata": {"name": name, "namespace": "train"}, "spec": spec}


def member(group: str, name: str = "m-0", gpus: int = 8) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "train", "labels": {"acme.io/workload": "training"}},
            "spec": {"schedulingGroup": {"podGroupName": group}, "nodeSelector": {"nvidia.com/gpu.product": H100},
                     "containers": [{"name": "w", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]}}


def root(policy=None, parent=None, key=None, name="root"):
    return cpg(name=name, policy=policy if policy is not None else {"gang": {"minGroupCount": 2}}, parent=parent, key=key)


@dataclass
class Case:
    name: str
    objects: list
    pod_group: str = "rep-0"
    want_gang: str = "root"
    want_min: int | None = 6
    want_topology: str | None = None
    want_codes: list = field(default_factory=list)


THREE = [pg("rep-0", 4), pg("rep-1", 4), pg("rep-2", 2)]
CASES = [
    Case("no parent: its own PodGroup", [pg("rep-0", 4, parent=None)], want_gang="rep-0", want_min=4),
    Case("under a gang composite of minGroupCount 2: the two children needing the fewest pods (2 + 4)", [root(), *THREE]),
    Case("under a basic composite: every child (4 + 4 + 2)", [root(policy={"basic": {}}), *THREE], want_min=10),
    Case("a basic child PodGroup needs 1 pod", [root(), pg("rep-0", 4), pg("rep-1", None)], want_min=5),
    Case("two levels: the root's minGroupCount 1 over composites of 8 and 2 pods",
         [root(policy={"gang": {"minGroupCount": 1}}), cpg(name="a", policy={"basic": {}}, parent="root"),
          cpg(name="b", policy={"basic": {}}, parent="root"), pg("rep-0", 4, "a"), pg("rep-1", 4, "a"), pg("rep-2", 2, "b")], want_min=2),
    Case("the root's topology is the gang's, over the PodGroup's own", [root(key=RACK), pg("rep-0", 4, key="kubernetes.io/hostname"),
                                                                       pg("rep-1", 4)], want_min=8, want_topology=RACK),
    Case("a missing parent: its own PodGroup, and a MissingGroup warning", [pg("rep-0", 4, parent="gone")], want_gang="rep-0", want_min=4,
         want_codes=["MissingGroup"]),
    Case("parents in a loop: its own PodGroup, and a MalformedObject problem (a denial)",
         [cpg(name="a", parent="b"), cpg(name="b", parent="a"), pg("rep-0", 4, parent="a")], want_gang="rep-0", want_min=4,
         want_codes=["MalformedObject"]),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_a_pod_under_a_composite_is_judged_as_its_root(case):
    snap = ClusterSnapshot.from_objects(case.objects)
    w = normalize(gang_request(member(case.pod_group)), snap)
    assert (w.gang, w.min_members, w.topology_required) == (case.want_gang, case.want_min, case.want_topology)
    assert [p.code for p in w.problems] == case.want_codes, w.problems


# Rack r1: 16 free GPUs, rack r2: 24.
NODES = (node("n1", "r1"), node("n2", "r1"), node("n3", "r2"), node("n4", "r2"), node("n5", "r2"))
GANG = """
gang training {
  for labels["acme.io/workload"] == "training"
  require topology fabric.rack
  on unplaceable deny
}
"""


def test_sibling_podgroups_under_one_composite_are_placed_as_one_gang_in_one_rack():
    # rep-0 alone (2 x 8) would take the best-fitting rack r1; with its sibling rep-1 (1 x 8) the root needs 24: rack r2
    eng = engine(GANG)
    snap = cluster(*NODES, root(policy={"basic": {}}), pg("rep-0", 2), pg("rep-1", 1))
    first = eng.decide(gang_request(member("rep-0", "a-0")), snap, 0.0, mutate=True)
    assert first.allowed and rack_of(first.patch) == ["r2"], first.reasons
    sibling = eng.decide(gang_request(member("rep-1", "b-0")), snap, 1.0, mutate=True)
    assert sibling.allowed and rack_of(sibling.patch) == ["r2"]  # the same gang, the same rack
    held = eng.state_for(snap).planner().index.reservations.by_id
    assert list(held) == ["train/root"] and len(held["train/root"].slots) == 3


def test_without_a_parent_each_podgroup_is_its_own_gang():
    eng = engine(GANG)
    snap = cluster(*NODES, pg("rep-0", 2, parent=None), pg("rep-1", 1, parent=None))
    first = eng.decide(gang_request(member("rep-0", "a-0")), snap, 0.0, mutate=True)
    assert first.allowed and rack_of(first.patch) == ["r1"]


def test_a_composite_no_rack_holds_is_denied_at_its_first_member():
    eng = engine(GANG)
    snap = cluster(*NODES, root(policy={"basic": {}}), pg("rep-0", 2), pg("rep-1", 2))  # 4 x 8 = 32 > any rack
    d = eng.decide(gang_request(member("rep-0", "a-0")), snap, 0.0, mutate=True)
    assert not d.allowed and [r.code for r in d.reasons if r.mode == "enforce"] == ["GangUnplaceable"]
