"""Generate `webhook/data/demo-cluster.yaml`: the realistic snapshot `allot demo` runs against.

    python -m webhook.demo_cluster > webhook/data/demo-cluster.yaml

256 GPU nodes with GPU Feature Discovery labels: three H100 blocks of eight racks of
eight 8-GPU hosts, one L4 block of four racks of sixteen 4-GPU hosts; a pre-training
fleet fills most H100 racks (rack r5 is left empty, rack r13 half empty), teams hold
part of their quotas (team-a 28 of 32 GPUs, 8 of them H100; team-b 4 of 16), and
HAMi inference slices share some L4s. Deterministic: same bytes on every run.
"""

from __future__ import annotations

import sys

import yaml

H100 = {"product": "NVIDIA-H100-80GB-HBM3", "memory": "81559", "count": 8, "family": "hopper",
        "type": "p5.48xlarge", "cpu": "192", "mem": "2097152Mi"}
L4 = {"product": "NVIDIA-L4", "memory": "23034", "count": 4, "family": "ada-lovelace",
      "type": "g6.12xlarge", "cpu": "48", "mem": "196608Mi"}
TS = "2026-11-01T08:00:00Z"
NAMESPACES = {
    "team-a": "team-a", "team-a-dev": "team-a", "team-b": "team-b", "inference-chat": "serving",
    "inference-search": "serving", "agents-sandbox": "agents", "train": "research", "pretrain": "research",
    "batch-jobs": "research", "kube-system": None, "default": None, "allot-system": None,
}
PRIORITIES = (("critical", 1000, "PreemptLowerPriority"), ("prod", 500, "PreemptLowerPriority"), ("batch", 100, "Never"))


class _Rv:
    def __init__(self) -> None:
        self.n = 1000

    def __call__(self) -> str:
        self.n += 1
        return str(self.n)


rv = _Rv()


def namespace(name: str, team: str | None) -> dict:
    labels = {"kubernetes.io/metadata.name": name}
    if team:
        labels["team"] = team
    return {"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": name, "uid": f"ns-{name}", "resourceVersion": rv(), "creationTimestamp": TS, "labels": labels},
            "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}}


def priority_class(name: str, value: int, preemption: str) -> dict:
    return {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
            "metadata": {"name": name, "uid": f"pc-{name}", "resourceVersion": rv(), "creationTimestamp": TS},
            "value": value, "preemptionPolicy": preemption, "globalDefault": False,
            "description": f"Allot priority {name} (compiled from the policy set)"}


def node(name: str, gpu: dict, block: str, rack: str, zone: str, *, ready: bool = True, cordoned: bool = False) -> dict:
    labels = {
        "kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
        "node.kubernetes.io/instance-type": gpu["type"], "topology.kubernetes.io/region": "us-east-1",
        "topology.kubernetes.io/zone": zone, "topology.acme.io/block": block, "topology.acme.io/rack": rack,
        "nvidia.com/gpu.present": "true", "nvidia.com/gpu.product": gpu["product"],
        "nvidia.com/gpu.memory": gpu["memory"], "nvidia.com/gpu.count": str(gpu["count"]),
        "nvidia.com/gpu.family": gpu["family"], "nvidia.com/gpu.machine": gpu["type"],
        "nvidia.com/cuda.driver.major": "560", "nvidia.com/mig.capable": "false",
    }
    capacity = {"cpu": gpu["cpu"], "memory": gpu["mem"], "pods": "110", "nvidia.com/gpu": str(gpu["count"])}
    allocatable = {**capacity, "cpu": str(int(gpu["cpu"]) - 1)}
    spec: dict = {"providerID": f"aws:///{zone}/{name}",
                  "taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]}
    if cordoned:
        spec["unschedulable"] = True
        spec["taints"].append({"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule", "timeAdded": TS})
    conditions = [{"type": "Ready", "status": "True" if ready else "Unknown", "reason": "KubeletReady" if ready else "NodeStatusUnknown",
                   "lastTransitionTime": TS}]
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "uid": f"node-{name}", "resourceVersion": rv(), "creationTimestamp": TS, "labels": labels},
            "spec": spec, "status": {"capacity": capacity, "allocatable": allocatable, "conditions": conditions}}


def pod(name: str, ns: str, node_name: str, limits: dict, *, priority: str = "batch", labels: dict | None = None,
        product: str | None = None, phase: str = "Running") -> dict:
    value = dict((p, v) for p, v, _ in PRIORITIES)[priority]
    spec: dict = {
        "containers": [{"name": "main", "image": "nvcr.io/nvidia/pytorch:24.10-py3",
                        "resources": {"limits": dict(limits), "requests": dict(limits)}}],
        "nodeName": node_name, "priorityClassName": priority, "priority": value, "schedulerName": "default-scheduler",
        "restartPolicy": "Never", "serviceAccountName": "default",
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
    }
    if product:
        spec["nodeSelector"] = {"nvidia.com/gpu.product": product}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": ns, "uid": f"pod-{ns}-{name}", "resourceVersion": rv(),
                         "creationTimestamp": "2026-11-29T20:00:00Z", "labels": {"app": name, **(labels or {})}},
            "spec": spec, "status": {"phase": phase, "startTime": "2026-11-29T20:00:05Z"}}


def build() -> list[dict]:
    """Every object of the demo cluster, namespaces first."""
    items = [namespace(n, t) for n, t in NAMESPACES.items()]
    items += [priority_class(*p) for p in PRIORITIES]
    h100_racks: dict[str, list[str]] = {}
    for b in range(1, 4):
        for r in range(1, 9):
            rack = f"r{(b - 1) * 8 + r}"
            hosts = [f"h100-b{b}-{rack}-{h}" for h in range(8)]
            h100_racks[rack] = hosts
            for i, h in enumerate(hosts):
                items.append(node(h, H100, f"b{b}", rack, f"us-east-1{'abc'[b - 1]}",
                                  cordoned=(rack == "r9" and i == 7), ready=not (rack == "r17" and i == 7)))
    l4_hosts = []
    for r in range(25, 29):
        for h in range(16):
            name = f"l4-b4-r{r}-{h}"
            l4_hosts.append(name)
            items.append(node(name, L4, "b4", f"r{r}", "us-east-1d"))
    pods = []
    # Pre-training fleet: 7 of 8 hosts busy in every H100 rack, except r5 (empty) and r13 (4 busy).
    for rack, hosts in h100_racks.items():
        busy = 0 if rack == "r5" else 4 if rack == "r13" else 7
        for i in range(busy):
            pods.append(pod(f"pretrain-{rack}-{i}", "pretrain", hosts[i], {"nvidia.com/gpu": "8"}, priority="prod",
                            labels={"acme.io/workload": "pretrain", "team": "research"}, product=H100["product"]))
    # team-a: 8 H100 in a free host of r1, 20 L4 (5 x 4) in team-a-dev; a finished pod holds nothing.
    pods.append(pod("train-a-0", "team-a", h100_racks["r1"][7], {"nvidia.com/gpu": "8"}, priority="prod",
                    labels={"team": "team-a"}, product=H100["product"]))
    pods.append(pod("old-a", "team-a", h100_racks["r2"][7], {"nvidia.com/gpu": "8"}, labels={"team": "team-a"},
                    product=H100["product"], phase="Succeeded"))
    for i in range(5):
        pods.append(pod(f"dev-a-{i}", "team-a-dev", l4_hosts[i], {"nvidia.com/gpu": "4"}, labels={"team": "team-a"},
                        product=L4["product"]))
    # team-b: 4 H100.
    pods.append(pod("eval-b-0", "team-b", h100_racks["r3"][7], {"nvidia.com/gpu": "4"}, priority="prod",
                    labels={"team": "team-b"}, product=H100["product"]))
    # Inference: HAMi slices of L4s (12 GiB each, two per device).
    for i in range(6):
        pods.append(pod(f"chat-{i}", "inference-chat", l4_hosts[16 + i // 4],
                        {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "12288", "nvidia.com/gpucores": "50"},
                        priority="prod", labels={"team": "serving", "app.kubernetes.io/component": "inference"},
                        product=L4["product"]))
    return items + pods


def render() -> str:
    """The YAML text, as `kubectl get … -o yaml` prints a List."""
    header = (
        "# Demo cluster for `allot demo` — generated by `python -m webhook.demo_cluster`; do not edit by hand.\n"
        "# 256 GPU nodes (192 H100 in blocks b1-b3 / racks r1-r24, 64 L4 in block b4 / racks r25-r28);\n"
        "# rack r5 is empty, r13 half empty, every other H100 rack has one free host (r9: cordoned, r17: NotReady).\n"
    )
    doc = {"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": ""}, "items": build()}
    return header + yaml.safe_dump(doc, sort_keys=False, default_flow_style=None, width=200)


if __name__ == "__main__":
    sys.stdout.write(render())
