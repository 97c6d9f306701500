"""Priority: the default class is set by mutation together with spec.priority and preemptionPolicy."""

from __future__ import annotations

import jsonpatch
import pytest
from tests.policy.engine.engine_builders import pod, policy, priority

from policy.admission import wrap_manifest
from policy.cluster.snapshot import ClusterSnapshot
from policy.engine import Engine

CLASSES = [priority("critical", 1000, preempts=True), priority("prod", 500), priority("batch", 100, default=True, line=3)]


def decide(obj, *, classes=CLASSES, mutate=True, operation="CREATE"):
    req = wrap_manifest(obj, user="alice", groups=[], operation=operation)["request"]
    return Engine(policy(priorities=classes)).decide(req, ClusterSnapshot(), 0.0, mutate=mutate)


def test_default_class_patch_sets_priority_and_preemption_policy():
    obj = pod(gpus=1)
    obj["spec"]["priority"] = 0  # what the API server's Priority admission already wrote
    d = decide(obj)
    assert d.allowed
    assert list(d.patch) == [
        {"op": "add", "path": "/spec/priorityClassName", "value": "batch"},
        {"op": "replace", "path": "/spec/priority", "value": 100},
        {"op": "add", "path": "/spec/preemptionPolicy", "value": "Never"},
    ]
    patched = jsonpatch.apply_patch(obj, list(d.patch))
    assert patched["spec"]["priorityClassName"] == "batch" and patched["spec"]["priority"] == 100
    assert d.blocks == ("priority batch",)


def test_default_class_that_preempts_gets_preempt_lower_priority():
    classes = [priority("critical", 1000, preempts=True, default=True)]
    d = decide(pod(gpus=1), classes=classes)
    assert {"op": "add", "path": "/spec/preemptionPolicy", "value": "PreemptLowerPriority"} in d.patch


@pytest.mark.parametrize(
    "obj, want_patch",
    [
        (pod(gpus=None), False),  # no GPU: allowed quickly with no patch
        (pod(gpus=1, priority_class="prod"), False),  # names a declared class
    ],
)
def test_no_default_patch(obj, want_patch):
    d = decide(obj)
    assert d.allowed and bool(d.patch) is want_patch


def test_validating_side_never_patches():
    assert decide(pod(gpus=1), mutate=False).patch == ()


@pytest.mark.parametrize(
    "klass, want_allowed",
    [("prod", True), ("gold", False), ("system-cluster-critical", True)],
)
def test_unknown_class_is_denied(klass, want_allowed):
    d = decide(pod(gpus=1, priority_class=klass))
    assert d.allowed is want_allowed
    if not want_allowed:
        (r,) = d.denials
        assert r.code == "UnknownPriorityClass" and "'gold'" in r.message and "batch, critical, prod" in r.message


def test_unknown_class_on_update_is_not_rejudged():
    # priorityClassName is immutable; only CREATE is judged.
    assert decide(pod(gpus=1, priority_class="gold"), operation="UPDATE").allowed
