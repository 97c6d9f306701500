"""The AdmissionReview request around the object: identity, operations, priority, namespace, escalations."""

from dataclasses import dataclass, field, fields

import pytest

from policy.subject.normalize import normalize, normalize_object, service_account
from policy.subject.model import Workload
from tests.policy.builders import container, namespace, pod, priority_class, request, snapshot


def cluster():
    return snapshot(
        namespace("team-a", {"team": "team-a"}), priority_class("prod", 500), priority_class("batch", 100),
        pod("running", "agents-sandbox", gpus="1", labels={"agents.acme.io/state": "awake"}),
    )


@dataclass
class Case:
    name: str
    request: dict
    want: dict = field(default_factory=dict)


CASES = [
    Case("user and groups", request(pod(gpus="1"), user="bob", groups=("acme:ml", "system:authenticated")),
         {"user": "bob", "groups": ("acme:ml", "system:authenticated"), "serviceaccount": None}),
    Case("service account user", request(pod(), user="system:serviceaccount:agents-x:runner"),
         {"serviceaccount": "agents-x/runner"}),
    Case("namespace labels from cluster", request(pod(namespace="team-a")), {"namespace_labels": {"kubernetes.io/metadata.name": "team-a", "team": "team-a"}}),
    Case("unknown namespace has no labels", request(pod(namespace="nope")), {"namespace_labels": {}}),
    Case("priority set by API server", request(pod(priorityClassName="prod", priority=500)), {"priority": 500, "priority_class": "prod"}),
    Case("priority from class", request(pod(priorityClassName="batch")), {"priority": 100, "priority_class": "batch"}),
    Case("unknown class keeps name", request(pod(priorityClassName="gold")), {"priority": None, "priority_class": "gold"}),
    Case("privileged init container", request(pod(init_containers=[container(privileged=True)])), {"privileged": True, "host_path": False}),
    Case("privileged ephemeral container", request(pod(ephemeralContainers=[{"name": "dbg", "securityContext": {"privileged": True}}])), {"privileged": True}),
    Case("host path volume", request(pod(volumes=[{"name": "h", "hostPath": {"path": "/"}}])), {"host_path": True, "privileged": False}),
    Case("host network", request(pod(hostNetwork=True)), {"host_network": True}),
    Case("dry run", request(pod(), dry_run=True), {"dry_run": True}),
    Case("pods and totals", request(pod(gpus="2")), {"pods": 1, "gpus": 2000, "total_gpus": 2000, "kind": "Pod"}),
    Case("delete uses old object", request(None, operation="DELETE", old=pod("gone", gpus="4"), name="gone", namespace="team-a"),
         {"operation": "DELETE", "gpus": 4000, "name": "gone", "kind": "Pod"}),
    Case("delete of unknown pod, no object", request(None, operation="DELETE", name="x", namespace="team-a"), {"gpus": 0, "kind": "Pod"}),
    Case("exec into a known pod", request({"kind": "PodExecOptions", "command": ["sh"]}, operation="CONNECT", sub="exec",
                                          kind="PodExecOptions", name="running", namespace="agents-sandbox"),
         {"kind": "Pod", "operation": "CONNECT", "subresource": "exec", "gpus": 1000, "labels": {"agents.acme.io/state": "awake"}}),
    Case("attach to an unknown pod", request({"kind": "PodAttachOptions"}, operation="CONNECT", sub="attach", kind="PodAttachOptions",
                                             name="ghost", namespace="agents-sandbox"),
         {"kind": "Pod", "subresource": "attach", "gpus": 0, "name": "ghost"}),
    Case("unknown kind is quick and gpu-free", request({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "team-a", "labels": {"a": "b"}}},
                                                       resource="configmaps"),
         {"kind": "ConfigMap", "gpus": 0, "labels": {"a": "b"}, "resource": "configmaps", "problems": ()}),
    Case("generateName pod", request({"apiVersion": "v1", "kind": "Pod", "metadata": {"generateName": "job-", "namespace": "team-a"},
                                      "spec": {"containers": [container(limits={"nvidia.com/gpu": "1"})]}}), {"name": None, "gpus": 1000}),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_request_fields(case):
    w = normalize(case.request, cluster())
    assert {k: getattr(w, k) for k in case.want} == case.want


@pytest.mark.parametrize("classes,spec,want", [
    ((("low", 10, True), ("mid", 50, False)), {}, (10, "low")),
    ((("low", 10, True), ("high", 90, True)), {}, (10, "low")),  # two defaults (a race): 1.36 picks the lowest
    ((("mid", 50, False),), {}, (None, None)),
    ((("low", 10, True),), {"priorityClassName": "mid"}, (None, "mid")),
    ((("low", 10, True),), {"priority": 7}, (7, None)),
])
def test_global_default_priority_class_fills_an_unset_pod(classes, spec, want):
    pcs = []
    for name, value, default in classes:
        pc = priority_class(name, value)
        pc["globalDefault"] = default
        pcs.append(pc)
    w = normalize(request(pod(**spec)), snapshot(*pcs))
    assert (w.priority, w.priority_class) == want


def test_update_keeps_old_object():
    old, new = pod("p", gpus="1"), pod("p", gpus="2")
    w = normalize(request(new, operation="UPDATE", old=old), cluster())
    assert (w.gpus, w.old_obj is old, w.obj is new) == (2000, True, True)


def test_normalize_object_of_live_pod():
    w = normalize_object(pod("p", "team-a", gpus="3", priorityClassName="prod"), cluster())
    assert (w.kind, w.user, w.gpus, w.priority, w.namespace_labels["team"]) == ("Pod", None, 3000, 500, "team-a")


@pytest.mark.parametrize("user,want", [
    ("system:serviceaccount:ns:name", "ns/name"), ("system:serviceaccount:ns", None), ("alice", None), (None, None),
])
def test_service_account(user, want):
    assert service_account(user) == want


def test_fast_path_field_order_is_what_normalize_assumes():
    # normalize builds Workloads positionally for speed; a reordered contract must fail here, not silently.
    assert [f.name for f in fields(Workload)][:35] == [
        "kind", "operation", "name", "namespace", "namespace_labels", "labels", "annotations", "user", "groups",
        "serviceaccount", "priority", "priority_class", "pods", "gpus", "total_gpus", "fraction", "gpu_memory",
        "gpu_product", "gpu_model", "gang", "min_members", "topology_required", "topology_preferred", "agent",
        "privileged", "host_path", "host_network", "resource", "subresource", "uid", "dry_run", "pod_sets",
        "problems", "obj", "old_obj",
    ]


def test_fast_built_workload_equals_the_slow_one():
    w = normalize(request(pod("p", "team-a", gpus="1", labels={"x": "y"}), user="u"), cluster())
    slow = Workload(**{f.name: getattr(w, f.name) for f in fields(Workload)})
    assert w == slow and type(w) is Workload
