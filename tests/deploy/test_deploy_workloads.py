"""The workload entries of the webhook configurations: which Jobs, JobSets, Deployments ... the API server sends to Allot."""

import copy
from pathlib import Path

import pytest
import yaml

import deploy_apiserver as api
import deploy_builders as b
from policy.admission import wrap_manifest
from policy.manifests import configurations as m

REPO = Path(__file__).resolve().parents[2]
OBJECTS = [o for f in sorted((REPO / "tests/fixtures/workloads").glob("*.yaml")) for o in yaml.safe_load_all(f.read_text()) if o]
CONTRACT = b.contract_set()


def hits(obj, operation="CREATE", namespace="team-a"):
    obj = copy.deepcopy(obj)
    obj["metadata"]["namespace"] = namespace
    req = wrap_manifest(obj, user="alice", groups=["dev"], operation=operation)["request"]
    return set(api.intercepting(m.validating_configuration(CONTRACT), req)) | set(api.intercepting(m.mutating_configuration(CONTRACT), req))


@pytest.mark.parametrize("obj", OBJECTS, ids=lambda o: o["kind"])
def test_every_gpu_workload_kind_is_sent_on_create(obj):
    assert hits(obj) == {"workloads.validate.allot.io", "workloads.mutate.allot.io"}
    assert hits(obj, "UPDATE") == {"workloads.validate.allot.io"}


def _strip_gpus(node):
    if isinstance(node, dict):
        for key in list(node):
            if key.startswith(("nvidia.com/", "amd.com/")) or key == "gpu-fraction":
                del node[key]
            else:
                _strip_gpus(node[key])
    elif isinstance(node, list):
        for item in node:
            _strip_gpus(item)


@pytest.mark.parametrize("obj", OBJECTS, ids=lambda o: o["kind"])
def test_a_workload_asking_no_gpu_is_not_sent(obj):
    obj = copy.deepcopy(obj)
    _strip_gpus(obj)
    assert hits(obj) == set()


def test_kube_system_workloads_are_never_sent():
    assert hits(OBJECTS[0], namespace="kube-system") == set()
