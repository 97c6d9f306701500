"""A small world for the reclaim controller's tests: the API double (a real HTTP server), a policy, real plans from the engine.

Two teams of one cohort, 8 GPUs nominal each, on two 8-GPU nodes: team-b runs two 8-GPU
workloads (so it borrows 8) and team-a asks for 8 within its nominal: the engine's plan
reclaims one of team-b's. The same objects are stored in the double and held in the
snapshot the engine decides on, so the plan names what the double serves.
"""

from __future__ import annotations

import contextlib

from lang import compile_policies
from policy.engine import Engine
from tests.policy.builders import gpu_container, meta, node, pod, request, snapshot
from tests.policy.reclaim.test_plans import TWO_TEAMS
from webhook.bench.apidouble import ApiDouble, api_client
from webhook.ledger.apiclient import for_client

H100 = "NVIDIA-H100-80GB-HBM3"
NS = "allot-system"
PLURALS = ("pods", "configmaps", "leases", "events", "jobs", "poddisruptionbudgets", "namespaces", "nodes")
POLICY = TWO_TEAMS  # team-a and team-b, 8 GPUs nominal each, one cohort (the plan tests' policy)


def gpu_node(name: str) -> dict:
    """An 8-GPU H100 node, Ready."""
    n = node(name, product=H100, gpus="8")
    n["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    return n


def running(name: str, ns: str, node_name: str, *, minute: int, job: str | None = None, gang: str | None = None,
            labels: dict | None = None, gpus: int = 8) -> dict:
    """A running GPU pod with a uid (owned by Job `job`, or a member of pod group `gang`)."""
    labels = dict(labels or {})
    if gang:
        labels["scheduling.x-k8s.io/pod-group"] = gang
    p = pod(name, ns, [gpu_container(str(gpus))], labels=labels or None, node=node_name, priorityClassName="batch",
            priority=100, nodeSelector={"nvidia.com/gpu.product": H100})
    p["metadata"]["uid"] = f"uid-{ns}-{name}"
    p["metadata"]["creationTimestamp"] = f"2026-11-30T06:{minute:02d}:00Z"
    p["status"] = {"phase": "Running"}
    if job:
        p["metadata"]["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "name": job, "uid": f"uid-job-{job}",
                                             "controller": True}]
    return p


def job(name: str, ns: str) -> dict:
    """A Job object as stored (uid matching its pods' owner reference)."""
    j = {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta(name, ns), "spec": {"parallelism": 1}}
    j["metadata"]["uid"] = f"uid-job-{name}"
    return j


def ask(name: str = "new", ns: str = "team-a", gpus: int = 8, cls: str = "batch", priority: int = 100) -> dict:
    """An AdmissionReview request for one GPU pod."""
    p = pod(name, ns, [gpu_container(str(gpus))], priorityClassName=cls, priority=priority,
            nodeSelector={"nvidia.com/gpu.product": H100})
    return request(p)


def engine() -> Engine:
    """The policy compiled."""
    ps, diags = compile_policies([("t.policy", POLICY)])
    assert not [d for d in diags if d.severity == "error"], diags
    return Engine(ps)


def plan_for(objs: list[dict], req: dict, eng: Engine | None = None):
    """The engine's plan for `req` on `objs` (offline: nothing pledged)."""
    eng = eng or engine()
    decision = eng.decide(req, snapshot(*objs), 1000.0, reserve=False)
    assert decision.allowed and decision.plan is not None, [r.message for r in decision.reasons]
    return decision.plan


def store(double: ApiDouble, objs: list[dict]) -> None:
    """Put `objs` into the double (pods, jobs, nodes)."""
    plural = {"Pod": "pods", "Job": "jobs", "Node": "nodes", "PodDisruptionBudget": "poddisruptionbudgets"}
    for o in objs:
        double.put(plural[o["kind"]], dict(o))


def pdb(name: str, ns: str, match: dict, allowed: int = 0) -> dict:
    """A PodDisruptionBudget whose status allows `allowed` disruptions."""
    return {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": meta(name, ns),
            "spec": {"selector": {"matchLabels": match}, "minAvailable": 1}, "status": {"disruptionsAllowed": allowed}}


@contextlib.asynccontextmanager
async def double_api():
    """(the double, an AsyncApi on it) for the duration."""
    double = ApiDouble(PLURALS)
    url = await double.start()
    api = for_client(api_client(url))
    assert api is not None
    try:
        yield double, api
    finally:
        await api.close()
        await double.stop()
