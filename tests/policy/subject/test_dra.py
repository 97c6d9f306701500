"""DRA: pod claims resolved through ResourceClaims and templates, v1 `exactly` and v1beta1 flat shapes."""

from dataclasses import dataclass, field

import pytest

from policy.subject.normalize import read_demand
from tests.policy.builders import claim, claim_template, device_request, node, pod, snapshot

GI = 2**30


def by_claim(name="c"):
    return pod(resourceClaims=[{"name": "gpu", "resourceClaimName": name}])


def by_template(name="t"):
    return pod(resourceClaims=[{"name": "gpu", "resourceClaimTemplateName": name}])


@dataclass
class Case:
    name: str
    pod: dict
    objects: tuple
    want_gpus: int
    want_fraction: int | None = None
    want_memory: int | None = None
    want_problems: list = field(default_factory=list)


H100 = node("h1")  # 81559 MiB per device: the only size in these snapshots
CASES = [
    Case("v1 claim one device", by_claim(), (claim("c", requests=[device_request()]),), 1000),
    Case("v1 claim count 4", by_claim(), (claim("c", requests=[device_request(count=4)]),), 4000),
    Case("v1beta1 flat shape", by_claim(), (claim("c", requests=[device_request(count=2, v1=False)], api="resource.k8s.io/v1beta1"),), 2000),
    Case("template", by_template(), (claim_template("t", requests=[device_request(count=2)]),), 2000),
    Case("first available choice", by_claim(), (claim("c", requests=[{"name": "g", "firstAvailable": [
        {"name": "big", "deviceClassName": "gpu.nvidia.com", "count": 2}, {"name": "small", "deviceClassName": "gpu.nvidia.com"}]}]),), 2000),
    Case("non-gpu class ignored", by_claim(), (claim("c", requests=[device_request(device_class="nic.example.com")]),), 0),
    Case("custom class with gpu selector", by_claim(), (
        claim("c", requests=[device_request(device_class="accel")]),
        {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "accel"},
         "spec": {"selectors": [{"cel": {"expression": "device.driver == 'gpu.nvidia.com'"}}]}}), 1000),
    Case("capacity memory share", by_claim(), (H100, claim("c", requests=[device_request(memory="20389Mi")])), 250, 250, 20389 * 2**20),
    Case("capacity memory, device unknown", by_claim(), (claim("c", requests=[device_request(memory="10Gi")]),), 1000, None, 10 * GI),
    Case("status names generated claim", dict(by_template("gone"), status={"resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": "p-gpu-x1"}]}),
         (claim("p-gpu-x1", requests=[device_request(count=3)]),), 3000),
    Case("pre-1.31 source shape", pod(resourceClaims=[{"name": "gpu", "source": {"resourceClaimName": "c"}}]),
         (claim("c", requests=[device_request()]),), 1000),
    Case("allocation mode All", by_claim(), (claim("c", requests=[{"name": "g", "exactly": {"deviceClassName": "gpu.nvidia.com", "allocationMode": "All"}}]),),
         0, want_problems=["UnknownGpuDialectValue"]),
    Case("bad count", by_claim(), (claim("c", requests=[device_request(count="two")]),), 0, want_problems=["MalformedQuantity"]),
    Case("bad capacity", by_claim(), (claim("c", requests=[device_request(memory="lots")]),), 0, want_problems=["MalformedQuantity"]),
    Case("missing claim", by_claim("nope"), (), 0, want_problems=["MissingResourceClaim"]),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_dra_claims(case):
    got, problems = read_demand(case.pod, snapshot(*case.objects))
    assert (got.gpus, got.fraction, got.gpu_memory) == (case.want_gpus, case.want_fraction, case.want_memory)
    assert [p.code for p in problems] == case.want_problems


def _job_claiming(template: str, namespace=None) -> dict:
    pod_tpl = {"spec": {"containers": [{"name": "c", "image": "x", "resources": {"claims": [{"name": "gpu"}]}}],
                        "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": template}]}}
    meta = {"name": "j"} if namespace is None else {"name": "j", "namespace": namespace}
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta, "spec": {"parallelism": 2, "template": pod_tpl}}


@pytest.mark.parametrize("obj", [
    pytest.param(_job_claiming("t"), id="workload naming no namespace"),
    pytest.param(by_template(), id="pod naming another namespace"),
])
def test_claims_are_looked_up_in_the_judged_namespace(obj):
    from policy.subject.normalize import normalize
    from tests.policy.builders import request

    state = snapshot(claim_template("t", "solo", requests=[device_request(count=2)]))
    w = normalize(request(obj, namespace="solo"), state)
    assert (w.namespace, w.gpus, [p.code for p in w.problems]) == ("solo", 2000, [])


def mig_request(profile=None, count=None, device_class="mig.nvidia.com", v1=True, quote="'"):
    body = device_request(device_class=device_class, count=count, v1=v1)
    inner = body["exactly"] if v1 else body
    if profile:
        inner["selectors"] = [{"cel": {"expression": f"device.attributes[{quote}gpu.nvidia.com{quote}].profile == {quote}{profile}{quote}"}}]
    return body


MIG_CASES = [
    # (name, request, extra objects, milli-GPU, fraction, memory)
    ("one 1g.10gb of seven", mig_request("1g.10gb"), (), 143, 143, 10 * GI),
    ("four 1g.5gb of one A100: 4 slices, not 4 GPUs", mig_request("1g.5gb", count=4), (), 572, 143, 20 * GI),
    ("3g.40gb, v1beta1 flat, double quotes", mig_request("3g.40gb", v1=False, quote='"'), (), 429, 429, 40 * GI),
    ("A30 2g.12gb of four", mig_request("2g.12gb"), (), 500, 500, 12 * GI),
    ("media-extension variant", mig_request("1g.10gb+me"), (), 143, 143, 10 * GI),
    ("profile in a custom DeviceClass", mig_request(None, device_class="small-mig"), ({
        "apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "small-mig"},
        "spec": {"selectors": [{"cel": {"expression": "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'mig'"}},
                               {"cel": {"expression": "device.attributes['gpu.nvidia.com'].profile == '2g.20gb'"}}]}},), 286, 286, 20 * GI),
    ("MIG class, no profile: any partition, counted whole", mig_request(None), (), 1000, None, None),
]


@pytest.mark.parametrize("name, req, objects, want_gpus, want_fraction, want_memory", MIG_CASES, ids=[c[0] for c in MIG_CASES])
def test_mig_partitions_count_their_share_of_a_gpu(name, req, objects, want_gpus, want_fraction, want_memory):
    got, problems = read_demand(by_claim(), snapshot(claim("c", requests=[req], api="resource.k8s.io/v1" if "exactly" in req else "resource.k8s.io/v1beta1"), *objects))
    assert (got.gpus, got.fraction, got.gpu_memory, [p.code for p in problems]) == (want_gpus, want_fraction, want_memory, [])


def test_an_unknown_mig_profile_is_a_located_problem():
    got, problems = read_demand(by_claim(), snapshot(claim("c", requests=[mig_request("9g.1gb")])))
    assert got.gpus == 0 and [p.code for p in problems] == ["UnknownGpuDialectValue"] and "selectors" in problems[0].message


def shared_slice(capacity: dict, driver="gpu.nvidia.com", v1=True, multiple=True):
    device = {"name": "gpu-0", "capacity": capacity}
    if multiple:
        device["allowMultipleAllocations"] = True
    return {"apiVersion": "resource.k8s.io/v1" if v1 else "resource.k8s.io/v1beta1", "kind": "ResourceSlice",
            "metadata": {"name": f"n1-{driver}"},
            "spec": {"driver": driver, "nodeName": "n1", "pool": {"name": "n1", "generation": 1, "resourceSliceCount": 1},
                     "devices": [device if v1 else {"name": "gpu-0", "basic": {k: v for k, v in device.items() if k != "name"}}]}}


MEM80 = {"memory": {"value": "80Gi"}}
CAPACITY_CASES = [
    # (name, request, objects, milli-GPU, fraction)
    ("memory of a shared device", device_request(memory="20Gi"), (shared_slice(MEM80),), 250, 250),
    ("cores not asked, no policy: the whole device", device_request(memory="20Gi"),
     (shared_slice({**MEM80, "multiprocessors": {"value": "132"}}),), 1000, None),
    ("cores not asked, policy default 0", device_request(memory="20Gi"),
     (shared_slice({**MEM80, "multiprocessors": {"value": "132", "requestPolicy": {"default": "0", "validRange": {"min": "0"}}}}),), 250, 250),
    ("valid values round the ask up", device_request(memory="20Gi"),
     (shared_slice({"memory": {"value": "80Gi", "requestPolicy": {"default": "10Gi", "validValues": ["10Gi", "40Gi", "80Gi"]}}}),), 500, 500),
    ("valid range steps round the ask up", device_request(memory="20Gi"),
     (shared_slice({"memory": {"value": "80Gi", "requestPolicy": {"default": "8Gi", "validRange": {"min": "8Gi", "step": "8Gi"}}}}),), 300, 300),
    ("v1beta1 basic device", device_request(memory="20Gi"), (shared_slice(MEM80, v1=False),), 250, 250),
    ("another driver's devices do not count", device_request(memory="20Gi"), (shared_slice(MEM80, driver="gpu.amd.com"),), 1000, None),
    ("a device not shared does not count", device_request(memory="20Gi"), (shared_slice(MEM80, multiple=False),), 1000, None),
]


@pytest.mark.parametrize("name, req, objects, want_gpus, want_fraction", CAPACITY_CASES, ids=[c[0] for c in CAPACITY_CASES])
def test_consumable_capacity_counts_what_it_takes_of_the_shared_device(name, req, objects, want_gpus, want_fraction):
    got, problems = read_demand(by_claim(), snapshot(claim("c", requests=[req]), *objects))
    assert (got.gpus, got.fraction, got.gpu_memory, [p.code for p in problems]) == (want_gpus, want_fraction, 20 * GI, [])


def partitioned_slices(v1=True):
    """A GPU published as partitionable (KEP-4815): its counter set in one slice, the whole device and two partitions in another."""
    def dev(name, size, memory, sms):
        body = {"attributes": {"size": {"string": size}, "gpu.nvidia.com/type": {"string": "gpu" if size == "whole" else "partition"}},
                "consumesCounters": [{"counterSet": "gpu-0", "counters": {"memory": {"value": memory}, "multiprocessors": {"value": sms}}}]}
        return {"name": name, **body} if v1 else {"name": name, "basic": body}
    pool = {"name": "n1", "generation": 1, "resourceSliceCount": 2}
    api = "resource.k8s.io/v1" if v1 else "resource.k8s.io/v1beta1"
    counters = {"apiVersion": api, "kind": "ResourceSlice", "metadata": {"name": "n1-counters"},
                "spec": {"driver": "gpu.nvidia.com", "nodeName": "n1", "pool": pool,
                         "sharedCounters": [{"name": "gpu-0", "counters": {"memory": {"value": "80Gi"}, "multiprocessors": {"value": "132"}}}]}}
    devices = {"apiVersion": api, "kind": "ResourceSlice", "metadata": {"name": "n1-devices"},
               "spec": {"driver": "gpu.nvidia.com", "nodeName": "n1", "pool": pool, "devices": [
                   dev("gpu-0", "whole", "80Gi", "132"), dev("gpu-0-small", "small", "20Gi", "33"), dev("gpu-0-big", "big", "40Gi", "60")]}}
    return (counters, devices)


def selecting(expr=None):
    body = device_request()
    if expr:
        body["exactly"]["selectors"] = [{"cel": {"expression": expr}}]
    return body


PARTITION_CASES = [
    ("a small partition", selecting("device.attributes['gpu.nvidia.com'].size == 'small'"), partitioned_slices(), 250, 250),
    ("a big partition: its largest counter", selecting("device.attributes['gpu.nvidia.com'].size == \"big\""), partitioned_slices(), 500, 500),
    ("by a qualified attribute", selecting("device.attributes['gpu.nvidia.com'].type == 'partition' && device.attributes['gpu.nvidia.com'].size == 'small'"),
     partitioned_slices(), 250, 250),
    ("v1beta1 basic devices", selecting("device.attributes['gpu.nvidia.com'].size == 'small'"), partitioned_slices(v1=False), 250, 250),
    ("no selector: the whole device may be picked", selecting(), partitioned_slices(), 1000, None),
    ("a selector of other logic filters nothing", selecting("device.attributes['gpu.nvidia.com'].size == 'small' || true"), partitioned_slices(), 1000, None),
]


@pytest.mark.parametrize("name, req, objects, want_gpus, want_fraction", PARTITION_CASES, ids=[c[0] for c in PARTITION_CASES])
def test_a_partition_counts_the_counters_it_consumes(name, req, objects, want_gpus, want_fraction):
    got, problems = read_demand(by_claim(), snapshot(claim("c", requests=[req]), *objects))
    assert (got.gpus, got.fraction, [p.code for p in problems]) == (want_gpus, want_fraction, [])
