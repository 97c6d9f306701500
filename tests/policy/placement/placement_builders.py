"""Small builders for placement tests: Node and Pod objects as `kubectl get -o yaml` prints them."""

from __future__ import annotations

from policy.placement import GangRequest, PlacementIndex
from policy.subject.model import PodSet

H100 = "NVIDIA-H100-80GB-HBM3"
L4 = "NVIDIA-L4"
MODELS = {H100: ("h100", 80 * 2**30), L4: ("l4", 24 * 2**30)}
BLOCK, RACK, HOST = "topology.acme.io/block", "topology.acme.io/rack", "kubernetes.io/hostname"
FABRIC = [("fabric", [("block", BLOCK), ("rack", RACK), ("host", HOST)])]


def node(name, block="b1", rack="r1", *, gpus=4, product=H100, ready=True, cordoned=False, taints=(), memory_mib=None, labels=None,
         cpu="96", memory=None, max_pods=None):
    """A GPU node in `block`/`rack` (rack values are made unique per block); `cpu`, `memory`, `max_pods`: allocatable (None: unstated)."""
    meta_labels = {BLOCK: block, RACK: f"{block}-{rack}", HOST: name, "nvidia.com/gpu.product": product, "nvidia.com/gpu.count": str(gpus)}
    if memory_mib is not None:
        meta_labels["nvidia.com/gpu.memory"] = str(memory_mib)
    meta_labels.update(labels or {})
    spec = {"taints": [dict(t) for t in taints]}
    if cordoned:
        spec["unschedulable"] = True
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "uid": f"uid-{name}", "labels": meta_labels},
        "spec": spec,
        "status": {
            "allocatable": {"nvidia.com/gpu": str(gpus), **{k: str(v) for k, v in (("cpu", cpu), ("memory", memory), ("pods", max_pods)) if v is not None}},
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def pod(name, node_name=None, *, gpus=1, share=None, phase="Running", namespace="team-a", annotations=None, cpu=None, memory=None):
    """A pod holding `gpus` whole GPUs, or (with `share`, e.g. "0.25") a KAI `gpu-fraction` of one GPU; `cpu`/`memory`: requests."""
    resources = {"limits": {"nvidia.com/gpu": str(gpus)}} if gpus and share is None else {}
    requests = {k: v for k, v in (("cpu", cpu), ("memory", memory)) if v is not None}
    if requests:
        resources["requests"] = requests
    spec = {"containers": [{"name": "main", "image": "x", "resources": resources}]}
    if node_name:
        spec["nodeName"] = node_name
    meta = {"name": name, "namespace": namespace, "uid": f"uid-{name}"}
    annotations = dict(annotations or {})
    if share is not None:
        annotations["gpu-fraction"] = share
    if annotations:
        meta["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": {"phase": phase}}


def index(nodes=(), pods=(), topologies=FABRIC, models=MODELS) -> PlacementIndex:
    """An index loaded with the given objects, through events (the incremental path)."""
    idx = PlacementIndex(topologies, models)
    for n in nodes:
        idx.apply_node("ADDED", n)
    for p in pods:
        idx.apply_pod("ADDED", p)
    return idx


def gang(count, gpus=1000, *, product=None, fraction=None, memory=None, required=None, preferred=None, min_count=None, per_gpu=None, topology="fabric"):
    """A one-pod-set gang: `count` pods of `gpus` milli-GPU."""
    ps = PodSet("workers", count, gpus, fraction=fraction, gpu_memory=memory, gpu_product=product)
    return GangRequest((ps,), min_count=min_count, topology=topology, required=required, preferred=preferred, per_gpu=per_gpu)
