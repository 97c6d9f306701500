"""The openb trace (Alibaba's GPU-sharing cluster trace, CC BY 4.0) as real Kubernetes Node and Pod objects.

Nodes (`sn, cpu_milli, memory_mib, gpu, model`): a Ready Node with cpu and memory
allocatable, `nvidia.com/gpu` devices and the GFD labels `nvidia.com/gpu.product`
(the trace's model name) and `nvidia.com/gpu.memory` (MiB, for the models whose memory
is public; G2/G3 are undisclosed and carry none).

Pods (`name, cpu_milli, memory_mib, num_gpu, gpu_milli, gpu_spec, …, creation_time,
deletion_time`; the multi-GPU variants carry only the first five): cpu and memory requests; whole GPUs as `nvidia.com/gpu`; a shared GPU
(`gpu_milli` < 1000) in the HAMi dialect, `nvidia.com/gpu: 1` plus
`nvidia.com/gpucores` (percent; every share in the trace is a multiple of 10 milli, so
exact); `gpu_spec` as required node affinity on `nvidia.com/gpu.product`. The pod
arrives at `creation_time` and runs `deletion_time - creation_time` seconds; without
those columns every pod arrives at 0, in file order, and runs to the end.
"""

from __future__ import annotations

import csv
import io

from policy.simulate.trace import Arrival, Trace, TraceError

NODE_COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu", "model")
POD_COLUMNS = ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli")  # the short variants (multigpu*) stop here
POD_OPTIONAL = ("gpu_spec", "qos", "pod_phase", "creation_time", "deletion_time", "scheduled_time")
NAMESPACE = "openb"
# Device memory (MiB) of the models whose memory is public; P100 and T4 ship 16 GB, V100M16/M32 16/32 GB, A10 24 GB.
MODEL_MEMORY_MIB = {"P100": 16384, "T4": 16384, "V100M16": 16384, "V100M32": 32768, "A10": 24576}


def _rows(text: str, name: str, columns: tuple[str, ...]):
    reader = csv.DictReader(io.StringIO(text, newline=""))  # newline="": csv itself reads \r\n, \r and quoted breaks
    try:
        fields = reader.fieldnames or ()
        missing = [c for c in columns if c not in fields]
        if missing:
            raise TraceError(f"{name}:1: not an openb CSV: missing column(s) {', '.join(missing)}")
        for row in reader:
            yield reader.line_num, row
    except csv.Error as exc:
        raise TraceError(f"{name}:{reader.line_num}: not readable as CSV ({exc})") from None


def _int(row: dict, col: str, where: str, *, empty: int | None = None) -> int:
    raw = (row.get(col) or "").strip()
    if row.get(col) is None:
        raise TraceError(f"{where}: column {col} is missing (the row has fewer fields than the header)")
    if not raw and empty is not None:
        return empty
    if not raw.isdigit():
        raise TraceError(f"{where}: column {col}: {raw!r} is not a whole non-negative number")
    return int(raw)


def is_openb(text: str, kind: str) -> bool:
    """The CSV header of an openb node list (`kind="nodes"`) or pod list (`"pods"`)."""
    header = text.lstrip("\ufeff").split("\n", 1)[0].strip().split(",")
    return all(c in header for c in (NODE_COLUMNS if kind == "nodes" else POD_COLUMNS))


def openb_nodes(text: str, name: str) -> list[dict]:
    """Node objects of an openb node list."""
    nodes = []
    for n, row in _rows(text, name, NODE_COLUMNS):
        where = f"{name}:{n}"
        sn = (row.get("sn") or "").strip()
        if not sn:
            raise TraceError(f"{where}: column sn is empty")
        cpu, mem, gpus = _int(row, "cpu_milli", where), _int(row, "memory_mib", where), _int(row, "gpu", where)
        model = (row.get("model") or "").strip()
        labels = {"kubernetes.io/hostname": sn}
        alloc = {"cpu": f"{cpu}m", "memory": f"{mem}Mi", "pods": "110"}
        if gpus:
            alloc["nvidia.com/gpu"] = str(gpus)
            labels["nvidia.com/gpu.count"] = str(gpus)
            if model:
                labels["nvidia.com/gpu.product"] = model
                if model in MODEL_MEMORY_MIB:
                    labels["nvidia.com/gpu.memory"] = str(MODEL_MEMORY_MIB[model])
        nodes.append({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": sn, "labels": labels},
            "spec": {},
            "status": {"capacity": dict(alloc), "allocatable": alloc,
                       "conditions": [{"type": "Ready", "status": "True"}]},
        })
    return nodes


def openb_pod(row: dict, where: str) -> tuple[dict, int, int | None]:
    """(Pod object, creation time, deletion time or None) of one pod row."""
    name = (row.get("name") or "").strip()
    if not name:
        raise TraceError(f"{where}: column name is empty")
    cpu, mem = _int(row, "cpu_milli", where), _int(row, "memory_mib", where)
    num_gpu, gpu_milli = _int(row, "num_gpu", where), _int(row, "gpu_milli", where, empty=0)
    timed = "creation_time" in row
    created = _int(row, "creation_time", where) if timed else 0
    deleted = _int(row, "deletion_time", where, empty=-1) if timed else -1
    requests: dict = {"cpu": f"{cpu}m", "memory": f"{mem}Mi"}
    limits: dict = {}
    annotations: dict = {}
    if num_gpu and (gpu_milli >= 1000 or gpu_milli == 0):
        limits["nvidia.com/gpu"] = str(num_gpu)
    elif num_gpu == 1:
        if gpu_milli % 10:
            raise TraceError(f"{where}: gpu_milli {gpu_milli} is not a whole percent (HAMi gpucores takes 1..100)")
        limits["nvidia.com/gpu"] = "1"
        limits["nvidia.com/gpucores"] = str(gpu_milli // 10)
    elif num_gpu:
        raise TraceError(f"{where}: a GPU share (gpu_milli {gpu_milli}) of {num_gpu} GPUs: the trace shares one GPU at most")
    spec: dict = {"containers": [{"name": "main", "image": "openb/task", "resources": {"requests": requests, **({"limits": limits} if limits else {})}}]}
    models = [m.strip() for m in (row.get("gpu_spec") or "").split("|") if m.strip()]
    if models and num_gpu:
        spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "nvidia.com/gpu.product", "operator": "In", "values": models}]}]}}}
    qos = (row.get("qos") or "").strip()
    meta: dict = {"name": name, "namespace": NAMESPACE}
    if qos:
        meta["labels"] = {"openb/qos": qos}
    if annotations:
        meta["annotations"] = annotations
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}
    return pod, created, (deleted if deleted >= 0 else None)


def openb_pods(text: str, name: str) -> Trace:
    """The openb pod list as a trace: arrivals at creation_time running until deletion_time, in time order."""
    trace = Trace(name, fmt="openb")
    for n, row in _rows(text, name, POD_COLUMNS):
        where = f"{name}:{n}"
        pod, created, deleted = openb_pod(row, where)
        if deleted is not None and deleted < created:
            trace.skipped.append((where, f"deleted ({deleted}) before created ({created})"))
            continue
        trace.events.append(Arrival(float(created), pod, float(deleted - created) if deleted is not None else None, where=where))
    return trace
