"""Charge once for KAITO Workspaces and RayServices: the admitted object holds its GPUs, its controller's children are not charged again, its pods take their share.

Object shapes as the controllers write them (facts from the KAITO and KubeRay sources):
- KAITO (pkg/workspace/manifests): the inference StatefulSet and the tuning Job are named after
  the Workspace and controller-owned by it; their pod templates carry `kaito.sh/workspace: <name>`.
  Each preset pod takes all the GPUs of one node of `resource.instanceType`.
- KubeRay (rayservice_controller.go): a RayService's RayCluster is `<rayservice>-raycluster-<5 random>`,
  controller-owned by the RayService, labelled `ray.io/originated-from-crd: RayService` and
  `ray.io/originated-from-cr-name: <rayservice>`; its spec is the RayService's `rayClusterConfig`.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import pytest

from lang import compile_policies
from policy.cluster.snapshot import ClusterSnapshot
from policy.engine import Engine
from tests.policy.engine.test_member_holds import OBJECTS, held, kaito_pod, ray_pod, ref, review, stranger

POLICY = '''
quota serving { for namespace == "serving"  gpus 16 }
quota b { for namespace == "team-b"  gpus 8 }
'''
WS_KEY, RS_KEY = "wl:serving/Workspace/ws-llama", "wl:team-b/RayService/llm-serve"
P5 = "p5.48xlarge"


def p5_node(name: str) -> dict:
    """An 8-GPU node of KAITO's instance type, as the cloud provider labels it."""
    labels = {"kubernetes.io/hostname": name, "node.kubernetes.io/instance-type": P5, "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    status = {"allocatable": {"nvidia.com/gpu": "8"}, "capacity": {"nvidia.com/gpu": "8"},
              "conditions": [{"type": "Ready", "status": "True"}]}
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}, "spec": {}, "status": status}


def workspace(count: int = 2) -> dict:
    """ws-llama: a preset on `count` p5.48xlarge nodes, 8 GPUs each."""
    return {"apiVersion": "kaito.sh/v1beta1", "kind": "Workspace",
            "metadata": {"name": "ws-llama", "namespace": "serving", "uid": "ws-uid-1", "generation": 1},
            "resource": {"count": count, "instanceType": P5, "labelSelector": {"matchLabels": {"apps": "llama"}}},
            "inference": {"preset": {"name": "llama-3.1-70b-instruct", "accessMode": "public"}}}


def kaito_statefulset(replicas: int = 2) -> dict:
    """The inference StatefulSet KAITO makes for ws-llama: same name, controller-owned by the Workspace."""
    labels = {"kaito.sh/workspace": "ws-llama"}
    spec = {"containers": [{"name": "ws-llama", "image": "mcr.microsoft.com/aks/kaito/kaito-llama:0.1",
                            "resources": {"limits": {"nvidia.com/gpu": "8"}, "requests": {"nvidia.com/gpu": "8"}}}]}
    meta = {"name": "ws-llama", "namespace": "serving", "uid": "ss-uid-1", "annotations": {"workspace.kaito.io/revision": "1"},
            "ownerReferences": [ref("kaito.sh/v1beta1", "Workspace", "ws-llama", "ws-uid-1")]}
    return {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": meta,
            "spec": {"replicas": replicas, "podManagementPolicy": "Parallel", "serviceName": "ws-llama-headless",
                     "selector": {"matchLabels": labels}, "template": {"metadata": {"labels": labels}, "spec": spec}}}


def kaito_tuning_job() -> dict:
    """A tuning Workspace's Job: named after it, controller-owned by it."""
    labels = {"kaito.sh/workspace": "ws-llama"}
    spec = {"restartPolicy": "Never", "containers": [{"name": "tuning", "image": "kaito-tuning:0.1", "resources": {"limits": {"nvidia.com/gpu": "8"}}}]}
    meta = {"name": "ws-llama", "namespace": "serving", "labels": labels,
            "ownerReferences": [ref("kaito.sh/v1beta1", "Workspace", "ws-llama", "ws-uid-1")]}
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta, "spec": {"template": {"metadata": {"labels": labels}, "spec": spec}}}


def rayservice(replicas: int = 2) -> dict:
    """llm-serve: a GPU-less head + `replicas` workers of 4 GPUs (tests/fixtures/workloads/ray.yaml)."""
    rs = copy.deepcopy(OBJECTS["RayService"])
    rs["spec"]["rayClusterConfig"]["workerGroupSpecs"][0]["replicas"] = replicas
    return rs


def rayservice_cluster(name: str = "llm-serve-raycluster-x2k9p") -> dict:
    """The RayCluster KubeRay makes for llm-serve."""
    meta = {"name": name, "namespace": "team-b", "uid": "rc-svc-1",
            "labels": {"ray.io/originated-from-crd": "RayService", "ray.io/originated-from-cr-name": "llm-serve"},
            "ownerReferences": [ref("ray.io/v1", "RayService", "llm-serve", OBJECTS["RayService"]["metadata"]["uid"])]}
    return {"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": meta, "spec": copy.deepcopy(rayservice()["spec"]["rayClusterConfig"])}


def engine() -> Engine:
    ps, diags = compile_policies([("k.policy", POLICY)])
    assert not [d for d in diags if d.severity == "error"], diags
    return Engine(ps)


def delete(obj):
    return review(obj, "DELETE")


@dataclass
class Case:
    name: str
    workload: object  # builder of the admitted object
    key: str  # its hold
    steps: list  # builders of the requests admitted after it (a review builder, or an object builder to CREATE)
    want_allowed: list
    want_held: int  # milli-GPU left in its hold
    want_total: int  # milli-GPU held in all: never more than once
    stranger_ns: str
    want_stranger: bool  # whether another 1-GPU pod of that namespace fits afterwards
    want_first: bool = True  # whether the object itself is admitted


CASES = [
    Case("a KAITO preset Workspace holds count x its instance type's GPUs", workspace, WS_KEY, [], [], 16000, 16000, "serving", False),
    Case("one asking more than the quota is denied at apply", lambda: workspace(3), WS_KEY, [], [], 0, 0, "serving", True, want_first=False),
    Case("its StatefulSet (KAITO's child) is not charged again",
         workspace, WS_KEY, [kaito_statefulset], [True], 16000, 16000, "serving", False),
    Case("its tuning Job (KAITO's child) is not charged again",
         workspace, WS_KEY, [kaito_tuning_job], [True], 16000, 16000, "serving", False),
    Case("its pods find the hold by `kaito.sh/workspace` and take their share",
         workspace, WS_KEY, [kaito_statefulset, lambda: kaito_pod("ws-llama", 0), lambda: kaito_pod("ws-llama", 1)],
         [True, True, True], 0, 16000, "serving", False),
    Case("a pod of another Workspace takes nothing", workspace, WS_KEY, [lambda: kaito_pod("ws-other", 0)], [False], 16000, 16000,
         "serving", False),
    Case("the Workspace's DELETE releases its hold", workspace, WS_KEY, [lambda: delete(workspace())], [True], 0, 0, "serving", True),
    Case("a RayService holds its rayClusterConfig's workers' GPUs", rayservice, RS_KEY, [], [], 8000, 8000, "team-b", False),
    Case("its RayCluster (`<rayservice>-raycluster-<5>`) is not charged again",
         rayservice, RS_KEY, [rayservice_cluster], [True], 8000, 8000, "team-b", False),
    Case("the cluster's pods take from the RayService's hold",
         rayservice, RS_KEY, [rayservice_cluster, lambda: ray_pod("llm-serve-raycluster-x2k9p", 0),
                              lambda: ray_pod("llm-serve-raycluster-x2k9p", 1)], [True, True, True], 0, 8000, "team-b", False),
    Case("a scale down of the RayService releases what it drops", rayservice, RS_KEY,
         [lambda: review(rayservice(1), "UPDATE") | {"oldObject": rayservice()}], [True], 4000, 4000, "team-b", True),
    Case("the RayService's DELETE releases its hold", rayservice, RS_KEY, [lambda: delete(rayservice())], [True], 0, 0, "team-b", True),
]


def _request(built):
    return built if "operation" in built else review(built)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_kaito_and_rayservice_holds(case):
    e, snap = engine(), ClusterSnapshot.from_objects([p5_node("p5-0"), p5_node("p5-1"), p5_node("p5-2")])
    d = e.decide(review(case.workload()), snap, 0.0)
    assert d.allowed is case.want_first, d.reasons
    allowed = [e.decide(_request(step()), snap, 1.0).allowed for step in case.steps]
    assert allowed == case.want_allowed
    assert held(snap, case.key) == case.want_held
    assert sum(m for m, _, _ in snap.reservations.totals().values()) == case.want_total
    assert e.decide(review(stranger(case.stranger_ns)), snap, 2.0, reserve=False).allowed is case.want_stranger


def test_the_watch_releases_a_deleted_workspaces_hold():
    e, snap = engine(), ClusterSnapshot.from_objects([p5_node("p5-0"), p5_node("p5-1")])
    assert e.decide(review(workspace()), snap, 0.0).allowed
    snap.apply("ADDED", workspace())
    assert held(snap, WS_KEY) == 16000
    snap.apply("DELETED", workspace())
    assert held(snap, WS_KEY) == 0
