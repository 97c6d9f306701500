"""KAITO Workspaces normalized: resource.count x the GPUs of one node of resource.instanceType, as the cluster state knows them."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from lang import compile_policies
from policy.admission import wrap_manifest
from policy.engine import Engine
from policy.subject.normalize import normalize
from tests.policy.builders import gpu_container, node, snapshot
from tests.policy.subject.kinds_builders import typed_node, workspace

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "workloads" / "kaito.yaml"
WORKSPACES = {o["metadata"]["name"]: o for o in yaml.safe_load_all(FIXTURE.read_text()) if o}
H100, L4, V100, A100 = "NVIDIA-H100-80GB-HBM3", "NVIDIA-L4", "Tesla-V100-SXM2-16GB", "NVIDIA-A100-SXM4-80GB"
P5 = [typed_node(f"p5-{i}", "p5.48xlarge") for i in range(2)]
G6 = [typed_node(f"g6-{i}", "g6.48xlarge", product=L4) for i in range(3)]
NC12 = [typed_node("nc12-0", "Standard_NC12s_v3", gpus="2", product=V100)]
GIB = 2**30


def subject(obj, nodes=(), operation="CREATE", old=None):
    req = wrap_manifest(obj, user="alice", groups=["dev"], operation=operation)["request"]
    if old is not None:
        req["oldObject"] = old
    return normalize(req, snapshot(*nodes))


@dataclass
class Case:
    name: str
    obj: dict
    nodes: list
    want_sets: list  # (name, pods, milli-GPU per pod)
    want_total: int
    want_product: str | None = None
    want_codes: list = field(default_factory=list)
    want_message: str | None = None  # a substring of the first problem
    want_fraction: int | None = None
    want_memory: int | None = None


CASES = [
    Case("preset: count x the instance type's GPUs", WORKSPACES["workspace-deepseek-r1"], P5, [("inference", 2, 8000)], 16000, H100),
    Case("preset: the controller's node estimate wins once made", WORKSPACES["workspace-llama-70b"], G6, [("inference", 3, 8000)], 24000, L4),
    Case("custom template: count replicas of it as written", WORKSPACES["workspace-custom-llm"], G6, [("inference", 2, 1000)], 2000),
    Case("tuning: one pod of the instance type's GPUs", WORKSPACES["workspace-tuning-phi-3"], P5, [("tuning", 1, 8000)], 8000, H100),
    Case("accelerator partition: whole GPUs per pod, no node needed", WORKSPACES["workspace-accelerator-llama-3-1-8b"], [],
         [("inference", 1, 2000)], 2000),
    Case("MIG partition: one slice, its model from the label selector", WORKSPACES["workspace-phi-4-mini-mig"], [],
         [("inference", 1, 143)], 143, A100, want_fraction=143, want_memory=10 * GIB),
    Case("v1alpha1 reads the same", WORKSPACES["workspace-falcon-7b"], NC12, [("inference", 1, 2000)], 2000, V100),
    Case("count defaults to 1", workspace(instance_type="p5.48xlarge", preset="phi-4"), P5, [("inference", 1, 8000)], 8000, H100),
    Case("nodes of the type disagree: the largest counts", workspace(instance_type="mix", preset="phi-4"),
         [typed_node("m4", "mix", gpus="4"), typed_node("m8", "mix", gpus="8")], [("inference", 1, 8000)], 8000, H100),
    Case("models differ across the type: no product", workspace(instance_type="mix", preset="phi-4"),
         [typed_node("m1", "mix", product=H100), typed_node("m2", "mix", product=L4)], [("inference", 1, 8000)], 8000),
    Case("BYO: the nodes the label selector picks", workspace(count=2, match_labels={"pool": "infer"}, preset="phi-4"),
         [typed_node("b1", "any", gpus="4", labels={"pool": "infer"}), node("other", gpus="8")], [("inference", 2, 4000)], 8000, H100),
    Case("BYO: KAITO's reserved labels are not matched", workspace(match_labels={"pool": "infer", "kaito.sh/workspace": "x"}, preset="phi-4"),
         [typed_node("b1", "any", gpus="4", labels={"pool": "infer"})], [("inference", 1, 4000)], 4000, H100),
    Case("unknown instance type: a warning naming it, nothing counted", WORKSPACES["workspace-deepseek-r1"], G6,
         [("inference", 2, 0)], 0, want_codes=["UnknownInstanceType"], want_message="resource.instanceType p5.48xlarge: GPUs per node unknown, 2 inference pods not counted"),
    Case("a node of the type without GPUs tells nothing", workspace(instance_type="p5.48xlarge", preset="phi-4"),
         [typed_node("cpu", "p5.48xlarge", product=None)], [("inference", 1, 0)], 0, want_codes=["UnknownInstanceType"]),
    Case("BYO selector matching no node names the selector", workspace(match_labels={"pool": "none"}, preset="phi-4"), P5,
         [("inference", 1, 0)], 0, want_codes=["UnknownInstanceType"], want_message="resource.labelSelector pool=none: GPUs per node unknown"),
    Case("unknown tuning type", WORKSPACES["workspace-tuning-phi-3"], [], [("tuning", 1, 0)], 0, want_codes=["UnknownInstanceType"],
         want_message="tuning pod not counted (no node in the cluster state labelled node.kubernetes.io/instance-type=p5.48xlarge"),
    Case("inference and tuning both: both counted (fail closed)", workspace(instance_type="p5.48xlarge", preset="phi-4", tuning="phi-3"), P5,
         [("inference", 1, 8000), ("tuning", 1, 8000)], 16000, H100),
    Case("neither inference nor tuning runs nothing", workspace(instance_type="p5.48xlarge"), P5, [], 0),
    Case("bad count: the default and a located problem", workspace(count="two", instance_type="p5.48xlarge", preset="phi-4"), P5,
         [("inference", 1, 8000)], 8000, H100, ["MalformedQuantity"], "resource.count: 'two'"),
    Case("unknown partition mode: a whole node counted", workspace(instance_type="p5.48xlarge", preset="phi-4", partition={"mode": "slices"}), P5,
         [("inference", 1, 8000)], 8000, H100, ["UnknownGpuDialectValue"], "resource.partition.mode: 'slices'"),
    Case("accelerator without a count: a whole node counted", workspace(instance_type="p5.48xlarge", preset="phi-4", partition={"mode": "accelerator"}),
         P5, [("inference", 1, 8000)], 8000, H100, ["MalformedQuantity"], "resource.partition.count: required"),
    Case("an unknown MIG profile names the pod set", workspace(preset="phi-4", partition={"mode": "mig", "profile": "9z.1tb"}), [],
         [("inference", 1, 0)], 0, want_codes=["UnknownGpuDialectValue"], want_message="pod set inference (resource): "),
]


@pytest.mark.parametrize("c", CASES, ids=lambda c: c.name)
def test_workspace_pod_sets(c):
    w = subject(c.obj, c.nodes)
    got = [(ps.name, ps.count, ps.gpus) for ps in w.pod_sets]
    assert (w.kind, got, w.total_gpus, w.pods) == ("Workspace", c.want_sets, c.want_total, sum(n for _, n, _ in c.want_sets))
    assert [p.code for p in w.problems] == c.want_codes, w.problems
    if c.want_message:
        assert c.want_message in w.problems[0].message, w.problems[0].message
    assert (w.gpu_product, w.fraction, w.gpu_memory) == (c.want_product, c.want_fraction, c.want_memory)
    assert (w.gang, w.min_members, w.suspended) == (None, None, False)  # KAITO does not gang-schedule its StatefulSet


@pytest.mark.parametrize("path, value, want", [
    (("resource",), "big", "resource: expected an object, got string"),
    (("resource", "labelSelector", "matchLabels"), ["apps"], "resource.labelSelector.matchLabels: expected an object"),
    (("resource", "instanceType"), 5, "resource.instanceType: expected a string, got number"),
    (("inference",), [1], "inference: expected an object, got list"),
    (("inference", "template", "spec"), "x", "inference.template.spec: expected an object, got string"),
])
def test_a_field_of_the_wrong_type_is_a_located_problem(path, value, want):
    obj = copy.deepcopy(WORKSPACES["workspace-custom-llm" if path[0] == "inference" and len(path) > 1 else "workspace-deepseek-r1"])
    at = obj
    for step in path[:-1]:
        at = at[step]
    at[path[-1]] = value
    w = subject(obj, P5 + G6)
    assert "MalformedObject" in [p.code for p in w.problems] and any(want in p.message for p in w.problems), w.problems


def test_template_demand_problem_names_the_pod_set_and_its_path():
    obj = copy.deepcopy(WORKSPACES["workspace-custom-llm"])
    obj["inference"]["template"]["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": "lots"}}
    w = subject(obj, G6)
    assert w.problems and w.problems[0].message.startswith("pod set inference (inference.template.spec): ")


def test_template_is_pinned_to_the_selector_and_patched_in_place():
    obj = workspace(count=1, match_labels={"nvidia.com/gpu.product": L4}, template={"spec": {"containers": [gpu_container("1")]}})
    w = subject(obj, G6)
    assert (w.gpu_product, w.template_paths) == (L4, (("inference", "template", "spec"),))
    assert subject(WORKSPACES["workspace-deepseek-r1"], P5).template_paths == (None,)  # a preset has no template to patch


def test_privileged_template_marks_the_workspace():
    tpl = {"spec": {"containers": [{**gpu_container("1"), "securityContext": {"privileged": True}}]}}
    assert subject(workspace(template=tpl), G6).privileged is True


def test_scaling_count_up_adds_one_node_of_gpus_per_pod():
    old = WORKSPACES["workspace-deepseek-r1"]
    new = copy.deepcopy(old)
    new["resource"]["count"] = 3
    w = subject(new, P5, "UPDATE", old)
    assert (w.total_gpus, w.added_gpus) == (24000, 8000)


POLICY = '''
quota serving { for namespace == "serving"  gpus 10 }
'''


@pytest.fixture(scope="module")
def engine():
    ps, diags = compile_policies([("k.policy", POLICY)])
    assert not [d for d in diags if d.severity == "error"], diags
    return Engine(ps)


@dataclass
class DecideCase:
    name: str
    obj: dict
    nodes: list
    want_allowed: bool
    want_codes: list
    want_warning: str | None = None


DECIDE = [
    DecideCase("2 x 8 H100 exceeds 10 GPUs at apply", WORKSPACES["workspace-deepseek-r1"], P5, False, ["QuotaExceeded"]),
    DecideCase("a tuning job of 8 fits", WORKSPACES["workspace-tuning-phi-3"], P5, True, []),
    DecideCase("an unknown type is allowed with a warning naming it", WORKSPACES["workspace-deepseek-r1"], [], True,
               ["UnknownInstanceType"], "p5.48xlarge"),
]


@pytest.mark.parametrize("c", DECIDE, ids=lambda c: c.name)
def test_workspace_decided_at_apply(engine, c):
    req = wrap_manifest(c.obj, user="alice", groups=["dev"], operation="CREATE")["request"]
    d = engine.decide(req, snapshot(*c.nodes), 1000.0, reserve=False)
    assert (d.allowed, sorted(r.code for r in d.reasons)) == (c.want_allowed, c.want_codes), d.reasons
    if c.want_warning:
        assert [r.mode for r in d.reasons] == ["warn"] and c.want_warning in d.reasons[0].message
