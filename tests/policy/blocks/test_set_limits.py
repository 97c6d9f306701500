"""`set limits["R"] = requests["R"]` patches every container that requests R without a limit, at the right path for every kind."""

import copy

import pytest

import lang
from policy.admission import wrap_manifest
from policy.blocks.limits import dotted, limit_fills
from policy.engine import Engine
from policy.subject.normalize import normalize
from policy.testing.patch import apply_patch
from tests.policy.builders import container, node, pod, snapshot
from tests.policy.subject.test_workloads import OBJECTS

GPU = "nvidia.com/gpu"
FILL = 'rule fill-gpu-limits {\n  MODE\n  set limits["nvidia.com/gpu"] = requests["nvidia.com/gpu"]\n  set limits["nvidia.com/gpumem"] = requests["nvidia.com/gpumem"]\n}\n'


def engine(mode="enforce"):
    ps, diags = lang.compile_policies([("fill.policy", FILL.replace("MODE", f"mode {mode}"))])
    assert not diags
    return Engine(ps)


def decide(obj, mode="enforce", mutate=True):
    review = wrap_manifest(obj, user="alice", groups=["dev"], operation="CREATE")
    return engine(mode).decide(review["request"], snapshot(node("h1")), 0.0, mutate=mutate, reserve=False)


def requests_only(obj):
    """The object with every GPU limit turned into a request alone (what the fill must undo); the count of such containers."""
    obj = copy.deepcopy(obj)
    n = 0

    def walk(v):
        nonlocal n
        if isinstance(v, dict):
            res = v.get("resources", v.get("resourcesPerNode"))
            if isinstance(res, dict) and isinstance(res.get("limits"), dict) and GPU in res["limits"] and "requests" not in res:
                res["requests"] = res.pop("limits")
                n += 1
            for x in v.values():
                walk(x)
        elif isinstance(v, list):
            for x in v:
                walk(x)

    walk(obj)
    return obj, n


def gpu_resources(v, out=None):
    out = [] if out is None else out
    if isinstance(v, dict):
        if isinstance(v.get("resources"), dict):
            out.append(v["resources"])
        for x in v.values():
            gpu_resources(x, out)
    elif isinstance(v, list):
        for x in v:
            gpu_resources(x, out)
    return [r for r in out if GPU in (r.get("requests") or {}) or GPU in (r.get("limits") or {})]


@pytest.mark.parametrize("kind", ["Job", "JobSet", "PyTorchJob", "LeaderWorkerSet", "Deployment", "ReplicaSet", "RayCluster", "RayJob"])
def test_every_template_gets_its_limit_back(kind):
    # the Deployment fixture shares by KAI annotation: its ReplicaSet's template (the same reader) asks whole GPUs
    obj, n = requests_only(OBJECTS[kind] if kind != "Deployment" else {**OBJECTS["ReplicaSet"], "kind": "Deployment"})
    assert n > 0
    d = decide(obj)
    assert d.allowed and len(d.patch) == n, d.patch
    patched = apply_patch(obj, d.patch)
    assert all(r["limits"][GPU] == r["requests"][GPU] for r in gpu_resources(patched))


def test_a_trainjob_has_no_pod_template_to_patch():
    obj, n = requests_only(OBJECTS["TrainJob"])
    assert n == 1 and decide(obj).patch == ()


def test_pod_containers_and_init_containers_one_op_per_container():
    p = pod(containers=[container("a", requests={GPU: "1", "nvidia.com/gpumem": "4000"}),
                        container("b", limits={"cpu": "1"}, requests={GPU: "2"}),
                        container("c", limits={GPU: "1"})],
            init_containers=[container("i", requests={GPU: 1})])
    d = decide(p)
    assert [(op["op"], op["path"], op["value"]) for op in d.patch] == [
        ("add", "/spec/initContainers/0/resources/limits", {GPU: 1}),
        ("add", "/spec/containers/0/resources/limits", {GPU: "1", "nvidia.com/gpumem": "4000"}),
        ("add", "/spec/containers/1/resources/limits/nvidia.com~1gpu", "2"),
    ]
    apply_patch(p, d.patch)


def test_a_limit_that_differs_is_never_rewritten():
    p = pod(containers=[container("a", limits={GPU: "2"}, requests={GPU: "1"})])
    w = normalize(wrap_manifest(p, user="a", groups=[], operation="CREATE")["request"], snapshot(node("h1")))
    assert list(limit_fills(w, GPU)) == []


def test_warn_mode_says_what_it_would_write_and_writes_nothing():
    p = pod(name="req-only", containers=[container("a", requests={GPU: "1"})])
    d = decide(p, mode="warn")
    assert d.patch == () and d.warnings == ("rule fill-gpu-limits: would set spec.containers[0].resources.limits['nvidia.com/gpu'] = '1'",)
    (r,) = [r for r in d.reasons if r.code == "RuleWouldSet"]
    assert r.data == {"path": ["spec", "containers", "0", "resources", "limits", GPU], "value": "1"}


def test_the_validating_side_and_deletes_write_nothing():
    p = pod(containers=[container("a", requests={GPU: "1"})])
    assert decide(p, mutate=False).patch == ()
    review = wrap_manifest(p, user="a", groups=[], operation="DELETE")
    assert engine().decide(review["request"], snapshot(node("h1")), 0.0, mutate=True, reserve=False).patch == ()


def test_dotted_names_the_field():
    assert dotted(("spec", "replicatedJobs", "1", "template", "spec", "template", "spec", "containers", "0", "resources", "limits", GPU)) == (
        "spec.replicatedJobs[1].template.spec.template.spec.containers[0].resources.limits['nvidia.com/gpu']")
