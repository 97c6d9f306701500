"""The upstream Workload API at scheduling.k8s.io/v1beta1 (Kubernetes 1.37): flat and composite pod group templates."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from policy.subject.normalize import normalize
from tests.policy.builders import pod, podgroup, request, snapshot, workload

BETA = "scheduling.k8s.io/v1beta1"


def gang(name, n, key=None):
    """A PodGroupTemplate with a gang policy (and a topology key)."""
    t = {"name": name, "schedulingPolicy": {"gang": {"minCount": n}}}
    if key:
        t["schedulingConstraints"] = {"topology": [{"key": key}]}
    return t


def basic(name):
    return {"name": name, "schedulingPolicy": {"basic": {}}}


def composite(name, groups=(), composites=(), k=None, key=None):
    """A CompositePodGroupTemplate: a gang of `k` children (basic when k is None)."""
    c = {"name": name, "schedulingPolicy": {"gang": {"minGroupCount": k}} if k is not None else {"basic": {}}}
    if groups:
        c["podGroupTemplates"] = list(groups)
    if composites:
        c["compositePodGroupTemplates"] = list(composites)
    if key:
        c["schedulingConstraints"] = {"topology": [{"key": key}]}
    return c


def nested(depth):
    c = composite("leaf", [gang("g", 1)])
    for i in range(depth - 1):
        c = composite(f"c{i}", composites=[c])
    return c


@dataclass
class Case:
    name: str
    spec: dict
    want_sets: tuple  # (name, pods)
    want_min: int | None
    want_required: str | None = None
    want_codes: list = field(default_factory=list)
    want_message: str | None = None


CASES = [
    Case("flat templates, as in v1alpha2", {"podGroupTemplates": [gang("driver", 1), gang("workers", 8, "topology.acme.io/rack")]},
         (("driver", 1), ("workers", 8)), 9, "topology.acme.io/rack"),
    Case("a basic template adds no minimum", {"podGroupTemplates": [basic("web"), gang("workers", 4)]}, (("web", 0), ("workers", 4)), 4),
    Case("composite gang: the minGroupCount smallest children start together",
         {"compositePodGroupTemplates": [composite("replicas", [gang("a", 4), gang("b", 6)], k=1, key="topology.acme.io/block")]},
         (("replicas/a", 4), ("replicas/b", 6)), 4, "topology.acme.io/block"),
    Case("composite basic: its children summed, as flat templates are",
         {"compositePodGroupTemplates": [composite("roles", [gang("prefill", 2), gang("decode", 3)])]},
         (("roles/prefill", 2), ("roles/decode", 3)), 5),
    Case("a child's topology when the composite names none",
         {"compositePodGroupTemplates": [composite("r", [gang("a", 2, "topology.acme.io/rack")], k=1)]}, (("r/a", 2),), 2, "topology.acme.io/rack"),
    Case("nested composites: each level's minimum",
         {"compositePodGroupTemplates": [composite("top", [gang("solo", 3)], [
             composite("x", [gang("x1", 2), gang("x2", 6)], k=1), composite("y", [gang("y1", 1), gang("y2", 1)])], k=2)]},
         (("top/solo", 3), ("top/x/x1", 2), ("top/x/x2", 6), ("top/y/y1", 1), ("top/y/y2", 1)), 4),
    Case("minGroupCount above the children: all of them", {"compositePodGroupTemplates": [composite("r", [gang("a", 2), gang("b", 2)], k=5)]},
         (("r/a", 2), ("r/b", 2)), 4),
    Case("four levels are allowed", {"compositePodGroupTemplates": [nested(4)]}, (("c2/c1/c0/leaf/g", 1),), 1),
    Case("five levels are refused by the API: a located problem",
         {"compositePodGroupTemplates": [nested(5)]}, (), None, want_codes=["MalformedObject"],
         want_message="compositePodGroupTemplates[0].compositePodGroupTemplates: composite pod group templates nest deeper than 4"),
    Case("both lists set: both read, and a problem", {"podGroupTemplates": [gang("a", 2)], "compositePodGroupTemplates": [composite("r", [gang("b", 3)])]},
         (("a", 2), ("r/b", 3)), 5, want_codes=["MalformedObject"], want_message="exactly one of podGroupTemplates and compositePodGroupTemplates"),
    Case("a bad minGroupCount is located", {"compositePodGroupTemplates": [composite("r", [gang("a", 2), gang("b", 3)], k="one")]},
         (("r/a", 2), ("r/b", 3)), 5, want_codes=["MalformedQuantity"],
         want_message="spec.compositePodGroupTemplates[0].schedulingPolicy.gang.minGroupCount: 'one'"),
    Case("composite templates of the wrong type", {"compositePodGroupTemplates": "replicas"}, (), None, want_codes=["MalformedObject"],
         want_message="spec.compositePodGroupTemplates: expected a list of objects"),
    Case("a bad minCount inside a composite is located", {"compositePodGroupTemplates": [composite("r", [gang("a", 0)])]},
         (("r/a", 0),), None, want_codes=["MalformedQuantity"],
         want_message="spec.compositePodGroupTemplates[0].podGroupTemplates[0].schedulingPolicy.gang.minCount"),
]


@pytest.mark.parametrize("c", CASES, ids=lambda c: c.name)
def test_v1beta1_workload(c):
    obj = workload("w", api=BETA, **c.spec)
    w = normalize(request(obj, resource="workloads"), snapshot())
    assert (w.kind, w.gang, w.min_members, w.topology_required) == ("Workload", "w", c.want_min, c.want_required)
    assert tuple((ps.name, ps.count) for ps in w.pod_sets) == c.want_sets
    assert [p.code for p in w.problems] == c.want_codes, w.problems
    if c.want_message:
        assert c.want_message in w.problems[0].message, w.problems[0].message
    assert w.pods == (c.want_min or 1) and w.total_gpus == 0  # no resources in the object: its pods are charged


def test_a_member_of_a_v1beta1_pod_group_carries_its_minimum_and_topology():
    pg = podgroup("w-workers-0", api=BETA, workloadRef={"workloadName": "w", "templateName": "workers"},
                  parentCompositePodGroupName="w-replicas-0", schedulingPolicy={"gang": {"minCount": 6}},
                  schedulingConstraints={"topology": [{"key": "topology.acme.io/rack"}]}, disruptionMode={"single": {}})
    w = normalize(request(pod(gpus="1", schedulingGroup={"podGroupName": "w-workers-0"})), snapshot(pg))
    # its parent composite is not in the cluster state: judged by its own PodGroup, with a MissingGroup warning
    assert (w.gang, w.min_members, w.topology_required, [p.code for p in w.problems]) == ("w-workers-0", 6, "topology.acme.io/rack", ["MissingGroup"])
    assert "w-replicas-0" in w.problems[0].message
