"""Upstream CompositePodGroup objects (scheduling.k8s.io/v1alpha3, Kubernetes 1.37 development): read as a group object.

Shape as in the Kubernetes source (staging/src/k8s.io/api/scheduling/v1alpha3/types.go):
spec.{parentCompositePodGroupName, workloadRef, schedulingPolicy.{basic | gang.minGroupCount},
priorityClassName, priority, schedulingConstraints.topology[].key}. A composite counts child
groups, not pods: it states no pod count (its pods are its children's PodGroups').
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from policy.cluster.snapshot import ClusterSnapshot
from policy.subject.dialects.gangs import group_family, read_group
from policy.subject.normalize import normalize
from tests.policy.builders import request

ALPHA3 = "scheduling.k8s.io/v1alpha3"


def cpg(name="lws-rep-0", policy=None, key=None, parent="lws-root", pc=None, api=ALPHA3, **spec):
    s = {"workloadRef": {"workloadName": "lws", "templateName": "replica"},
         "schedulingPolicy": policy if policy is not None else {"gang": {"minGroupCount": 2}}, **spec}
    if parent:
        s["parentCompositePodGroupName"] = parent
    if key:
        s["schedulingConstraints"] = {"topology": [{"key": key}]}
    if pc:
        s["priorityClassName"] = pc
    return {"apiVersion": api, "kind": "CompositePodGroup", "metadata": {"name": name, "namespace": "train"}, "spec": s}


@dataclass
class Case:
    name: str
    obj: dict
    want_gang: str | None = "lws-rep-0"
    want_min_groups: int | None = 2
    want_parent: str | None = "lws-root"
    want_topology: str | None = None
    want_priority: int | None = None
    want_problems: list = field(default_factory=list)  # substrings, in order


CASES = [
    Case("a gang of 2 child groups", cpg()),
    Case("the root of the tree: no parent", cpg(name="lws-root", parent=None), want_gang="lws-root", want_parent=None),
    Case("basic: no minimum", cpg(policy={"basic": {}}), want_min_groups=None),
    Case("a topology constraint is the gang's required domain", cpg(key="topology.acme.io/rack"), want_topology="topology.acme.io/rack"),
    Case("the priority admission's value", cpg(pc="high", priority=1000), want_priority=1000),
    Case("both basic and gang: the API server refuses it; a located problem", cpg(policy={"basic": {}, "gang": {"minGroupCount": 1}}), want_min_groups=1,
         want_problems=["spec.schedulingPolicy: exactly one of basic and gang must be set, both are"]),
    Case("neither: a located problem", cpg(policy={}), want_min_groups=None,
         want_problems=["spec.schedulingPolicy: exactly one of basic and gang must be set, neither is"]),
    Case("minGroupCount 0: a located problem", cpg(policy={"gang": {"minGroupCount": 0}}), want_min_groups=None,
         want_problems=["spec.schedulingPolicy.gang.minGroupCount: 0 is not a whole number >= 1"]),
    Case("a policy that is no object", cpg(policy=["gang"]), want_min_groups=None, want_problems=["spec.schedulingPolicy"]),
    Case("a topology key that is no string", cpg(schedulingConstraints={"topology": [{"key": 7}]}),
         want_problems=["spec.schedulingConstraints.topology[0].key"]),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_read_composite(case):
    assert group_family(case.obj["apiVersion"], "CompositePodGroup") == "composite"
    info = read_group(case.obj, "composite")
    assert (info.name, info.min_groups, info.parent, info.topology_required) == (case.obj["metadata"]["name"], case.want_min_groups, case.want_parent, case.want_topology)
    assert info.min_members is None and info.pod_sets == ()  # it counts groups, not pods
    got = [p.message for p in info.problems]
    assert len(got) >= len(case.want_problems) and all(w in g for w, g in zip(case.want_problems, got)), got
    w = normalize(request(case.obj, kind="CompositePodGroup", resource="compositepodgroups"), ClusterSnapshot.from_objects([]))
    assert (w.kind, w.gang, w.min_members, w.total_gpus, w.topology_required, w.priority) == (
        "CompositePodGroup", case.want_gang if case.want_gang else None, None, 0, case.want_topology, case.want_priority)
    if case.want_problems:
        assert w.problems, "a malformed composite is not silently read"


def test_another_group_is_no_composite():
    assert group_family("scheduling.x-k8s.io/v1alpha1", "CompositePodGroup") is None


def test_the_snapshot_files_composites_beside_podgroups_of_the_same_name():
    pg = {"apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup", "metadata": {"name": "lws-rep-0", "namespace": "train"},
          "spec": {"schedulingPolicy": {"gang": {"minCount": 4}}, "parentCompositePodGroupName": "lws-root"}}
    snap = ClusterSnapshot.from_objects([cpg(), pg])
    assert snap.group("train", "lws-rep-0", "composite").min_groups == 2
    assert snap.group("train", "lws-rep-0", "podgroup").min_members == 4
    assert snap.apply("DELETED", cpg())  # removed from its own index, the PodGroup stays
    assert snap.group("train", "lws-rep-0", "composite") is None
    assert snap.group("train", "lws-rep-0", "podgroup").parent == "lws-root"
