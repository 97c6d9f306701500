"""Nothing asking for GPUs is skipped silently: unread kinds, uncounted accelerators, and the policy's say over unread objects."""

from __future__ import annotations

import pytest

from lang import compile_policies
from policy.admission import wrap_manifest
from policy.cluster.snapshot import ClusterSnapshot
from policy.engine import Engine
from policy.subject.normalize import normalize

TEMPLATE = {"spec": {"containers": [{"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": 2}}}]}}


def subject(obj):
    return normalize(wrap_manifest(obj, user="alice", groups=["dev"], operation="CREATE")["request"], ClusterSnapshot())


def crd(kind="Notebook", api="kubeflow.org/v1", spec=None):
    return {"apiVersion": api, "kind": kind, "metadata": {"name": "x", "namespace": "team-a"}, "spec": spec if spec is not None else {"template": TEMPLATE}}


@pytest.mark.parametrize("obj, found", [
    (crd(), "a pod template at spec.template"),
    (crd(spec={"podSpec": {"containers": []}}), "a pod template at spec.podSpec"),
    (crd("SparkApplication", "sparkoperator.k8s.io/v1beta2", {"executor": {"gpu": {"name": "nvidia.com/gpu", "quantity": 1}}}), "an accelerator at spec.executor[gpu]"),
    (crd("Thing", "example.com/v1", {"steps": [{"limits": {"example.com/vgpu": 1}}]}), "an accelerator at spec.steps[0].limits[example.com/vgpu]"),
], ids=["pod template", "pod spec", "gpu field", "vgpu in a list"])
def test_an_unread_kind_that_may_ask_gpus_is_named_with_what_was_found(obj, found):
    w = subject(obj)
    unread = [p for p in w.problems if p.code == "UnreadWorkload"]
    assert len(unread) == 1 and found in unread[0].message and obj["kind"] in unread[0].message
    assert (w.unread, w.pods, w.total_gpus) == (True, 0, 0)


@pytest.mark.parametrize("obj", [
    crd("Widget", "example.com/v1", {"size": 3}),
    {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"nvidia.com/gpu": "replicas: 4"}},
    {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ClusterQueue", "metadata": {"name": "q"},
     "spec": {"resourceGroups": [{"coveredResources": ["nvidia.com/gpu"], "flavors": []}]}},
], ids=["nothing of a pod", "configmap", "quota object"])
def test_objects_that_run_nothing_are_not_reported_and_count_no_pods(obj):
    w = subject(obj)
    assert (w.unread, w.pods, [p.code for p in w.problems]) == (False, 0, [])


def test_a_huge_object_is_walked_within_a_bound():
    w = subject(crd("Deep", "example.com/v1", {"items": [{"k": i} for i in range(50_000)] + [{"template": TEMPLATE}]}))
    assert not w.unread  # cut short past WALK_LIMIT values: cheap, and said nowhere else (documented limit)


@pytest.mark.parametrize("key", ["example.com/sgpu", "nvidia.com/gpu.shared", "amd.com/vgpu", "habana.ai/gaudi"])
def test_an_accelerator_no_dialect_counts_is_said_not_read_as_zero_in_silence(key):
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "a"},
           "spec": {"containers": [{"name": "c", "image": "x", "resources": {"limits": {key: 1}, "requests": {key: 1}}}]}}
    w = subject(pod)
    found = [p for p in w.problems if p.code == "UncountedAccelerator"]
    assert len(found) == 1 and key in found[0].message and w.total_gpus == 0


POLICY = 'quota all { gpus 100 }\n'
DENY = POLICY + 'rule deny-unread {\n  when unread\n  deny "{kind}: Allot cannot read this kind"\n}\n'


def decide(text, obj):
    ps, diags = compile_policies([("p.policy", text)])
    assert ps is not None and not [d for d in diags if d.severity == "error"], diags
    req = wrap_manifest(obj, user="alice", groups=["dev"], operation="CREATE")["request"]
    return Engine(ps).decide(req, ClusterSnapshot(), 0.0, reserve=False)


def test_an_unread_object_warns_by_default_and_is_denied_by_a_rule_on_unread():
    warned = decide(POLICY, crd())
    assert warned.allowed and any("Notebook not read, GPUs not counted: holds a pod template at spec.template" in w for w in warned.warnings), warned.warnings
    denied = decide(DENY, crd())
    assert not denied.allowed and [r.block for r in denied.denials] == ["rule deny-unread"]
    assert decide(DENY, crd("Widget", "example.com/v1", {"size": 3})).allowed  # nothing of a pod: not unread
