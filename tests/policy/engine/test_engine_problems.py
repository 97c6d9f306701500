"""Normalization problems become explained reasons (never exceptions); unknown kinds pass quickly."""

from __future__ import annotations

import pytest
from tests.policy.engine.engine_builders import ns_is, pod, policy, quota

from policy.admission import wrap_manifest
from policy.cluster.snapshot import ClusterSnapshot
from policy.engine import Engine

QUOTAS = [quota("q", selector=ns_is("team-a"), gpus=8000)]


def decide(obj, operation="CREATE", mode_override=None):
    req = wrap_manifest(obj, user="alice", groups=[], operation=operation)["request"]
    return Engine(policy(quotas=QUOTAS), mode_override=mode_override).decide(req, ClusterSnapshot(), 0.0)


def _bad_gpu(value):
    p = pod("x", "team-a")
    p["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": value}}
    return p


def _missing_group_member():
    """A coscheduling member whose PodGroup is not in the cluster state."""
    return pod("m", "team-a", gpus=1, labels={"scheduling.x-k8s.io/pod-group": "ghost"})


def _hami_cores(cores):
    p = pod("h", "team-a")
    p["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": "1", "nvidia.com/gpucores": cores}}
    return p


@pytest.mark.parametrize(
    "obj, want_code, want_allowed",
    [
        (_bad_gpu("abc"), "MalformedQuantity", False),  # an explained denial
        (_missing_group_member(), "MissingGroup", True),  # a warning: pods may precede their group
        (_hami_cores("120"), "ClampedGpuCores", True),  # HAMi clamps to 100 and places the pod: a warning
        (_hami_cores("0"), "InvalidFraction", False),  # below 1 is still wrong
    ],
)
def test_problem_reasons(obj, want_code, want_allowed):
    d = decide(obj)
    got = [(r.code, r.mode) for r in d.reasons if r.block == "subject"]
    assert got == [(want_code, "enforce" if not want_allowed else "warn")]
    assert d.allowed is want_allowed
    assert "abc" in d.reasons[0].message or want_code != "MalformedQuantity"


def test_problem_follows_mode_override():
    d = decide(_bad_gpu("abc"), mode_override="warn")
    assert d.allowed
    assert [(r.code, r.mode) for r in d.reasons] == [("MalformedQuantity", "warn")]
    assert d.warnings[0].startswith("subject: ")


@pytest.mark.parametrize("operation", ["DELETE"])
def test_problems_are_not_judged_on_delete(operation):
    assert decide(_bad_gpu("abc"), operation=operation).allowed


@pytest.mark.parametrize(
    "obj",
    [
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d", "namespace": "team-a"}, "spec": {}},
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "team-a"}, "data": {"k": "v"}},
        pod("cpu-only", "team-a"),
    ],
)
def test_objects_without_gpus_pass_quickly_with_no_patch(obj):
    req = wrap_manifest(obj, user="alice", groups=[], operation="CREATE")["request"]
    d = Engine(policy(quotas=QUOTAS)).decide(req, ClusterSnapshot(), 0.0, mutate=True)
    assert d.allowed and d.patch == () and d.reasons == () and d.blocks == ()


def test_hami_cores_over_100_count_as_one_whole_device():
    d = decide(_hami_cores("120"))
    assert d.allowed and d.warnings and "clamps it to 100" in d.warnings[0]
    from policy.subject.normalize import normalize_object

    w = normalize_object(_hami_cores("120"), ClusterSnapshot())
    assert w.gpus == 1000 and w.fraction is None  # a whole device, not a share of one
