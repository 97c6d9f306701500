"""Inputs of `allot bench eval`: a realistic 30-block policy set, its Cedar equivalent, a cluster, a request.

Both policy texts come from ONE list of block specs, so the two engines decide the
same things: 12 team quotas in two cohorts, 3 fractional-inference limits, 2 gangs,
2 agents blocks and 11 rules. Cedar cannot compute cohort arithmetic or mutate, so
its request context carries each quota's current `used` and `borrowable` (computed
by Allot's ledger beforehand, outside the timing) and `set` rules have no Cedar
counterpart (Allot still evaluates them: the comparison favours Cedar).
"""

from __future__ import annotations

TEAMS = 12
DECLARATIONS = """
gpu h100 { product "NVIDIA-H100-80GB-HBM3"  memory 80Gi }
gpu l4   { product "NVIDIA-L4"              memory 24Gi }
topology fabric {
  block  "topology.acme.io/block"
  rack   "topology.acme.io/rack"
  host   "kubernetes.io/hostname"
}
priority critical 1000 preempts
priority prod      500
priority batch     100 default
"""


def _quota(i: int) -> tuple[str, str]:
    cohort = "research" if i < TEAMS // 2 else "product"
    nominal, borrow = 16 + 4 * (i % 4), ("" if i % 3 else "  borrow 8\n")
    lend = "  lend 8\n" if i % 4 == 1 else ""
    text = f'quota team-{i} {{\n  for namespace == "team-{i}"\n  cohort {cohort}\n  gpus {nominal}\n  gpus {nominal} of h100\n{borrow}{lend}}}\n'
    q = f'context.quota["team-{i}"]'
    cedar = (
        f'@id("quota team-{i}")\nforbid(principal, action == Action::"CREATE", resource) when {{\n'
        f'  context.namespace == "team-{i}" && context.total_gpus > 0 &&\n'
        f"  ({q}.used + context.total_gpus > {nominal * 1000} + {q}.borrowable ||\n"
        f'   (context has gpu_model && context.gpu_model == "h100" && {q}.h100 + context.total_gpus > {nominal * 1000}))\n}};\n'
    )
    return text, cedar


def _fraction(i: int) -> tuple[str, str]:
    text = f'fraction inference-{i} {{\n  for namespace matches "inference-{i}*"\n  min 0.1\n  max 0.5\n  memory at least 10Gi\n}}\n'
    cedar = (
        f'@id("fraction inference-{i}")\nforbid(principal, action, resource) when {{\n'
        f'  context.namespace like "inference-{i}*" && context has fraction &&\n'
        f"  (context.fraction < 100 || context.fraction > 500 || !(context has gpu_memory) || context.gpu_memory < 10737418240)\n}};\n"
    )
    return text, cedar


def _gang(i: int) -> tuple[str, str]:
    text = (
        f'gang training-{i} {{\n  for labels["acme.io/workload"] == "training-{i}"\n  require min_members\n'
        f"  require topology fabric.rack when total_gpus > 8\n  on unplaceable deny\n}}\n"
    )
    cedar = (
        f'@id("gang training-{i}")\nforbid(principal, action == Action::"CREATE", resource) when {{\n'
        f'  context.labels has "acme.io/workload" && context.labels["acme.io/workload"] == "training-{i}" && !(context has min_members)\n}};\n'
    )
    return text, cedar


def _agents(i: int) -> tuple[str, str]:
    ident = f'user matches "system:serviceaccount:agents-{i}-*:*" or "acme:agents-{i}" in groups'
    text = (
        f"agents sandbox-{i} {{\n  identity {ident}\n"
        f'  allow create pods when namespace == "agents-{i}" and gpus <= 0.25\n'
        f'  allow delete pods when namespace == "agents-{i}"\n'
        f'  deny when privileged or host_path "agents may not escalate"\n}}\n'
    )
    who = f'(context.user like "system:serviceaccount:agents-{i}-*:*" || context.groups.contains("acme:agents-{i}"))'
    cedar = (
        f'@id("agents sandbox-{i} deny")\nforbid(principal, action, resource) when {{ {who} && (context.privileged || context.host_path) }};\n'
        f'@id("agents sandbox-{i}")\nforbid(principal, action, resource) when {{ {who} && !(\n'
        f'  (action == Action::"CREATE" && context.resource == "pods" && context.namespace == "agents-{i}" && context.gpus <= 250) ||\n'
        f'  (action == Action::"DELETE" && context.resource == "pods" && context.namespace == "agents-{i}")) }};\n'
    )
    return text, cedar


_RULES = [
    ("sleeping-agents", 'labels["agents.acme.io/state"] == "sleeping"', "gpus > 0",
     'context.labels has "agents.acme.io/state" && context.labels["agents.acme.io/state"] == "sleeping"', "context.gpus > 0"),
    ("no-privileged-gpu", "gpus > 0", "privileged", "context.gpus > 0", "context.privileged"),
    ("no-host-path-gpu", "gpus > 0", "host_path", "context.gpus > 0", "context.host_path"),
    ("no-host-network-gpu", "gpus > 0", "host_network", "context.gpus > 0", "context.host_network"),
    ("cost-center", 'namespace matches "team-*"', 'gpus > 0 and not ("acme.io/cost-center" in labels)',
     'context.namespace like "team-*"', 'context.gpus > 0 && !(context.labels has "acme.io/cost-center")'),
    ("big-jobs-need-gang", "total_gpus > 8", "not has(gang)", "context.total_gpus > 8000", "!(context has gang)"),
    ("l4-for-inference", 'labels["app.kubernetes.io/component"] == "inference"', 'gpu_model == "h100" and gpus > 1',
     'context.labels has "app.kubernetes.io/component" && context.labels["app.kubernetes.io/component"] == "inference"',
     'context has gpu_model && context.gpu_model == "h100" && context.gpus > 1000'),
    ("batch-not-critical", 'namespace matches "batch-*"', 'priority_class == "critical"',
     'context.namespace like "batch-*"', 'context has priority_class && context.priority_class == "critical"'),
    ("dev-small", 'namespace matches "*-dev"', "gpus > 2", 'context.namespace like "*-dev"', "context.gpus > 2000"),
]


def _rule(name, sel, when, csel, cwhen) -> tuple[str, str]:
    text = f'rule {name} {{\n  for {sel}\n  when {when}\n  deny "{name}: {{gpus}} GPUs in {{namespace}}"\n}}\n'
    cedar = f'@id("rule {name}")\nforbid(principal, action, resource) when {{ {csel} && {cwhen} }};\n'
    return text, cedar


SET_RULES = """rule label-team {
  for gpus > 0 and not ("team" in labels)
  set labels["team"] = namespace.labels["team"]
}
rule annotate-model {
  for has(gpu_model) and not ("acme.io/gpu-model" in annotations)
  set annotations["acme.io/gpu-model"] = gpu_model
}
"""


def generate() -> tuple[str, str, int]:
    """(Allot policy text, Cedar policy text, number of governing blocks)."""
    parts = [_quota(i) for i in range(TEAMS)] + [_fraction(i) for i in range(3)]
    parts += [_gang(i) for i in range(2)] + [_agents(i) for i in range(2)] + [_rule(*r) for r in _RULES]
    allot = DECLARATIONS + "\n".join(p[0] for p in parts) + "\n" + SET_RULES
    cedar = 'permit(principal, action, resource);\n' + "\n".join(p[1] for p in parts)
    return allot, cedar, len(parts) + 2


def _node(i: int) -> dict:
    h100 = i % 4 != 3
    labels = {
        "kubernetes.io/hostname": f"gpu-{i}",
        "topology.acme.io/block": f"block-{i // 16}",
        "topology.acme.io/rack": f"rack-{i // 4}",
        "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3" if h100 else "NVIDIA-L4",
        "nvidia.com/gpu.memory": "81559" if h100 else "23034",
    }
    status = {"allocatable": {"nvidia.com/gpu": "8" if h100 else "4"}, "conditions": [{"type": "Ready", "status": "True"}]}
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": f"gpu-{i}", "labels": labels}, "spec": {}, "status": status}


def _running(i: int, ns: str, gpus: int) -> dict:
    c = {"name": "main", "image": "trainer:1", "resources": {"limits": {"nvidia.com/gpu": str(gpus), "cpu": "8", "memory": "64Gi"}}}
    spec = {"nodeName": f"gpu-{i % 64}", "containers": [c], "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}}
    meta = {"name": f"job-{i}", "namespace": ns, "labels": {"app": "trainer", "team": ns}}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": {"phase": "Running"}}


def cluster_objects() -> list[dict]:
    """64 GPU nodes in 4 blocks x 4 racks, team namespaces, ~190 running GPU pods."""
    objs = [_node(i) for i in range(64)]
    for t in range(TEAMS):
        ns = f"team-{t}"
        objs.append({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns, "labels": {"team": ns}}})
        objs += [_running(t * 16 + k, ns, 1 + k % 2) for k in range(t % 4 * 4 + 4)]
    return objs


def request_pod() -> dict:
    """The benchmark's request: a 2-GPU H100 training pod in team-3, within quota (the common, allowed path)."""
    c = {
        "name": "main",
        "image": "registry.acme.io/train:2.4",
        "resources": {"limits": {"nvidia.com/gpu": "2", "cpu": "16", "memory": "128Gi"}},
        "securityContext": {"allowPrivilegeEscalation": False},
    }
    meta = {
        "name": "train-7f9c",
        "namespace": "team-3",
        "labels": {"app": "trainer", "acme.io/cost-center": "cc-42", "team": "team-3"},
        "annotations": {"acme.io/gpu-model": "h100"},
    }
    spec = {"containers": [c], "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}, "priorityClassName": "prod"}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


JOBSET_REPLICAS, JOBSET_PODS_PER_JOB = 128, 8
BUDGET_JOBSET_P99_US = 5000.0


def request_jobset() -> dict:
    """A training JobSet of 1,024 pods: 128 replicated Jobs x 8 one-GPU pods (8 GPUs a replica), each template rack-required."""
    c = {"name": "main", "image": "registry.acme.io/train:2.4",
         "resources": {"limits": {"nvidia.com/gpu": "1", "cpu": "8", "memory": "64Gi"}}}
    pod = {
        "metadata": {"annotations": {"kueue.x-k8s.io/podset-required-topology": "topology.acme.io/rack"}},
        "spec": {"containers": [c], "restartPolicy": "Never", "priorityClassName": "prod",
                 "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}},
    }
    job = {"spec": {"parallelism": JOBSET_PODS_PER_JOB, "completions": JOBSET_PODS_PER_JOB, "completionMode": "Indexed", "template": pod}}
    meta = {"name": "pretrain-1k", "namespace": "team-3", "labels": {"acme.io/workload": "training-0", "team": "team-3"}}
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": meta,
            "spec": {"replicatedJobs": [{"name": "workers", "replicas": JOBSET_REPLICAS, "template": job}]}}


def request_member() -> dict:
    """The benchmark pod as a pod of an admitted Deployment `train` (its ReplicaSet owns it): it takes its share from the Deployment's hold."""
    pod = request_pod()
    pod["metadata"]["labels"]["pod-template-hash"] = "7f9c"
    pod["metadata"]["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "train-7f9c", "uid": "rs-1", "controller": True}]
    return pod


def cedar_request(w, request: dict, engine, snapshot) -> dict:
    """The Cedar request for the same AdmissionReview: the subject as context, plus each quota's numbers."""
    ledger = engine.state_for(snapshot).quota
    quota = {}
    for spec in ledger.specs:
        quota[spec.name] = {"used": ledger.used[spec.index], "borrowable": ledger.borrowable(spec.index), "h100": ledger.models[spec.index].get("h100", 0)}
    context = {
        "kind": w.kind, "namespace": w.namespace or "", "resource": w.resource, "user": w.user or "",
        "groups": list(w.groups), "labels": dict(w.labels), "annotations": dict(w.annotations),
        "gpus": w.gpus, "total_gpus": w.total_gpus, "privileged": w.privileged, "host_path": w.host_path,
        "host_network": w.host_network, "quota": quota,
    }
    for name in ("fraction", "gpu_memory", "gpu_model", "priority_class", "gang", "min_members"):
        value = getattr(w, name)
        if value is not None:
            context[name] = value
    return {
        "principal": {"type": "User", "id": w.user or "anonymous"},
        "action": {"type": "Action", "id": request["operation"]},
        "resource": {"type": "Pod", "id": f"{w.namespace}/{w.name}"},
        "context": context,
    }
