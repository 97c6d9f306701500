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


def node_sized(obj) -> bool:
    """A KAITO preset or tuning Workspace: its pods take a node's GPUs, which no field of the object names."""
    return obj["kind"] == "Workspace" and ("tuning" in obj or "preset" in obj.get("inference", {}))


@pytest.mark.parametrize("obj", [o for o in OBJECTS if not node_sized(o)], ids=lambda o: o["kind"])
def test_a_workload_asking_no_gpu_is_not_sent(obj):
    obj = copy.deepcopy(obj)
    _strip_gpus(obj)
    assert hits(obj) == set()


def test_kube_system_workloads_are_never_sent():
    assert hits(OBJECTS[0], namespace="kube-system") == set()


@pytest.mark.parametrize("obj", [o for o in OBJECTS if node_sized(o)], ids=lambda o: o["metadata"]["name"])
def test_a_kaito_preset_or_tuning_workspace_is_always_sent(obj):
    obj = copy.deepcopy(obj)
    _strip_gpus(obj)  # the partition's MIG label selector, if any: still sent, the instance type decides
    assert hits(obj) == {"workloads.validate.allot.io", "workloads.mutate.allot.io"}


def test_a_workspace_running_nothing_is_not_sent():
    ws = next(o for o in OBJECTS if o["kind"] == "Workspace")
    ws = {k: v for k, v in ws.items() if k not in ("inference", "tuning")}
    assert hits(ws) == set()


@pytest.mark.parametrize("api", ["scheduling.k8s.io/v1alpha1", "scheduling.k8s.io/v1alpha2", "scheduling.k8s.io/v1beta1"])
def test_every_served_version_of_the_upstream_workload_is_sent(api):
    wl = {"apiVersion": api, "kind": "Workload", "metadata": {"name": "w", "namespace": "team-a"},
          "spec": {"podGroupTemplates": [{"name": "workers", "schedulingPolicy": {"gang": {"minCount": 4}}}]}}
    req = wrap_manifest(wl, user="alice", groups=["dev"], operation="CREATE")["request"]
    assert req["resource"] == {"group": "scheduling.k8s.io", "version": api.split("/")[1], "resource": "workloads"}
    assert set(api_hits(req)) == {"groups.validate.allot.io"}


def api_hits(req):
    return set(api.intercepting(m.validating_configuration(CONTRACT), req)) | set(api.intercepting(m.mutating_configuration(CONTRACT), req))


@pytest.mark.parametrize("kind, want_pods, want_workloads", [
    ("Workload", False, False),  # a group object: neither entry
    ("Workspace", False, True),
    ("Pod", True, False),
])
def test_a_rule_pinned_to_a_kind_widens_only_the_entries_of_that_kind(kind, want_pods, want_workloads):
    from lang import ir

    rule = b.deny_rule("pinned", ir.And((b.eq("namespace", "train"), b.eq("kind", kind)), b.S))
    names = {w["name"] for w in m.validating_configuration(ir.PolicySet(rules=(rule,)))["webhooks"]}
    assert ("pods.validate.allot.io" in names, "workloads.validate.allot.io" in names) == (want_pods, want_workloads)


HELD = {"Job", "JobSet", "LeaderWorkerSet", "PyTorchJob", "TrainJob", "RayCluster", "RayJob", "RayService", "Deployment", "StatefulSet", "ReplicaSet",
        "Workspace"}


@pytest.mark.parametrize("obj", OBJECTS, ids=lambda o: o["kind"])
def test_a_held_gpu_workload_is_sent_on_delete_to_the_release_entry(obj):
    want = {"workloads-release.validate.allot.io"} if obj["kind"] in HELD else set()
    assert hits(obj, "DELETE") == want


def test_the_release_entry_fails_open_and_skips_gpu_less_workloads():
    entry = next(w for w in m.validating_configuration(CONTRACT)["webhooks"] if w["name"] == "workloads-release.validate.allot.io")
    assert entry["failurePolicy"] == "Ignore" and {op for r in entry["rules"] for op in r["operations"]} == {"DELETE"}
    dep = copy.deepcopy(next(o for o in OBJECTS if o["kind"] == "Deployment"))
    _strip_gpus(dep)
    assert hits(dep, "DELETE") == set()


def test_no_quota_no_release_entry():
    from lang import compile_policies

    ps, _ = compile_policies([("f.policy", 'fraction f { for namespace == "serving"  min 0.25  max 0.5 }\n')])
    names = [w["name"] for w in m.validating_configuration(ps)["webhooks"]]
    assert "workloads.validate.allot.io" in names and "workloads-release.validate.allot.io" not in names


@pytest.mark.parametrize("text, want_release, want_namespaces", [
    ('fraction f { for namespace == "serving"  min 0.25  max 0.5 }\n', False, None),
    # a gang block that places: an admitted JobSet holds its domain, so its DELETE must release it, in its namespaces
    ('topology fabric { rack "topology.acme.io/rack" }\ngang g { for namespace == "train"  require topology fabric.rack }\n', True, ["train"]),
    ('gang g { for namespace == "train"  require min_members }\n', False, None),  # holds no domain
    ('topology fabric { rack "topology.acme.io/rack" }\ngang g { for namespace == "train"  require topology fabric.rack }\n'
     'quota q { for namespace == "serving"  gpus 2 }\n', True, ["serving", "train"]),
])
def test_the_release_entry_covers_quota_and_placing_gang_namespaces(text, want_release, want_namespaces):
    from lang import compile_policies

    ps, diags = compile_policies([("f.policy", text)])
    assert ps is not None, [d.message for d in diags]
    entry = next((w for w in m.validating_configuration(ps)["webhooks"] if w["name"] == "workloads-release.validate.allot.io"), None)
    assert (entry is not None) is want_release
    if entry is not None:
        values = [v for e in entry["namespaceSelector"]["matchExpressions"] if e["operator"] == "In" for v in e["values"]]
        assert sorted(values) == want_namespaces
