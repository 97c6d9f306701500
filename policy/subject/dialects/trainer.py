"""Kubeflow Trainer: a TrainJob read with its TrainingRuntime / ClusterTrainingRuntime, when the state holds it.

The runtime's JobSet template says the pods: its replicated jobs (dataset and model
initializers, the trainer `node` job, an MPI launcher) as Trainer makes them. The TrainJob
overrides the trainer job's pod count (`spec.trainer.numNodes`, else the runtime's
`mlPolicy.numNodes`) and the resources of its `node` container (`resourcesPerNode`).
Initializers run to completion before the trainer starts (JobSet `dependsOn`): their pods
are counted, but are no part of the gang's minimum.
"""

from __future__ import annotations

from typing import Mapping

from .common import EMPTY

GROUP = "trainer.kubeflow.org"
VERSIONS = ("v1alpha1", "v1beta1", "v1")
STEP_LABEL = "trainer.kubeflow.org/trainjob-ancestor-step"
INITIALIZERS = frozenset({"dataset-initializer", "model-initializer"})
TRAINER_STEP, TRAINER_JOB, TRAINER_CONTAINER = "trainer", "node", "node"


def _map(v) -> Mapping:
    return v if type(v) is dict else EMPTY


def find_runtime(spec: Mapping, ns: str | None, snapshot) -> tuple[Mapping | None, str]:
    """(the runtime a TrainJob names, how it is named); None when the state does not hold it."""
    ref = _map(spec.get("runtimeRef"))
    name, kind = ref.get("name"), ref.get("kind") or "ClusterTrainingRuntime"
    what = f"{kind} {name!r}"
    if snapshot is None or type(name) is not str or not name or kind not in ("ClusterTrainingRuntime", "TrainingRuntime"):
        return None, what
    where = (ns or "default") if kind == "TrainingRuntime" else "default"  # a cluster-scoped runtime is filed under "default"
    for v in VERSIONS:
        found = snapshot.other(f"{GROUP}/{v}", kind, where, name)
        if found is not None:
            return found, what
    return None, what


def _step(rj: Mapping) -> str:
    """The Trainer step of a replicated job: its ancestor-step label (on the Job or the pod template), else its name."""
    jt = _map(rj.get("template"))
    for meta in (_map(jt.get("metadata")), _map(_map(_map(jt.get("spec")).get("template")).get("metadata"))):
        step = _map(meta.get("labels")).get(STEP_LABEL)
        if type(step) is str and step:
            return step
    name = rj.get("name")
    return TRAINER_STEP if name == TRAINER_JOB else name if type(name) is str else ""


def with_node_resources(pod_spec: Mapping, resources) -> dict:
    """The trainer pod spec with `resourcesPerNode` on its `node` container (else its first one)."""
    containers = pod_spec.get("containers") if type(pod_spec.get("containers")) is list else []
    if type(resources) is not dict or not containers:
        return dict(pod_spec)
    at = next((i for i, c in enumerate(containers) if type(c) is dict and c.get("name") == TRAINER_CONTAINER), 0)
    out = list(containers)
    out[at] = {**_map(containers[at]), "resources": resources}
    return {**pod_spec, "containers": out}


def runtime_jobs(runtime: Mapping, nodes: int | None):
    """(name, pods, minimum or None, pod template, is trainer) per replicated job of the runtime's JobSet template."""
    rspec = _map(runtime.get("spec"))
    policy_nodes = _map(rspec.get("mlPolicy")).get("numNodes")
    nodes = nodes if nodes is not None else policy_nodes if type(policy_nodes) is int and policy_nodes >= 0 else None
    jobs = _map(_map(rspec.get("template")).get("spec")).get("replicatedJobs")
    for i, rj in enumerate(jobs if type(jobs) is list else ()):
        rj = _map(rj)
        jspec = _map(_map(rj.get("template")).get("spec"))
        replicas = rj.get("replicas") if type(rj.get("replicas")) is int and rj["replicas"] >= 0 else 1
        parallelism = jspec.get("parallelism") if type(jspec.get("parallelism")) is int and jspec["parallelism"] >= 0 else 1
        step = _step(rj)
        name = rj.get("name") if type(rj.get("name")) is str else str(i)
        trainer = step == TRAINER_STEP
        pods = nodes if trainer and nodes is not None else replicas * parallelism
        yield name, pods, 0 if step in INITIALIZERS else None, _map(jspec.get("template")), trainer
