"""Bad input never raises: each failure class becomes a Problem naming the field path and the value."""

from dataclasses import dataclass

import pytest
from hypothesis import given, settings, strategies as st

from policy.subject.normalize import normalize, read_demand
from tests.policy.builders import container, pod, request, snapshot
import os

FUZZ = int(os.environ.get("ALLOT_FUZZ_EXAMPLES", "60"))


@dataclass
class Case:
    name: str
    pod: dict
    want_code: str
    want_in_message: str
    want_gpus: int = 0


def res(**limits):
    return pod(containers=[container(limits=limits)])


CASES = [
    Case("malformed whole", res(**{"nvidia.com/gpu": "two"}), "MalformedQuantity", "spec.containers[0].resources.limits[nvidia.com/gpu]"),
    Case("fractional whole", res(**{"nvidia.com/gpu": "0.5"}), "MalformedQuantity", "'0.5'"),
    Case("unicode digit", res(**{"nvidia.com/gpu": "²"}), "MalformedQuantity", "spec.containers[0].resources.limits[nvidia.com/gpu]"),
    Case("negative whole", res(**{"nvidia.com/gpu": "-1"}), "MalformedQuantity", "'-1'"),
    Case("unknown mig profile", res(**{"nvidia.com/mig-huge": "1"}), "UnknownGpuDialectValue", "nvidia.com/mig-huge"),
    Case("mig slices out of range", res(**{"nvidia.com/mig-9g.90gb": "1"}), "UnknownGpuDialectValue", "mig-9g.90gb"),
    Case("hami cores over 100 clamp to 100 (as HAMi does), a warning", res(**{"nvidia.com/gpu": "1", "nvidia.com/gpucores": "150"}), "ClampedGpuCores", "'150'", 1000),
    Case("hami pct zero", res(**{"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "0"}), "InvalidFraction", "gpumem-percentage", 1000),
    Case("hami mem text", res(**{"nvidia.com/gpu": "1", "nvidia.com/gpumem": "lots"}), "MalformedQuantity", "'lots'", 1000),
    Case("kai negative fraction", pod(annotations={"gpu-fraction": "-0.5"}), "InvalidFraction", "metadata.annotations[gpu-fraction]: '-0.5'"),
    Case("kai fraction over one", pod(annotations={"gpu-fraction": "1.5"}), "InvalidFraction", "'1.5'"),
    Case("kai non-numeric fraction", pod(annotations={"gpu-fraction": "half"}), "InvalidFraction", "'half'"),
    Case("kai bad devices", pod(annotations={"gpu-fraction": "0.5", "gpu-fraction-num-devices": "0"}), "MalformedQuantity", "gpu-fraction-num-devices"),
    Case("kai bad memory", pod(annotations={"gpu-memory": "x"}), "MalformedQuantity", "gpu-memory"),
    Case("dra missing claim", pod(resourceClaims=[{"name": "g", "resourceClaimName": "nope"}]), "MissingResourceClaim", "'nope'"),
    Case("dra missing template", pod(resourceClaims=[{"name": "g", "resourceClaimTemplateName": "t"}]), "MissingResourceClaim", "ResourceClaimTemplate 't'"),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_bad_values_become_problems(case):
    got, problems = read_demand(case.pod, snapshot())
    assert [p.code for p in problems] == [case.want_code]
    assert case.want_in_message in problems[0].message
    assert got.gpus == case.want_gpus


@pytest.mark.parametrize(
    "labels,annotations,spec,want_message",
    [
        ({"scheduling.x-k8s.io/pod-group": "g"}, {}, {}, "coscheduling PodGroup team-a/g"),
        ({}, {"scheduling.k8s.io/group-name": "v"}, {}, "Volcano PodGroup team-a/v"),
        ({}, {"pod-group-name": "k"}, {}, "KAI PodGroup team-a/k"),
        ({}, {}, {"schedulingGroup": {"podGroupName": "u"}}, "PodGroup (scheduling.k8s.io) team-a/u"),
        ({}, {}, {"workloadRef": {"name": "w", "podGroup": "workers"}}, "Workload (scheduling.k8s.io) team-a/w"),
    ],
)
def test_pod_naming_a_missing_group_is_a_problem(labels, annotations, spec, want_message):
    w = normalize(request(pod(labels=labels, annotations=annotations, gpus="1", **spec)), snapshot())
    assert [p.code for p in w.problems] == ["MissingGroup"]
    assert want_message in w.problems[0].message
    assert w.gang is not None and w.min_members is None


def test_kueue_bad_total_count_is_a_problem():
    p = pod(labels={"kueue.x-k8s.io/pod-group-name": "g"}, annotations={"kueue.x-k8s.io/pod-group-total-count": "many"})
    w = normalize(request(p), snapshot())
    assert (w.gang, w.min_members, [x.code for x in w.problems]) == ("g", None, ["MalformedQuantity"])


def test_object_that_is_not_a_mapping_is_a_problem():
    w = normalize({"operation": "CREATE", "kind": {"kind": "Pod"}, "resource": {"resource": "pods"}, "object": [1, 2]}, snapshot())
    assert [p.code for p in w.problems] == ["MalformedObject"]
    assert w.gpus == 0


_json = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 10**6) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(
        ["metadata", "spec", "containers", "resources", "limits", "requests", "nvidia.com/gpu", "nvidia.com/gpumem",
         "annotations", "labels", "gpu-fraction", "resourceClaims", "initContainers", "nodeName", "name", "kind"]), inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=FUZZ, deadline=None)
@given(obj=_json, operation=st.sampled_from(["CREATE", "UPDATE", "DELETE", "CONNECT"]))
def test_normalize_never_raises_on_arbitrary_objects(obj, operation):
    req = {"operation": operation, "kind": {"kind": "Pod"}, "resource": {"resource": "pods"}, "namespace": "team-a",
           "object": obj, "oldObject": obj}
    w = normalize(req, snapshot())
    assert w.gpus >= 0 and w.total_gpus == w.pods * w.gpus


@settings(max_examples=FUZZ, deadline=None)
@given(value=st.one_of(st.text(max_size=12), st.integers(-10, 10**4), st.floats(allow_nan=True), st.none(), st.booleans()),
       key=st.sampled_from(["nvidia.com/gpu", "nvidia.com/gpumem", "nvidia.com/gpucores", "nvidia.com/gpumem-percentage",
                            "nvidia.com/mig-1g.10gb"]))
def test_any_resource_value_is_read_or_reported(value, key):
    got, problems = read_demand(pod(containers=[container(limits={key: value})]), None)
    assert got.gpus >= 0
    assert all(key in p.message for p in problems)
