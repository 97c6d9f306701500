"""Arbitrary JSON-shaped KAITO Workspaces, v1beta1 upstream Workloads and the kinds of issue 28: a decision or a located problem, never an exception."""

from __future__ import annotations

import re

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from policy.admission import wrap_manifest
from policy.cluster.errors import SnapshotError
from policy.cluster.snapshot import ClusterSnapshot
from policy.engine import WARN_PROBLEMS
from policy.subject.normalize import normalize
from tests.robust.robust_objects import GARBAGE, _paths, spoiled
from tests.robust.workload_fuzz import CLUSTER, ENGINE, FUZZ, REPO

# The nested template strategy repeats its parts (to weight them): its repr is large, not its examples.
pytestmark = pytest.mark.filterwarnings("ignore:Generating overly large repr")

# Keys the readers look at, and values that steer them into their branches.
WORKSPACE_KEYS = ["resource", "inference", "tuning", "status", "count", "instanceType", "labelSelector", "matchLabels",
                  "partition", "mode", "profile", "preset", "name", "template", "spec", "metadata", "containers",
                  "resources", "limits", "nvidia.com/gpu", "nodeSelector", "targetNodeCount", "preferredNodes"]
WORKLOAD_KEYS = ["podGroupTemplates", "compositePodGroupTemplates", "podGroups", "name", "schedulingPolicy", "policy",
                 "gang", "basic", "minCount", "minGroupCount", "schedulingConstraints", "topology", "key", "controllerRef"]
WORDS = ["p5.48xlarge", "g6.48xlarge", "mig", "accelerator", "1g.10gb", "9z.1tb", "8", "-1", "1.5", "apps", "",
         "topology.acme.io/rack", "NVIDIA-H100-80GB-HBM3"]


def json_of(keys: list[str]):
    """JSON values whose maps mostly use `keys`: nested objects and lists of every type, bounded."""
    leaves = st.none() | st.booleans() | st.integers(-3, 2**40) | st.floats(allow_nan=False, width=32) | st.sampled_from(WORDS) | st.text(max_size=5)
    return st.recursive(
        leaves,
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(keys) | st.text(max_size=4), inner, max_size=5),
        max_leaves=30,
    )


@st.composite
def workspaces(draw) -> dict:
    obj = {"apiVersion": draw(st.sampled_from(["kaito.sh/v1beta1", "kaito.sh/v1alpha1"])), "kind": "Workspace",
           "metadata": {"name": "ws", "namespace": "serving"}}
    for key in draw(st.lists(st.sampled_from(["resource", "inference", "tuning", "status", "spec"]), unique=True, max_size=5)):
        obj[key] = draw(json_of(WORKSPACE_KEYS))
    return obj


def _mostly(good, junk):
    """`good` three times in four, else `junk`: wrong shapes stay frequent without drowning the right ones."""
    return st.one_of(good, good, good, junk)


def _templates():
    """Pod group templates, composites nesting them (deeper than allowed too), each field well-formed or not."""
    junk = json_of(WORKLOAD_KEYS)
    count = _mostly(st.integers(-1, 100), junk)
    gang = _mostly(st.builds(lambda n: {"gang": {"minCount": n}}, count) | st.just({"basic": {}}), junk)
    group_gang = _mostly(st.builds(lambda n: {"gang": {"minGroupCount": n}}, count) | st.just({"basic": {}}), junk)
    key = st.fixed_dictionaries({"key": _mostly(st.sampled_from(WORDS), junk)})
    constraints = _mostly(st.fixed_dictionaries({"topology": st.lists(_mostly(key, junk), max_size=2)}), junk)
    leaf = _mostly(st.fixed_dictionaries({"name": st.sampled_from(WORDS), "schedulingPolicy": gang},
                                         optional={"schedulingConstraints": constraints}), junk)
    v1alpha1 = st.fixed_dictionaries({"name": st.sampled_from(WORDS), "policy": gang})
    composites = st.recursive(
        st.lists(_mostly(st.fixed_dictionaries({"name": st.sampled_from(WORDS), "schedulingPolicy": group_gang,
                                                "podGroupTemplates": st.lists(leaf, min_size=1, max_size=3)}), junk), min_size=1, max_size=3),
        lambda inner: st.lists(_mostly(st.fixed_dictionaries({"name": st.sampled_from(WORDS), "schedulingPolicy": group_gang},
                                                             optional={"podGroupTemplates": st.lists(leaf, max_size=2), "compositePodGroupTemplates": inner,
                                                                       "schedulingConstraints": constraints}), junk), min_size=1, max_size=3),
        max_leaves=10,
    )
    return st.one_of(
        st.fixed_dictionaries({"podGroupTemplates": _mostly(st.lists(leaf, min_size=1, max_size=4), junk)}),
        st.fixed_dictionaries({"compositePodGroupTemplates": _mostly(composites, junk)}),
        st.fixed_dictionaries({"podGroups": _mostly(st.lists(_mostly(v1alpha1, junk), min_size=1, max_size=3), junk)}),
        st.fixed_dictionaries({"podGroupTemplates": st.lists(leaf, max_size=2), "compositePodGroupTemplates": composites}),
        json_of(WORKLOAD_KEYS),
    )


SPECS = _templates()  # built once: a strategy this size is costly to build per draw


@st.composite
def workloads(draw) -> dict:
    return {"apiVersion": draw(st.sampled_from(["scheduling.k8s.io/v1beta1", "scheduling.k8s.io/v1alpha2", "scheduling.k8s.io/v1alpha1"])),
            "kind": "Workload", "metadata": {"name": "wl", "namespace": "train"}, "spec": draw(SPECS)}


# A located problem starts with where it is: a field path, or the pod set and its path.
LOCATED = re.compile(r"^(pod set \S+ \([^)]*\): )?(spec|resource|inference|tuning|metadata|status|request)\b[^:]*: ")


def check(obj: dict) -> None:
    req = wrap_manifest(obj, user="alice", groups=["dev"], operation="CREATE")["request"]
    w = normalize(req, CLUSTER)
    assert w.kind == obj["kind"] and w.total_gpus >= 0 and all(ps.count >= 0 for ps in w.pod_sets)
    for p in w.problems:
        assert p.code and LOCATED.match(p.message), p  # never the backstop "a field has an unexpected type"
    d = ENGINE.decide(req, CLUSTER, 0.0, reserve=False)
    assert all(r.message for r in d.reasons)
    if any(p.code != "UnknownInstanceType" for p in w.problems):
        assert not d.allowed  # a request Allot could not read completely is not allowed by silence


@FUZZ
@given(workspaces())
def test_any_workspace_is_decided_or_located(obj):
    check(obj)


@FUZZ
@given(workloads())
def test_any_v1beta1_workload_is_decided_or_located(obj):
    check(obj)
    try:  # the cluster snapshot either holds it or refuses it with its error, never another exception
        ClusterSnapshot.from_objects([obj])
    except SnapshotError:
        pass


# ---- the kinds of issue 28 (docs/kinds.md): spoiled corpus objects and arbitrary specs ----------------------



NEW_KINDS = {"CronJob", "MPIJob", "TFJob", "PaddleJob", "XGBoostJob", "JAXJob", "InferenceService", "LLMInferenceService",
             "InferenceSet", "AppWrapper"}
CORPUS = sorted((REPO / "tests/fixtures/corpus").glob("*.yaml"))
NEW_OBJECTS = [docs[1] for docs in (list(yaml.safe_load_all(p.read_text())) for p in CORPUS)
               if docs[1].get("kind") in NEW_KINDS or str(docs[1].get("apiVersion", "")).startswith("batch.volcano.sh/")]
NEW_KEYS = ["spec", "tasks", "replicas", "minAvailable", "template", "containers", "resources", "limits", "nvidia.com/gpu",
            "jobTemplate", "mpiReplicaSpecs", "tfReplicaSpecs", "paddleReplicaSpecs", "xgbReplicaSpecs", "jaxReplicaSpecs",
            "Worker", "Launcher", "runPolicy", "schedulingPolicy", "elasticPolicy", "minReplicas", "predictor", "model",
            "workerSpec", "pipelineParallelSize", "worker", "prefill", "parallelism", "data", "dataLocal", "scaling",
            "components", "podSets", "path", "inference", "preset", "labelSelector", "suspend", "concurrencyPolicy"]


# Located as LOCATED, but a key of the path may itself hold ':' (a spoiled resource name `limits[:]`).
LOCATED_NEW = re.compile(r"^(pod set \S+ \(.*?\): )?(spec|resource|inference|tuning|metadata|status|request)\b")


def check_new(obj: dict) -> None:
    req = wrap_manifest(obj, user="alice", groups=["dev"], operation="CREATE")["request"]
    w = normalize(req, CLUSTER)
    assert w.kind == obj["kind"] and w.total_gpus >= 0 and w.pods >= 0 and all(ps.count >= 0 for ps in w.pod_sets)
    for p in w.problems:
        assert p.code and LOCATED_NEW.match(p.message), p  # never the backstop "a field has an unexpected type"
    d = ENGINE.decide(req, CLUSTER, 0.0, reserve=False)
    assert all(r.message for r in d.reasons)
    if any(p.code not in WARN_PROBLEMS for p in w.problems):
        assert not d.allowed  # a request Allot could not read completely is not allowed by silence


@st.composite
def spoiled_new_kind(draw) -> dict:
    base = draw(st.sampled_from(NEW_OBJECTS))
    paths = [p for p in _paths(base) if p not in (("kind",), ("apiVersion",), ("metadata",), ("metadata", "name"), ("metadata", "namespace"))]
    return spoiled(base, draw(st.sampled_from(paths)), draw(GARBAGE))


@st.composite
def arbitrary_new_kind(draw) -> dict:
    base = draw(st.sampled_from(NEW_OBJECTS))
    return {"apiVersion": base["apiVersion"], "kind": base["kind"], "metadata": {"name": "x", "namespace": "team-a"},
            "spec": draw(json_of(NEW_KEYS))}


def test_the_new_kinds_are_fuzzed():
    assert {o["kind"] for o in NEW_OBJECTS} >= NEW_KINDS | {"Job"}


@FUZZ
@given(spoiled_new_kind())
def test_a_spoiled_object_of_a_new_kind_is_located_never_raised(obj):
    check_new(obj)


@FUZZ
@given(arbitrary_new_kind())
def test_any_spec_of_a_new_kind_is_decided_or_located(obj):
    check_new(obj)
