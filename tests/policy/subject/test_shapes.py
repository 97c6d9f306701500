"""Fields of the wrong type, invalid resource names and requests that differ from limits are located problems, never zero GPUs."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from policy.subject.dialects.shape import valid_resource_name
from policy.subject.normalize import normalize
from tests.policy.builders import container, gpu_container, pod, podgroup, request, snapshot


@dataclass
class Case:
    name: str
    obj: dict
    want_codes: list
    want_in_message: str = ""
    kind: str = "Pod"


def spec(**fields) -> dict:
    return pod("p", "team-a", gpus="4", **fields)


def with_container(**fields) -> dict:
    return pod("p", "team-a", containers=[{**gpu_container("4"), **fields}])


def group(**spec_fields) -> dict:
    return podgroup("g", **{"minMember": 2, "minResources": {"nvidia.com/gpu": "8"}, **spec_fields})


CASES = [
    Case("healthy pod", pod("p", "team-a", gpus="4"), []),
    Case("containers a string", {**pod("p"), "spec": {"containers": "x"}}, ["MalformedObject"], "spec.containers: expected a list of objects, got string"),
    Case("containers empty string", {**pod("p"), "spec": {"containers": ""}}, ["MalformedObject"], "spec.containers: expected a list of objects"),
    Case("a container a string", pod("p", containers=["x"]), ["MalformedObject"], "spec.containers[0]: expected an object"),
    Case("init containers a map", pod("p", gpus="1", init_containers=None, initContainers={"a": {}}), ["MalformedObject"],
         "spec.initContainers: expected a list of objects, got object"),
    Case("resources a list", with_container(resources=[]), ["MalformedObject"], "spec.containers[0].resources: expected an object, got list"),
    Case("limits false", with_container(resources={"limits": False}), ["MalformedObject"], "spec.containers[0].resources.limits: expected an object, got boolean"),
    Case("spec a string", {**pod("p"), "spec": ""}, ["MalformedObject"], "spec: expected an object, got string"),
    Case("metadata a list", {**pod("p"), "metadata": []}, ["MalformedObject"], "metadata: expected an object, got list"),
    Case("labels a string", pod("p", gpus="1", labels=None) | {"metadata": {"name": "p", "namespace": "team-a", "labels": "x"}},
         ["MalformedObject"], "metadata.labels: expected an object of strings, got string"),
    Case("a label value a number", pod("p", gpus="1", labels={"team": 3}), ["MalformedObject"], "metadata.labels[team]: expected a string, got number"),
    Case("annotations a list", pod("p", gpus="1") | {"metadata": {"name": "p", "annotations": ["a"]}}, ["MalformedObject"], "metadata.annotations"),
    Case("privileged a string", with_container(securityContext={"privileged": "true"}), ["MalformedObject"],
         "spec.containers[0].securityContext.privileged: expected a boolean, got string"),
    Case("securityContext a string", with_container(securityContext="privileged"), ["MalformedObject"], "securityContext: expected an object"),
    Case("hostNetwork a string", spec(hostNetwork="true"), ["MalformedObject"], "spec.hostNetwork: expected a boolean"),
    Case("volumes a map", spec(volumes={"v": {"hostPath": {"path": "/"}}}), ["MalformedObject"], "spec.volumes: expected a list of objects"),
    Case("ephemeral containers a string", spec(ephemeralContainers="x"), ["MalformedObject"], "spec.ephemeralContainers"),
    Case("priority class a list", spec(priorityClassName=["prod"]), ["MalformedObject"], "spec.priorityClassName: expected a string, got list"),
    Case("upper-case resource name", pod("p", containers=[container(limits={"NVIDIA.COM/GPU": "4"})]), ["MalformedResourceName"],
         "'NVIDIA.COM/GPU' is not a valid resource name (lowercase domain prefix, as the API server requires); did you mean 'nvidia.com/gpu'?"),
    Case("unprefixed unknown resource", pod("p", containers=[container(limits={"gpu": "4"})]), ["MalformedResourceName"], "limits[gpu]"),
    Case("hugepages are standard", pod("p", containers=[container(limits={"hugepages-2Mi": "1Gi", "cpu": "1"})]), []),
    Case("cpu, memory, ephemeral-storage beside the GPU in both tables (skipped before the prefix test)",
         pod("p", containers=[container(limits={"cpu": "1", "memory": "1Gi", "ephemeral-storage": "1Gi", "nvidia.com/gpu": "1"},
                                        requests={"cpu": "1", "memory": "1Gi", "ephemeral-storage": "1Gi", "nvidia.com/gpu": "1"})]), []),
    Case("an invalid request name after cpu is still reported", pod("p", containers=[container(requests={"cpu": "1", "Memory": "1Gi"})]),
         ["MalformedResourceName"], "requests[Memory]"),
    Case("request below its limit", pod("p", containers=[container(limits={"nvidia.com/gpu": "4"}, requests={"nvidia.com/gpu": "0"})]),
         ["MalformedResourceRequests"], "spec.containers[0].resources.requests[nvidia.com/gpu]: '0' differs from limits '4'"),
    Case("request equal in another spelling", pod("p", containers=[container(limits={"nvidia.com/gpu": 4}, requests={"nvidia.com/gpu": "4"})]), []),
    Case("group minResources a string", group(minResources="128"), ["MalformedObject"], "spec.minResources: expected an object, got string", "PodGroup"),
    Case("group minResources with an invalid name", group(minResources={"NVIDIA.COM/GPU": "8"}), ["MalformedResourceName"], "spec.minResources", "PodGroup"),
    Case("group labels a number", {**group(), "metadata": {"name": "g", "namespace": "team-a", "labels": 3}}, ["MalformedObject"],
         "metadata.labels: expected an object of strings, got number", "PodGroup"),
    Case("group spec a list", {**group(), "spec": []}, ["MalformedObject"], "spec: expected an object, got list", "PodGroup"),
    Case("group apiVersion a list", {**group(), "apiVersion": ["scheduling.x-k8s.io/v1alpha1"]}, ["MalformedObject"], "apiVersion: expected a string", "PodGroup"),
    Case("volcano minTaskMember a number", podgroup("v", api="scheduling.volcano.sh/v1beta1", minMember=2, minTaskMember=1), ["MalformedObject"],
         "spec.minTaskMember: expected an object", "PodGroup"),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_wrong_shapes_are_located_problems(case):
    w = normalize(request(case.obj, kind=case.kind, resource="pods" if case.kind == "Pod" else "podgroups"), snapshot())
    assert [p.code for p in w.problems] == case.want_codes, w.problems
    if case.want_in_message:
        assert case.want_in_message in w.problems[0].message


@pytest.mark.parametrize("name,want", [
    ("nvidia.com/gpu", True), ("nvidia.com/GPU", True), ("cpu", True), ("hugepages-1Gi", True), ("example.com/foo_bar.x", True),
    ("NVIDIA.COM/GPU", False), ("Nvidia.com/gpu", False), ("gpu", False), ("CPU", False), ("nvidia.com/", False),
    ("/gpu", False), ("nvidia..com/gpu", False), ("nvidia.com/-gpu", False), (" nvidia.com/gpu", False), ("a/b/c", False),
])
def test_resource_names_follow_the_api_validation(name, want):
    assert valid_resource_name(name) is want


@pytest.mark.parametrize("field,value,want", [
    ("nodeSelector", ["nvidia.com/gpu.product"], "spec.nodeSelector: expected an object of strings, got list"),
    ("nodeSelector", {"nvidia.com/gpu.product": 3}, "spec.nodeSelector[nvidia.com/gpu.product]: expected a string, got number"),
    ("affinity", {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": {"a": 1}}}},
     "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms: expected a list"),
    ("affinity", {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": ["x"]}]}}},
     "nodeSelectorTerms[0].matchExpressions[0]: expected an object, got string"),
    ("nodeName", ["n1"], "spec.nodeName: expected a string, got list"),
])
def test_a_reader_that_raises_still_names_the_field(field, value, want):
    w = normalize(request(pod("p", "team-a", gpus="4", **{field: value})), snapshot())
    assert w.problems and w.problems[0].code == "MalformedObject" and want in w.problems[0].message, w.problems
