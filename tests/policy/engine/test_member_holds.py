"""Charge once for TrainJob, RayCluster and RayJob: the admitted workload holds its GPUs, its controllers' children are not charged again, its pods take their share.

Object shapes as the controllers write them (facts from the Kubeflow Trainer and KubeRay sources):
- Trainer's JobSet plugin makes one JobSet named after the TrainJob, controller-owned by it; the
  JobSet's Jobs make the pods, labelled `jobset.sigs.k8s.io/jobset-name: <trainjob>`.
- KubeRay labels every Ray pod `ray.io/cluster: <raycluster>` (plus node-type, group, identifier,
  is-ray-node) and makes it controller-owned by the RayCluster; a RayJob's RayCluster is named
  `<rayjob>-<5 random>` (older releases `<rayjob>-raycluster-<5 random>`), controller-owned by the
  RayJob and labelled `ray.io/originated-from-crd: RayJob`, `ray.io/originated-from-cr-name: <rayjob>`.
"""

from __future__ import annotations

import copy
import os
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings, strategies as st

from lang import compile_policies
from policy.admission import wrap_manifest
from policy.cluster.snapshot import ClusterSnapshot
from policy.engine import Engine
from policy.subject.normalize import normalize
from policy.subject.workloads import owner_hold_in, owner_keys

FUZZ = int(os.environ.get("ALLOT_FUZZ_EXAMPLES", "60"))
REPO = Path(__file__).resolve().parents[3]
OBJECTS = {o["kind"]: o for f in sorted((REPO / "tests/fixtures/workloads").glob("*.yaml")) for o in yaml.safe_load_all(f.read_text()) if o}
POLICY = '''
quota a { for namespace == "team-a"  gpus 8 }
quota b { for namespace == "team-b"  gpus 24 }
'''


def engine():
    ps, diags = compile_policies([("m.policy", POLICY)])
    assert not [d for d in diags if d.severity == "error"], diags
    return Engine(ps)


def review(obj, operation="CREATE"):
    return wrap_manifest(obj, user="alice", groups=["dev"], operation=operation)["request"]


def ref(api, kind, name, uid="owner-uid"):
    return {"apiVersion": api, "kind": kind, "name": name, "uid": uid, "controller": True, "blockOwnerDeletion": True}


# ---- the objects -------------------------------------------------------------------------------------------

def trainjob():
    """qwen-sft: 2 nodes x 4 GPUs = the whole of team-a's 8."""
    return copy.deepcopy(OBJECTS["TrainJob"])


def trainjob_jobset():
    """The JobSet Trainer makes for qwen-sft: same name, controller-owned by the TrainJob."""
    gpu = {"name": "node", "image": "ghcr.io/acme/sft:0.9", "resources": {"limits": {"nvidia.com/gpu": "4"}}}
    job = {"spec": {"parallelism": 2, "completions": 2, "template": {"metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
                                                                     "spec": {"restartPolicy": "OnFailure", "containers": [gpu]}}}}
    meta = {"name": "qwen-sft", "namespace": "team-a", "uid": "js-1", "labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"},
            "ownerReferences": [ref("trainer.kubeflow.org/v1alpha1", "TrainJob", "qwen-sft", "0a1b2c3d-0000-4000-8000-000000000004")]}
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": meta, "spec": {"replicatedJobs": [{"name": "node", "replicas": 1, "template": job}]}}


def trainjob_pod(i, jobset="qwen-sft", ns="team-a"):
    """A node pod of the TrainJob's JobSet, as the Job controller makes it."""
    labels = {"jobset.sigs.k8s.io/jobset-name": jobset, "jobset.sigs.k8s.io/replicatedjob-name": "node",
              "jobset.sigs.k8s.io/job-index": "0", "batch.kubernetes.io/job-name": f"{jobset}-node-0",
              "batch.kubernetes.io/job-completion-index": str(i), "trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}
    meta = {"name": f"{jobset}-node-0-{i}-x7k2p", "namespace": ns, "labels": labels,
            "ownerReferences": [ref("batch/v1", "Job", f"{jobset}-node-0")]}
    spec = {"restartPolicy": "OnFailure", "containers": [{"name": "node", "image": "ghcr.io/acme/sft:0.9", "resources": {"limits": {"nvidia.com/gpu": "4"}}}]}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def raycluster():
    """rl-cluster: a GPU-less head + 3 replicas x 2 hosts x 4 GPUs = team-b's 24."""
    return copy.deepcopy(OBJECTS["RayCluster"])


def rayjob():
    """eval-run, resumed: a GPU-less head + 2 one-GPU workers."""
    rj = copy.deepcopy(OBJECTS["RayJob"])
    rj["spec"]["suspend"] = False
    rj.pop("status", None)
    return rj


def rayjob_cluster(name="eval-run-q8z2m"):
    """The RayCluster KubeRay makes for eval-run: the RayJob's labels plus where it came from, controller-owned by it."""
    meta = {"name": name, "namespace": "team-b", "uid": "rc-2",
            "labels": {"ray.io/originated-from-crd": "RayJob", "ray.io/originated-from-cr-name": "eval-run"},
            "ownerReferences": [ref("ray.io/v1", "RayJob", "eval-run", "0a1b2c3d-0000-4000-8000-000000000022")]}
    return {"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": meta, "spec": copy.deepcopy(rayjob()["spec"]["rayClusterSpec"])}


def ray_pod(cluster, i, gpus="4", group="gpu", ns="team-b"):
    """A worker pod as KubeRay labels and owns it."""
    labels = {"ray.io/cluster": cluster, "ray.io/node-type": "worker", "ray.io/group": group, "ray.io/is-ray-node": "yes",
              "ray.io/identifier": f"{cluster}-worker", "app.kubernetes.io/name": "kuberay", "app.kubernetes.io/created-by": "kuberay-operator"}
    meta = {"name": f"{cluster}-{group}-worker-{i}", "namespace": ns, "labels": labels, "ownerReferences": [ref("ray.io/v1", "RayCluster", cluster)]}
    spec = {"containers": [{"name": "ray-worker", "image": "rayproject/ray:2.41.0", "resources": {"limits": {"nvidia.com/gpu": gpus}}}]}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def kaito_pod(workspace, i, gpus="8", ns="serving"):
    """An inference pod of a KAITO Workspace: KAITO's StatefulSet is named after the Workspace and labels its pods `kaito.sh/workspace`."""
    meta = {"name": f"{workspace}-{i}", "namespace": ns,
            "labels": {"kaito.sh/workspace": workspace, "apps.kubernetes.io/pod-index": str(i), "statefulset.kubernetes.io/pod-name": f"{workspace}-{i}"},
            "ownerReferences": [ref("apps/v1", "StatefulSet", workspace)]}
    spec = {"containers": [{"name": workspace, "image": "mcr.microsoft.com/aks/kaito/kaito-llama:0.1", "resources": {"limits": {"nvidia.com/gpu": gpus}}}]}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def stranger(ns, gpus="1"):
    spec = {"containers": [{"name": "m", "image": "x:1", "resources": {"limits": {"nvidia.com/gpu": gpus}}}]}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "stranger", "namespace": ns}, "spec": spec}


# ---- the table ---------------------------------------------------------------------------------------------

@dataclass
class Case:
    name: str
    workload: object  # builder of the admitted workload
    key: str  # its hold
    steps: list  # builders of the requests admitted after it, in order
    want_allowed: list  # their decisions
    want_held: int  # milli-GPU left in the workload's hold
    want_total: int  # milli-GPU held in all (the workload's + its pods' own holds): never more than once
    stranger_ns: str
    want_stranger: bool  # whether another 1-GPU pod of that namespace fits afterwards
    watch: list = field(default_factory=list)  # (event, object builder) applied to the snapshot before the steps


CASES = [
    Case("a TrainJob holds its nodes' GPUs", trainjob, "wl:team-a/TrainJob/qwen-sft", [], [], 8000, 8000, "team-a", False),
    Case("a TrainJob's JobSet is its controller's child: not charged again",
         trainjob, "wl:team-a/TrainJob/qwen-sft", [trainjob_jobset], [True], 8000, 8000, "team-a", False),
    Case("a TrainJob's pods find its hold through the JobSet label and take their share",
         trainjob, "wl:team-a/TrainJob/qwen-sft", [trainjob_jobset, lambda: trainjob_pod(0), lambda: trainjob_pod(1)],
         [True, True, True], 0, 8000, "team-a", False),
    Case("another JobSet's pod does not take from a TrainJob's hold",
         trainjob, "wl:team-a/TrainJob/qwen-sft", [lambda: trainjob_pod(0, jobset="other")], [False], 8000, 8000, "team-a", False),
    Case("a RayCluster holds its workers' GPUs; its pods take them",
         raycluster, "wl:team-b/RayCluster/rl-cluster", [lambda i=i: ray_pod("rl-cluster", i) for i in range(6)],
         [True] * 6, 0, 24000, "team-b", False),
    Case("a pod of another RayCluster takes nothing", raycluster, "wl:team-b/RayCluster/rl-cluster",
         [lambda: ray_pod("rl-other", 0)], [False], 24000, 24000, "team-b", False),
    Case("a RayJob holds its cluster's GPUs; its RayCluster is not charged again; the cluster's pods take from the RayJob's hold",
         rayjob, "wl:team-b/RayJob/eval-run", [rayjob_cluster, lambda: ray_pod("eval-run-q8z2m", 0, "1", "small"),
                                              lambda: ray_pod("eval-run-q8z2m", 1, "1", "small")],
         [True, True, True], 0, 2000, "team-b", True),
    Case("a RayJob's cluster named the older way (`-raycluster-`) is found too",
         rayjob, "wl:team-b/RayJob/eval-run", [lambda: ray_pod("eval-run-raycluster-q8z2m", 0, "1", "small")],
         [True], 1000, 2000, "team-b", True),
    Case("a RayJob's hold is released when the watch shows it finished",
         rayjob, "wl:team-b/RayJob/eval-run", [], [], 0, 0, "team-b", True,
         watch=[("ADDED", lambda: {**rayjob(), "status": {"jobDeploymentStatus": "Complete", "jobStatus": "SUCCEEDED"}})]),
    Case("a TrainJob's hold is released when the watch shows it complete",
         trainjob, "wl:team-a/TrainJob/qwen-sft", [], [], 0, 0, "team-a", True,
         watch=[("MODIFIED", lambda: {**trainjob(), "status": {"conditions": [{"type": "Complete", "status": "True", "reason": "JobSetCompleted"}]}})]),
]


def held(snap, key):
    h = snap.reservations.holds.get(key)
    return sum(x[1] for x in h[1]) if h else 0


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_member_holds(case):
    e, snap = engine(), ClusterSnapshot.from_objects([])
    d = e.decide(review(case.workload()), snap, 0.0)
    assert d.allowed, d.reasons
    for event, build in case.watch:
        snap.apply(event, build())
    allowed = [e.decide(review(step()), snap, 1.0).allowed for step in case.steps]
    assert allowed == case.want_allowed
    assert held(snap, case.key) == case.want_held
    assert sum(m for m, _, _ in snap.reservations.totals().values()) == case.want_total
    assert e.decide(review(stranger(case.stranger_ns)), snap, 2.0, reserve=False).allowed is case.want_stranger


@dataclass
class KeyCase:
    name: str
    pod: object
    want_keys: tuple  # owner_keys, in lookup order
    holds: tuple  # keys present in the ledger
    want_owner: str | None


KEY_CASES = [
    KeyCase("a TrainJob pod: its Job, then the JobSet label as JobSet and as TrainJob", trainjob_pod(0),
            ("wl:team-a/Job/qwen-sft-node-0", "wl:team-a/JobSet/qwen-sft", "wl:team-a/TrainJob/qwen-sft"),
            ("wl:team-a/TrainJob/qwen-sft",), "wl:team-a/TrainJob/qwen-sft"),
    KeyCase("a JobSet's own hold comes before a TrainJob of that name", trainjob_pod(0),
            ("wl:team-a/Job/qwen-sft-node-0", "wl:team-a/JobSet/qwen-sft", "wl:team-a/TrainJob/qwen-sft"),
            ("wl:team-a/TrainJob/qwen-sft", "wl:team-a/JobSet/qwen-sft"), "wl:team-a/JobSet/qwen-sft"),
    KeyCase("a Ray pod: its RayCluster, then the RayJob it was named for", ray_pod("eval-run-q8z2m", 0),
            ("wl:team-b/RayCluster/eval-run-q8z2m", "wl:team-b/RayJob/eval-run", "wl:team-b/RayService/eval-run"),
            ("wl:team-b/RayJob/eval-run",), "wl:team-b/RayJob/eval-run"),
    KeyCase("a RayService's RayCluster (`<rayservice>-raycluster-<5>`): the RayService's hold", ray_pod("llm-serve-raycluster-x2k9p", 0),
            ("wl:team-b/RayCluster/llm-serve-raycluster-x2k9p", "wl:team-b/RayJob/llm-serve-raycluster", "wl:team-b/RayService/llm-serve-raycluster",
             "wl:team-b/RayJob/llm-serve", "wl:team-b/RayService/llm-serve"),
            ("wl:team-b/RayService/llm-serve",), "wl:team-b/RayService/llm-serve"),
    KeyCase("a KAITO pod (owned by the StatefulSet named after its Workspace): the Workspace's hold by its label", kaito_pod("ws-llama", 0),
            ("wl:serving/StatefulSet/ws-llama", "wl:serving/Workspace/ws-llama"),
            ("wl:serving/Workspace/ws-llama",), "wl:serving/Workspace/ws-llama"),
    KeyCase("older KubeRay naming: both readings of the name", ray_pod("eval-run-raycluster-q8z2m", 0),
            ("wl:team-b/RayCluster/eval-run-raycluster-q8z2m", "wl:team-b/RayJob/eval-run-raycluster", "wl:team-b/RayService/eval-run-raycluster",
             "wl:team-b/RayJob/eval-run", "wl:team-b/RayService/eval-run"),
            ("wl:team-b/RayJob/eval-run",), "wl:team-b/RayJob/eval-run"),
    KeyCase("a RayCluster name without a 5-character suffix names no RayJob", ray_pod("rl-cluster", 0),
            ("wl:team-b/RayCluster/rl-cluster",), ("wl:team-b/RayJob/rl",), None),
    KeyCase("no hold of any candidate: none", ray_pod("eval-run-q8z2m", 0),
            ("wl:team-b/RayCluster/eval-run-q8z2m", "wl:team-b/RayJob/eval-run", "wl:team-b/RayService/eval-run"), ("wl:team-b/RayJob/other",), None),
]


@pytest.mark.parametrize("case", KEY_CASES, ids=lambda c: c.name)
def test_owner_keys_and_lookup(case):
    w = normalize(review(case.pod), None)
    assert owner_keys(w) == case.want_keys
    holds = {k: (0.0, ()) for k in case.holds}
    assert owner_hold_in(w, holds) == case.want_owner
    # the fast lookup finds the first candidate the careful list would
    assert owner_hold_in(w, holds) == next((k for k in owner_keys(w) if k in holds), None)


# ---- any shape: the fast look-up never raises and finds what the careful one finds ------------------------


_scalar = st.one_of(st.none(), st.booleans(), st.integers(-2, 2), st.sampled_from(["", "x", "rerank-7c9f8", "eval-run-q8z2m", "qwen-sft"]))
_kind = st.one_of(_scalar, st.sampled_from(["ReplicaSet", "Job", "RayCluster", "TrainJob", "JobSet", "Pod", "Deployment"]))
_ref = st.one_of(_scalar, st.lists(_scalar, max_size=2), st.fixed_dictionaries(
    {}, optional={"kind": _kind, "name": _scalar, "controller": st.one_of(st.booleans(), _scalar), "uid": _scalar}))
_labels = st.dictionaries(st.sampled_from(["pod-template-hash", "jobset.sigs.k8s.io/jobset-name", "ray.io/cluster",
                                           "training.kubeflow.org/job-name", "training.kubeflow.org/operator-name", "app"]),
                          st.sampled_from(["7c9f8", "qwen-sft", "pytorchjob-controller", "mpijob-controller", "x"]), max_size=4)


@settings(max_examples=FUZZ, deadline=None)
@given(refs=st.one_of(_scalar, st.lists(_ref, max_size=3), st.dictionaries(st.text(max_size=3), _scalar, max_size=2)), labels=_labels,
       pick=st.integers(0, 5))
def test_the_fast_lookup_matches_the_careful_one_on_any_shape(refs, labels, pick):
    meta = {"name": "p", "namespace": "team-b", "labels": labels, "ownerReferences": refs}
    w = normalize(review({"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": {"containers": []}}), None)
    candidates = [k for k in owner_keys(w) if not k.endswith("/")]
    holds = {k: (0.0, ()) for k in candidates[pick:pick + 1]}  # one candidate held (or none)
    assert owner_hold_in(w, holds) == next((k for k in owner_keys(w) if k in holds), None)


def test_an_empty_pod_template_hash_names_no_deployment():
    """A ReplicaSet `x-` with an empty hash label: owner_keys names no Deployment, and the fast look-up takes from none either."""
    meta = {"name": "p", "namespace": "team-b", "labels": {"pod-template-hash": ""}, "ownerReferences": [ref("apps/v1", "ReplicaSet", "x-")]}
    w = normalize(review({"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": {"containers": []}}), None)
    assert owner_keys(w) == ("wl:team-b/ReplicaSet/x-",)
    assert owner_hold_in(w, {"wl:team-b/Deployment/x": (0.0, ())}) is None
