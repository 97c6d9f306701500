"""Synthetic clusters and traces of a given size (seeded), for `allot bench simulate` and the embedded example.

Nodes: 8×H100 training nodes, 4×L4 inference nodes and CPU-only nodes (GFD labels,
Ready). Pods: whole-GPU jobs of 1/2/4/8 GPUs, HAMi shares of 0.25 and 0.5 GPU, and
CPU-only pods, in the namespaces given, arriving as a Poisson process and running an
exponentially distributed time. Deterministic for a seed.
"""

from __future__ import annotations

import random

from policy.simulate.trace import Arrival

H100 = ("NVIDIA-H100-80GB-HBM3", 8, "96", "1024Gi", 81559)
L4 = ("NVIDIA-L4", 4, "48", "192Gi", 23034)
# (weight, GPUs per pod or None, HAMi gpucores percent or None, cpu, memory, mean minutes)
SHAPES = (
    (30, 1, None, "8", "64Gi", 90),
    (12, 2, None, "16", "128Gi", 120),
    (8, 4, None, "32", "256Gi", 180),
    (6, 8, None, "64", "512Gi", 240),
    (20, 1, 25, "2", "16Gi", 45),
    (12, 1, 50, "4", "32Gi", 60),
    (12, None, None, "4", "8Gi", 30),
)


def node(name: str, kind: tuple | None, labels: dict | None = None) -> dict:
    """A Ready Node of a GPU kind (product, devices, cpu, memory, device MiB), or CPU-only when None."""
    meta_labels = {"kubernetes.io/hostname": name, **(labels or {})}
    alloc = {"cpu": "64", "memory": "256Gi", "pods": "110"}
    if kind is not None:
        product, devices, cpu, mem, mib = kind
        alloc = {"cpu": cpu, "memory": mem, "pods": "110", "nvidia.com/gpu": str(devices)}
        meta_labels.update({"nvidia.com/gpu.product": product, "nvidia.com/gpu.memory": str(mib), "nvidia.com/gpu.count": str(devices)})
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": meta_labels}, "spec": {},
            "status": {"capacity": dict(alloc), "allocatable": alloc, "conditions": [{"type": "Ready", "status": "True"}]}}


def cluster(nodes: int) -> list[dict]:
    """`nodes` Nodes: 5/8 H100, 2/8 L4, 1/8 CPU-only, in racks of 32 (label topology.acme.io/rack)."""
    out = []
    for i in range(nodes):
        kind = H100 if i % 8 < 5 else L4 if i % 8 < 7 else None
        out.append(node(f"node-{i:05d}", kind, {"topology.acme.io/rack": f"r{i // 32}"}))
    return out


def pod(name: str, namespace: str, gpus: int | None, cores: int | None, cpu: str, memory: str, product: str | None = None) -> dict:
    """A Pod asking whole GPUs, a HAMi share (`cores` percent of one GPU) or none."""
    limits: dict = {}
    if gpus:
        limits["nvidia.com/gpu"] = str(gpus)
        if cores:
            limits["nvidia.com/gpucores"] = str(cores)
    resources: dict = {"requests": {"cpu": cpu, "memory": memory}}
    if limits:
        resources["limits"] = limits
    spec: dict = {"containers": [{"name": "main", "image": "example/job", "resources": resources}]}
    if product:
        spec["nodeSelector"] = {"nvidia.com/gpu.product": product}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace, "labels": {"app": name.rsplit("-", 1)[0]}}, "spec": spec}


def trace(pods: int, gpus: int, *, namespaces: tuple[str, ...] = ("team-a", "team-b", "team-c"), load: float = 0.85, seed: int = 0) -> list[Arrival]:
    """`pods` arrivals whose mean GPU demand is about `load` × `gpus` (the cluster's devices)."""
    rng = random.Random(seed)
    weights = [s[0] for s in SHAPES]
    mean_gpu_minutes = sum(w * ((g or 0) * ((c or 100) / 100)) * m for w, g, c, _cpu, _mem, m in SHAPES) / sum(weights)
    rate = load * gpus / mean_gpu_minutes / 60.0 if gpus else 1.0  # arrivals per second
    t = 0.0
    out = []
    for i in range(pods):
        t += rng.expovariate(rate)
        _w, g, cores, cpu, mem, minutes = rng.choices(SHAPES, weights)[0]
        ns = namespaces[rng.randrange(len(namespaces))]
        product = None
        if g and cores:
            product = L4[0]  # shares go to the inference pool
        elif g and g >= 4:
            product = H100[0]
        obj = pod(f"job{i:06d}-{g or 0}g{cores or ''}-0", ns, g, cores, cpu, mem, product)
        out.append(Arrival(round(t, 3), obj, round(rng.expovariate(1.0 / (minutes * 60)), 3), where=f"synthetic:{i}"))
    return out


EXAMPLE_NODES, EXAMPLE_PODS, EXAMPLE_SEED = 16, 400, 15


def example() -> tuple[list[dict], list[Arrival]]:
    """The embedded example (webhook/data/simulate/): 16 nodes and 400 pods of three teams, busy enough to queue."""
    nodes = cluster(EXAMPLE_NODES)
    gpus = sum(int(n["status"]["allocatable"].get("nvidia.com/gpu", 0)) for n in nodes)
    return nodes, trace(EXAMPLE_PODS, gpus, load=1.1, seed=EXAMPLE_SEED)


def trace_lines(arrivals: list[Arrival]) -> list[str]:
    """Allot's JSONL trace format, one record per arrival (sorted keys: stable bytes)."""
    import json

    return [json.dumps({"at": a.at, "duration": a.duration, "object": a.obj}, sort_keys=True, separators=(",", ":")) for a in arrivals]
