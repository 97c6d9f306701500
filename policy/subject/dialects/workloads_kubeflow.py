"""Kubeflow jobs of the training-operator v1 shape and the MPI operator: MPIJob, TFJob, PaddleJob, XGBoostJob, JAXJob.

Each is `spec.<x>ReplicaSpecs` (role -> replicas, template; replicas default 1, as the
operators default them), suspended by `spec.runPolicy.suspend`, and one gang of all its
pods (the PodGroup the operator makes: `minMember` = `runPolicy.schedulingPolicy.minAvailable`,
else every pod). A PaddleJob's `elasticPolicy.minReplicas` lowers its Worker minimum. The
MPIJob v2beta1 (mpi-operator) keeps its launcher in `mpiReplicaSpecs.Launcher` too;
`runLauncherAsWorker` changes the hostfile, not the pods. Field names as in
kubeflow/training-operator pkg/apis/kubeflow.org/v1 and kubeflow/mpi-operator v2beta1.
"""

from __future__ import annotations

from collections.abc import Mapping

from policy.subject.model import Problem

from .common import MALFORMED
from .workload_parts import Template, _count, _object, _pod

# kind -> the replica-specs field of its spec
REPLICA_SPECS = {
    "MPIJob": "mpiReplicaSpecs", "TFJob": "tfReplicaSpecs", "PaddleJob": "paddleReplicaSpecs",
    "XGBoostJob": "xgbReplicaSpecs", "JAXJob": "jaxReplicaSpecs",
}
# Roles in the order the operators start them (a minimum below the total is given to these first).
ROLE_ORDER = ("Launcher", "Chief", "Master", "PS", "Worker", "Evaluator")


def share_minimum(templates: list[Template], minimum: int | None, path: str, problems: list) -> list[Template]:
    """The job-level gang minimum spread over the sets in order (each set's own minimum, then up to its count); None: all pods."""
    if minimum is None:
        return templates
    total = sum(t.count for t in templates)
    if minimum > total:
        problems.append(Problem(MALFORMED, f"{path}: {minimum} is more than the {total} pods the job runs; every pod counted"))
        minimum = total
    own = [min(t.minimum, t.count) if t.minimum is not None else t.count for t in templates]
    left, firsts = minimum, []
    for m in own:  # first pass: each set's own minimum, as far as the job minimum goes
        take = min(m, left)
        firsts.append(take)
        left -= take
    out = []
    for t, take in zip(templates, firsts):  # second pass: what is left, up to each set's count
        more = min(t.count - take, left)
        left -= more
        out.append(Template(t.name, t.count, take + more, t.pod, t.spec_path, t.where))
    return out


def _role_key(role) -> tuple:
    return (ROLE_ORDER.index(role) if role in ROLE_ORDER else len(ROLE_ORDER), str(role))


def _replica_specs(kind: str, spec: Mapping, ns, problems: list) -> list[Template]:
    field = REPLICA_SPECS[kind]
    specs = _object(spec.get(field), f"spec.{field}", problems)
    out = []
    for role in sorted(specs, key=_role_key):
        at = f"spec.{field}.{role}"
        rs = _object(specs[role], at, problems)
        n = _count(rs.get("replicas"), 1, f"{at}.replicas", problems)
        out.append(Template(str(role), n, None, _pod(rs.get("template"), ns, f"{at}.template", problems),
                            ("spec", field, str(role), "template", "spec")))
    return out


def _run_policy(spec: Mapping, problems: list) -> tuple[Mapping, int | None]:
    rp = _object(spec.get("runPolicy"), "spec.runPolicy", problems)
    sp = _object(rp.get("schedulingPolicy"), "spec.runPolicy.schedulingPolicy", problems)
    least = sp.get("minAvailable")
    minimum = _count(least, 0, "spec.runPolicy.schedulingPolicy.minAvailable", problems) if least is not None else None
    return rp, minimum


def _elastic_worker(templates: list[Template], spec: Mapping, problems: list) -> list[Template]:
    """A PaddleJob's elastic Worker set may start with `elasticPolicy.minReplicas` of its pods."""
    ep = _object(spec.get("elasticPolicy"), "spec.elasticPolicy", problems)
    least = ep.get("minReplicas")
    if least is None:
        return templates
    n = _count(least, 0, "spec.elasticPolicy.minReplicas", problems)
    return [Template(t.name, t.count, min(n, t.count), t.pod, t.spec_path, t.where) if t.name == "Worker" else t for t in templates]


def _kubeflow(kind: str):
    def read(obj: Mapping, spec: Mapping, ns, problems: list) -> tuple[list[Template], bool]:
        templates = _replica_specs(kind, spec, ns, problems)
        rp, minimum = _run_policy(spec, problems)
        if kind == "PaddleJob":
            templates = _elastic_worker(templates, spec, problems)
        templates = share_minimum(templates, minimum, "spec.runPolicy.schedulingPolicy.minAvailable", problems)
        return templates, rp.get("suspend") is True
    read.__name__ = f"_{kind.lower()}"
    read.__doc__ = f"A {kind}: its replica specs, run policy and gang minimum."
    return read


KINDS = {("kubeflow.org", kind): kind.lower() for kind in REPLICA_SPECS}
READERS = {kind.lower(): _kubeflow(kind) for kind in REPLICA_SPECS}
GANG_READERS = frozenset(READERS)
RESOURCES = {
    "MPIJob": ("mpijobs", "kubeflow.org", ("v2beta1", "v1")),
    "TFJob": ("tfjobs", "kubeflow.org", ("v1",)),
    "PaddleJob": ("paddlejobs", "kubeflow.org", ("v1",)),
    "XGBoostJob": ("xgboostjobs", "kubeflow.org", ("v1",)),
    "JAXJob": ("jaxjobs", "kubeflow.org", ("v1",)),
}
