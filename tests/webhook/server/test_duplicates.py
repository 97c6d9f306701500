"""Duplicate GPU keys: found and located when present, and the slow scan skipped when the count rules them out."""

from __future__ import annotations

import orjson
import pytest

from webhook.server import duplicates
from tests.webhook.wh_harness import pod, review


def body_of(doc: dict) -> bytes:
    return orjson.dumps(doc)


GPU_POD = review(pod("p", gpus=4, labels={"nvidia.com/gpu.present": "true"}))
GPU_POD["request"]["object"]["spec"]["nodeSelector"] = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
GPU_POD["request"]["object"]["spec"]["tolerations"] = [{"key": "nvidia.com/gpu", "operator": "Exists"}]
LIMITS = b'"limits":{"nvidia.com/gpu":"4"}'


CASES = [
    {"name": "the GPU key twice", "body": body_of(GPU_POD).replace(LIMITS, b'"limits":{"nvidia.com/gpu":"4","nvidia.com/gpu":"0"}'),
     "want": "request.object.spec.containers[0].resources.limits: key 'nvidia.com/gpu' appears twice ('4', then '0')"},
    {"name": "twice, with a space before the colon", "body": body_of(GPU_POD).replace(LIMITS, b'"limits":{"nvidia.com/gpu":"4","nvidia.com/gpu" :"0"}'),
     "want": "key 'nvidia.com/gpu' appears twice"},
    {"name": "twice, once escaped", "body": body_of(GPU_POD).replace(LIMITS, b'"limits":{"nvidia.com/gpu":"4","nvidia.com\\/gpu":"0"}'),
     "want": "key 'nvidia.com/gpu' appears twice"},
    {"name": "the limits map twice", "body": body_of(GPU_POD).replace(LIMITS, LIMITS + b',"limits":{}'),
     "want": "request.object.spec.containers[0].resources: key 'limits' appears twice"},
    {"name": "the object twice", "body": body_of(GPU_POD).replace(b'"object":{', b'"object":' + orjson.dumps(GPU_POD["request"]["object"]) + b',"object":{', 1),
     "want": "request: key 'object' appears twice"},
    {"name": "a plain GPU pod", "body": body_of(GPU_POD), "want": None},
    {"name": "a label key twice (not a GPU map)", "body": body_of(review(pod("p"))).replace(b'"labels":{}', b'"labels":{"a":"1","a":"2"}'), "want": None},
]


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_duplicate_gpu_keys_are_located(case):
    req = orjson.loads(case["body"])["request"]
    got = duplicates.duplicate_problem(case["body"], req)
    if case["want"] is None:
        assert got is None
    else:
        assert got is not None and got.code == "MalformedDuplicateKey" and case["want"] in got.message, got


def test_the_slow_scan_runs_only_when_the_count_differs(monkeypatch):
    scans = []
    real = duplicates._scan
    monkeypatch.setattr(duplicates, "_scan", lambda body: scans.append(body) or real(body))
    plain = body_of(GPU_POD)  # limits, labels and nodeSelector keys all accounted for; the toleration's value is not a key
    assert duplicates.duplicate_problem(plain, orjson.loads(plain)["request"]) is None
    assert scans == []
    escaped = plain.replace(b'"image":"nvcr.io/nvidia/pytorch:24.05-py3"', b'"image":"a\\u0026b"')
    assert duplicates.duplicate_problem(escaped, orjson.loads(escaped)["request"]) is None
    assert scans == [escaped]  # an escape could spell a key another way: checked exactly, found clean


def _workload(limits: bytes = b'"limits":{"nvidia.com/gpu":"8"}') -> bytes:
    """A Kueue Workload CREATE whose one pod set asks 8 GPUs (its template's keys are counted, not scanned)."""
    obj = {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "Workload", "metadata": {"name": "w", "namespace": "train"},
           "spec": {"podSets": [{"name": "workers", "count": 2, "template": {
               "metadata": {"labels": {"nvidia.com/gpu.present": "true"}},
               "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "8"}}}]}}}]}}
    doc = review(pod("p"))
    doc["request"]["object"] = obj
    doc["request"]["kind"] = {"group": "kueue.x-k8s.io", "version": "v1beta1", "kind": "Workload"}
    return body_of(doc).replace(b'"limits":{"nvidia.com/gpu":"8"}', limits)


TEMPLATE_CASES = [
    {"name": "a Workload's pod set, clean", "body": _workload(), "want": None, "scans": 0},
    {"name": "a Workload's pod set, the GPU key twice", "body": _workload(b'"limits":{"nvidia.com/gpu":"8","nvidia.com/gpu":"0"}'),
     "want": "podSets[0].template.spec.containers[0].resources.limits: key 'nvidia.com/gpu' appears twice", "scans": 1},
    {"name": "a Workload's pod set, its limits map twice", "body": _workload(b'"limits":{"nvidia.com/gpu":"8"},"limits":{}'),
     "want": "resources: key 'limits' appears twice", "scans": 1},
]


@pytest.mark.parametrize("case", TEMPLATE_CASES, ids=[c["name"] for c in TEMPLATE_CASES])
def test_pod_set_templates_are_counted_not_scanned(case, monkeypatch):
    scans = []
    real = duplicates._scan
    monkeypatch.setattr(duplicates, "_scan", lambda body: scans.append(body) or real(body))
    got = duplicates.duplicate_problem(case["body"], orjson.loads(case["body"])["request"])
    if case["want"] is None:
        assert got is None
    else:
        assert got is not None and case["want"] in got.message, got
    assert len(scans) == case["scans"]
