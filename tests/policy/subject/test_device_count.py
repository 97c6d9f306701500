"""A whole-GPU count with a unit (`8Gi`) or past any node's count is a MalformedQuantity problem, refused like any bad count."""

import pytest

import lang
from policy.admission import wrap_manifest
from policy.cluster.snapshot import ClusterSnapshot
from policy.engine import Engine
from policy.subject.demand import MAX_DEVICES, read_demand

PATH = "spec.containers[0].resources.limits[nvidia.com/gpu]"


def gpu_pod(count) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "team-a"},
            "spec": {"containers": [{"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": count}}}]}}


@pytest.mark.parametrize("count,says", [
    ("8Gi", "'8Gi' has a unit; a device count is a plain whole number like \"8\" (it would be 8589934592 devices)"),
    ("1k", "'1k' has a unit"),
    ("1e3", "'1e3' has a unit"),
    ("500m", "'500m' has a unit; a device count is a plain whole number like \"8\" (500m is 1/2 of a device; devices are whole)"),
    ("1" + "0" * 31, "1e31 devices is more than any node holds"),
    (10**40, "1e40 devices is more than any node holds"),
    (MAX_DEVICES + 1, "65537 devices is more than any node holds"),
])  # fmt: skip
def test_a_device_count_no_node_holds_is_a_problem(count, says):
    podset, problems = read_demand(gpu_pod(count))
    assert [p.code for p in problems] == ["MalformedQuantity"]
    assert problems[0].message.startswith(PATH) and says in problems[0].message
    assert podset.gpus == 0  # nothing counted from a value that was refused


@pytest.mark.parametrize("count,milli", [(8, 8000), ("8", 8000), ("16", 16000), (MAX_DEVICES, MAX_DEVICES * 1000), ("0", 0)])
def test_plain_counts_are_read(count, milli):
    podset, problems = read_demand(gpu_pod(count))
    assert (podset.gpus, problems) == (milli, [])


def test_the_webhook_denies_a_count_with_a_unit_even_without_a_quota():
    ps, _ = lang.compile_policies([("t.policy", 'rule r {\n  when gpus > 100\n  deny "too many"\n}\n')])
    req = wrap_manifest(gpu_pod("8Gi"), user="u", groups=[], operation="CREATE")["request"]
    d = Engine(ps).decide(req, ClusterSnapshot(), 0.0)
    assert not d.allowed and [r.code for r in d.denials] == ["MalformedQuantity"]
