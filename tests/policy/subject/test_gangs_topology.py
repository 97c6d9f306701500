"""Gang membership and topology requests across coscheduling, Volcano, KAI, Kueue and upstream dialects."""

from dataclasses import dataclass

import pytest

from policy.subject.normalize import normalize, normalize_object
from tests.policy.builders import container, pod, podgroup, request, snapshot, workload

COSCHED = "scheduling.x-k8s.io/v1alpha1"
VOLCANO = "scheduling.volcano.sh/v1beta1"
KAI = "scheduling.run.ai/v2alpha2"
UPSTREAM_PG = "scheduling.k8s.io/v1alpha2"


@dataclass
class PodCase:
    name: str
    pod: dict
    objects: tuple
    want_gang: str | None
    want_min: int | None
    want_required: str | None = None
    want_preferred: str | None = None


POD_CASES = [
    PodCase("no gang", pod(gpus="1"), (), None, None),
    PodCase("coscheduling label", pod(labels={"scheduling.x-k8s.io/pod-group": "g"}), (podgroup("g", minMember=4),), "g", 4),
    PodCase("legacy coscheduling group", pod(labels={"scheduling.x-k8s.io/pod-group": "g"}),
            (podgroup("g", api="scheduling.sigs.k8s.io/v1alpha1", minMember=3),), "g", 3),
    PodCase("legacy coscheduling label", pod(labels={"pod-group.scheduling.sigs.k8s.io": "g"}),
            (podgroup("g", api="scheduling.sigs.k8s.io/v1alpha1", minMember=3),), "g", 3),
    PodCase("volcano's own annotation key", pod(annotations={"scheduling.volcano.sh/group-name": "v"}), (podgroup("v", api=VOLCANO, minMember=2),), "v", 2),
    PodCase("volcano annotation", pod(annotations={"scheduling.k8s.io/group-name": "v"}), (podgroup("v", api=VOLCANO, minMember=8),), "v", 8),
    PodCase("kai annotation + topology", pod(annotations={"pod-group-name": "k"}),
            (podgroup("k", api=KAI, minMember=2, topologyConstraint={"topology": "fabric", "requiredTopologyLevel": "topology.acme.io/rack",
                                                                       "preferredTopologyLevel": "kubernetes.io/hostname"}),),
            "k", 2, "topology.acme.io/rack", "kubernetes.io/hostname"),
    PodCase("kai label", pod(labels={"pod-group-name": "k"}), (podgroup("k", api=KAI, minMember=5),), "k", 5),
    PodCase("kueue pod group", pod(labels={"kueue.x-k8s.io/pod-group-name": "q"}, annotations={"kueue.x-k8s.io/pod-group-total-count": "6"}), (), "q", 6),
    PodCase("kueue group without count", pod(labels={"kueue.x-k8s.io/pod-group-name": "q"}), (), "q", None),
    PodCase("upstream 1.36 schedulingGroup", pod(schedulingGroup={"podGroupName": "u"}),
            (podgroup("u", api=UPSTREAM_PG, schedulingPolicy={"gang": {"minCount": 4}},
                      schedulingConstraints={"topology": [{"key": "topology.acme.io/block"}]}),), "u", 4, "topology.acme.io/block"),
    PodCase("upstream basic policy", pod(schedulingGroup={"podGroupName": "u"}), (podgroup("u", api=UPSTREAM_PG, schedulingPolicy={"basic": {}}),), "u", None),
    PodCase("upstream 1.35 workloadRef", pod(workloadRef={"name": "w", "podGroup": "workers"}),
            (workload("w", podGroups=[{"name": "driver", "policy": {"basic": {}}}, {"name": "workers", "policy": {"gang": {"minCount": 7}}}]),),
            "w/workers", 7),
    PodCase("workload v1alpha2 templates", pod(workloadRef={"name": "w", "podGroup": "workers"}),
            (workload("w", api="scheduling.k8s.io/v1alpha2", podGroupTemplates=[
                {"name": "workers", "schedulingPolicy": {"gang": {"minCount": 3}}, "schedulingConstraints": {"topology": [{"key": "topology.acme.io/rack"}]}}]),),
            "w/workers", 3, "topology.acme.io/rack"),
    PodCase("kueue topology annotations", pod(annotations={"kueue.x-k8s.io/podset-required-topology": "topology.acme.io/block",
                                                           "kueue.x-k8s.io/podset-preferred-topology": "topology.acme.io/rack"}), (),
            None, None, "topology.acme.io/block", "topology.acme.io/rack"),
    PodCase("kai topology annotations", pod(annotations={"kai.scheduler/topology-required-placement": "topology.acme.io/rack",
                                                         "kai.scheduler/topology-preferred-placement": "kubernetes.io/hostname"}), (),
            None, None, "topology.acme.io/rack", "kubernetes.io/hostname"),
    PodCase("pod annotation beats group topology", pod(annotations={"pod-group-name": "k", "kai.scheduler/topology-required-placement": "kubernetes.io/hostname"}),
            (podgroup("k", api=KAI, minMember=2, topologyConstraint={"requiredTopologyLevel": "topology.acme.io/rack"}),),
            "k", 2, "kubernetes.io/hostname"),
]


@pytest.mark.parametrize("case", POD_CASES, ids=lambda c: c.name)
def test_pod_gang_and_topology(case):
    w = normalize(request(case.pod), snapshot(*case.objects))
    assert (w.gang, w.min_members, w.topology_required, w.topology_preferred) == (
        case.want_gang, case.want_min, case.want_required, case.want_preferred)
    assert w.pods == 1 and w.problems == ()


@dataclass
class GroupCase:
    name: str
    obj: dict
    want_kind: str
    want_pods: int
    want_gpus: int
    want_total: int
    want_min: int | None
    want_required: str | None = None
    want_sets: tuple = ()


def kueue_set(name, count, gpus, min_count=None):
    ps = {"name": name, "count": count, "template": {"spec": {"containers": [container(limits={"nvidia.com/gpu": gpus})]}}}
    if min_count is not None:
        ps["minCount"] = min_count
    return ps


GROUP_CASES = [
    GroupCase("coscheduling with minResources", podgroup("g", minMember=4, minResources={"nvidia.com/gpu": "32"}), "PodGroup", 4, 8000, 32000, 4),
    GroupCase("volcano tasks", podgroup("v", api=VOLCANO, minMember=3, minTaskMember={"ps": 1, "worker": 2}), "PodGroup", 3, 0, 0, 3,
              want_sets=(("ps", 1), ("worker", 2))),
    GroupCase("kai subgroups + topology", podgroup("k", api=KAI, minMember=4, topologyConstraint={"requiredTopologyLevel": "topology.acme.io/rack"},
                                                   subGroups=[{"name": "a", "minMember": 2}, {"name": "b", "minMember": 2}]),
              "PodGroup", 4, 0, 0, 4, "topology.acme.io/rack", (("a", 2), ("b", 2))),
    GroupCase("upstream podgroup", podgroup("u", api=UPSTREAM_PG, schedulingPolicy={"gang": {"minCount": 16}}), "PodGroup", 16, 0, 0, 16),
    GroupCase("upstream workload sums gangs", workload("w", podGroups=[{"name": "a", "policy": {"gang": {"minCount": 2}}},
                                                                       {"name": "b", "policy": {"gang": {"minCount": 6}}}]),
              "Workload", 8, 0, 0, 8, want_sets=(("a", 2), ("b", 6))),
    GroupCase("kueue workload with gpus", workload("q", api="kueue.x-k8s.io/v1beta1", podSets=[kueue_set("launcher", 1, "0"), kueue_set("workers", 4, "8")]),
              "Workload", 5, 6400, 32000, 5, want_sets=(("launcher", 1), ("workers", 4))),
    GroupCase("kueue partial admission minCount", workload("q", api="kueue.x-k8s.io/v1beta1", podSets=[kueue_set("w", 8, "1", min_count=4)]),
              "Workload", 4, 1000, 4000, 4, want_sets=(("w", 8),)),
]


@pytest.mark.parametrize("case", GROUP_CASES, ids=lambda c: c.name)
def test_group_objects(case):
    w = normalize(request(case.obj, resource="podgroups"), snapshot())
    assert (w.kind, w.pods, w.gpus, w.total_gpus, w.min_members, w.topology_required) == (
        case.want_kind, case.want_pods, case.want_gpus, case.want_total, case.want_min, case.want_required)
    assert tuple((ps.name, ps.count) for ps in w.pod_sets) == case.want_sets
    assert w.gang == case.obj["metadata"]["name"]


def test_group_without_minimum_has_no_min_members():
    w = normalize_object(podgroup("g"), snapshot())
    assert (w.min_members, w.pods, w.problems) == (None, 1, ())


def test_group_with_bad_minimum_is_a_problem():
    w = normalize_object(podgroup("g", minMember="lots"), snapshot())
    assert [p.code for p in w.problems] == ["MalformedQuantity"] and "spec.minMember" in w.problems[0].message
