"""`allot bench place`: gang queries and pod events on a synthetic hypercluster, beside a naive full scan.

The cluster follows GPU Feature Discovery label conventions (`nvidia.com/gpu.product`,
`nvidia.com/gpu.memory`, `nvidia.com/gpu.count`) and blocks of racks of hosts;
about a third of the nodes run pods already (some sharing GPUs), every node states cpu,
memory and pods allocatable and pods request cpu and memory. Figures: load time and peak
RSS, p50/p99 of gang queries of 1, 8, 64 and 512 one-GPU pods at each level and of gangs
that ask cpu and memory too, p50/p99 of one pod-bind event and of node events (a change
placement sees and its undoing, a node deleted and added back; taints that stay, whose key
moves are done for real rather than taken back by the undoing), and the same for a naive
index that scans every node per query, so the ratio shows. Times in milliseconds.
"""

from __future__ import annotations

import gc
import json
import os
import random
import resource
import sys
import time

from webhook.bench.floor import Floor

RACK_NODES = 32
BLOCK_RACKS = 16
PRODUCT = "NVIDIA-H100-80GB-HBM3"
LABELS = {"block": "topology.acme.io/block", "rack": "topology.acme.io/rack", "host": "kubernetes.io/hostname"}
SIZES = (1, 8, 64, 512)
NODE_CPU, NODE_MEMORY = "190", "2000Gi"  # allocatable of every node (with "pods": "110")
CPU_PER_GPU, MEMORY_PER_GPU = 16, 128  # what GPU pods request per GPU (cores, GiB), so cpu and memory are in the model
# Query shapes that ask cpu and memory too: (name, pods, cpu cores, memory GiB) of one-GPU pods. `cpu16` never
# runs out before GPUs (the resource classes say so: the bucket fast path); `cpu120` does (one per node: nodes
# are counted); `cpu200` asks more than any node has (does not fit: the reason names cpu, with numbers).
RESOURCE_SHAPES = (("cpu16", 8, 16, 128), ("cpu16", 64, 16, 128), ("cpu120", 8, 120, 64), ("cpu200", 1, 200, 64))


def add_arguments(parser) -> None:
    """Cluster shape and repetitions."""
    parser.add_argument("--nodes", type=int, default=256_000, help="GPU nodes (default 256000)")
    parser.add_argument("--gpus-per-node", type=int, default=4, help="devices per node (default 4)")
    parser.add_argument("--levels", default="block,rack,host", help="comma-separated levels among block,rack,host")
    parser.add_argument("--queries", type=int, default=200, help="queries per size and level (default 200)")
    parser.add_argument("--events", type=int, default=5000, help="pod-bind events measured (default 5000)")
    parser.add_argument("--burst", type=int, default=2000, help="binds that stay, a query every 100 (default 2000)")
    parser.add_argument("--node-events", type=int, default=2000,
                        help="node changes measured, each applied then undone; every 5th node also deleted and added back; "
                             "and a fifth as many taints that stay (default 2000)")
    parser.add_argument("--baseline-queries", type=int, default=3, help="naive full-scan queries per size and level")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def _node(i: int, levels: list[str], gpus: int) -> dict:
    rack, block = i // RACK_NODES, i // (RACK_NODES * BLOCK_RACKS)
    values = {"block": f"b{block}", "rack": f"b{block}-r{rack}", "host": f"gpu-{i:06d}"}
    labels = {LABELS[lv]: values[lv] for lv in levels}
    labels.update({"kubernetes.io/hostname": values["host"], "nvidia.com/gpu.product": PRODUCT,
                   "nvidia.com/gpu.memory": "81559", "nvidia.com/gpu.count": str(gpus)})
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": values["host"], "labels": labels},
        "spec": {"taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]},
        "status": {"allocatable": {"nvidia.com/gpu": str(gpus), "cpu": NODE_CPU, "memory": NODE_MEMORY, "pods": "110"},
                   "conditions": [{"type": "Ready", "status": "True"}]},
    }


def _pod(name: str, node: str, gpus: int | None, share: str | None = None, cpu: str | None = None, memory: str | None = None) -> dict:
    limits = {"nvidia.com/gpu": str(gpus)} if gpus else {}
    meta = {"name": name, "namespace": "team-a", "uid": name}
    if share:
        meta["annotations"] = {"gpu-fraction": share}
    g = gpus or 1
    requests = {"cpu": cpu or str(CPU_PER_GPU * g), "memory": memory or f"{MEMORY_PER_GPU * g}Gi"}
    return {
        "apiVersion": "v1", "kind": "Pod", "metadata": meta,
        "spec": {"nodeName": node, "containers": [{"name": "main", "resources": {"limits": limits, "requests": requests}}]},
        "status": {"phase": "Running"},
    }


def _cluster(n: int, gpus: int, levels: list[str], rng: random.Random) -> tuple[list[dict], list[dict]]:
    nodes = [_node(i, levels, gpus) for i in range(n)]
    pods = []
    for i, node in enumerate(nodes):
        roll = rng.random()
        name = node["metadata"]["name"]
        if roll < 0.30:
            pods.append(_pod(f"p{i}", name, rng.randint(1, gpus)))
        elif roll < 0.32:
            pods.append(_pod(f"s{i}", name, None, "0.25", cpu="4", memory="32Gi"))  # a KAI-style quarter of one GPU
        if rng.random() < 0.20:  # a GPU-less agent (log shipper, exporter): it takes cpu, memory and a pod slot
            pods.append(_pod(f"a{i}", name, None, cpu="500m", memory="1Gi"))
    return nodes, pods


# Node changes placement sees, each applied to a node then undone (both measured): a label (a pool a gang may
# select), cordon, allocatable cpu, Ready, and a blocking taint (another model key: the node's other aggregates).
NODE_CHANGES = ("label", "cordon", "allocatable", "notready", "taint")


def _changed(node: dict, kind: str, e: int) -> dict:
    """A copy of `node` as a watch event brings it after one change of `kind` (fresh dicts for what changed)."""
    meta, spec, status = node["metadata"], node["spec"], node["status"]
    if kind == "label":
        return {**node, "metadata": {**meta, "labels": {**meta["labels"], "pool": f"pool-{e % 3}"}}}
    if kind == "cordon":
        return {**node, "spec": {**spec, "unschedulable": True}}
    if kind == "allocatable":
        return {**node, "status": {**status, "allocatable": {**status["allocatable"], "cpu": "180"}}}
    if kind == "notready":
        return {**node, "status": {**status, "conditions": [{"type": "Ready", "status": "False"}]}}
    return {**node, "spec": {**spec, "taints": spec["taints"] + [{"key": "maintenance", "value": "true", "effect": "NoSchedule"}]}}


def _heartbeat(node: dict, e: int) -> dict:
    """`node` after a status heartbeat: nothing placement reads changed."""
    return {**node, "status": {**node["status"], "conditions": [{"type": "Ready", "status": "True", "lastHeartbeatTime": f"t{e}"}]}}


def _pct(samples: list[float], q: float) -> float:
    s = sorted(samples)
    return s[min(len(s) - 1, int(q * len(s)))] if s else 0.0


class NaiveIndex:
    """The baseline: free GPUs per node in a dict; every query scans every node."""

    def __init__(self, levels: list[str]):
        self.levels = levels
        self.free: dict[str, int] = {}
        self.path: dict[str, tuple[str, ...]] = {}

    def add_node(self, node: dict, gpus: int) -> None:
        """Record a node as all free."""
        labels = node["metadata"]["labels"]
        name = node["metadata"]["name"]
        self.free[name] = gpus
        self.path[name] = tuple(labels[LABELS[lv]] for lv in self.levels)

    def bind(self, node: str, gpus: int) -> None:
        """Take (or with a negative count, give back) GPUs of a node."""
        self.free[node] -= gpus

    def query(self, level: int, pods: int) -> str | None:
        """The tightest domain of `level` with room for `pods` one-GPU pods, by scanning every node."""
        caps: dict[tuple[str, ...], int] = {}
        for name, free in self.free.items():
            key = self.path[name][: level + 1]
            caps[key] = caps.get(key, 0) + free
        fits = [(cap, key) for key, cap in caps.items() if cap >= pods]
        return min(fits)[1][-1] if fits else None


def run(args) -> int:
    """Build, measure, print."""
    from webhook.errors import UsageError

    levels = [lv.strip() for lv in args.levels.split(",") if lv.strip()]
    if not levels or any(lv not in LABELS for lv in levels) or len(set(levels)) != len(levels):
        raise UsageError(f"--levels takes distinct names among {', '.join(LABELS)}, got {args.levels!r}")
    if args.nodes < 1 or not 1 <= args.gpus_per_node <= 64 or args.queries < 1 or args.events < 1 or args.burst < 0 or args.node_events < 1:
        raise UsageError("--nodes, --queries, --events and --node-events must be positive, --burst not negative; --gpus-per-node 1..64")
    from policy.subject.normalize import pod_demand
    from policy.placement import GangRequest, PlacementIndex
    from policy.subject.model import PodSet

    rng = random.Random(args.seed)
    gen_start = time.perf_counter()
    nodes, pods = _cluster(args.nodes, args.gpus_per_node, levels, rng)
    gen_s = time.perf_counter() - gen_start
    topology = [("fabric", [(lv, LABELS[lv]) for lv in levels])]
    models = {PRODUCT: ("h100", 80 * 2**30)}
    gc.collect()
    gc.disable()  # the load allocates millions of small objects; the collector would only rescan them
    start, cpu_start = time.perf_counter(), time.process_time()
    index = PlacementIndex(topology, models, demand=pod_demand)
    index.load(nodes, pods)
    load_s = time.perf_counter() - start
    load_cpu_s = time.process_time() - cpu_start
    gc.enable()
    gc.freeze()  # what a server should do after loading: the loaded objects leave the collector's scans
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux

    naive = NaiveIndex(levels)
    for node in nodes:
        naive.add_node(node, args.gpus_per_node)
    for pod in pods:
        limits = pod["spec"]["containers"][0]["resources"]["limits"]
        if limits:  # the naive baseline ignores shared slices, cpu and memory
            naive.bind(pod["spec"]["nodeName"], int(limits["nvidia.com/gpu"]))
    gc.freeze()  # the baseline's 256k path tuples too, so no full collection rescans them mid-measurement

    figures: dict[str, object] = {
        "nodes": args.nodes, "gpus": args.nodes * args.gpus_per_node, "pods_loaded": len(pods),
        "levels": levels, "generate_s": round(gen_s, 2), "load_ms": round(load_s * 1000, 1), "load_cpu_ms": round(load_cpu_s * 1000, 1),
        "peak_rss_mib": round(rss / 2**20, 1), "queries": {}, "baseline_queries": {},
    }
    names = [n["metadata"]["name"] for n in nodes]
    from policy.placement.index import FLAT

    shapes = [(level, size, GangRequest((PodSet("worker", size, 1000, gpu_product=PRODUCT),), topology="fabric", required=level))
              for level in levels for size in SIZES]
    # What `fraction` blocks ask on every shared-GPU admission: any device with room for a quarter, ≤ 4 sharers.
    shapes.append(("flat-share", 1, GangRequest((PodSet("slice", 1, 250, fraction=250),), topology=FLAT, per_gpu=4)))
    from policy.placement.needs import PodNeeds

    for name, size, cores, gib in RESOURCE_SHAPES:
        needs = PodNeeds(cpu=cores * 1000, memory=gib * 2**30)
        for level in levels:
            shapes.append((f"{level}-{name}", size, GangRequest((PodSet("worker", size, 1000, gpu_product=PRODUCT, needs=needs),),
                                                                 topology="fabric", required=level)))
    for level, size, gang in shapes:
        li = levels.index(level) if level in levels else -1
        samples, cpu, fits = [], [], 0
        for q in range(args.queries):
            # Churn between queries so buckets move: bind and unbind one random pod.
            pod = _pod(f"churn{q}", names[rng.randrange(len(names))], 1)
            index.apply_pod("ADDED", pod)
            c0, t0 = time.thread_time_ns(), time.perf_counter_ns()
            result = index.query(gang)
            samples.append((time.perf_counter_ns() - t0) / 1e6)
            cpu.append((time.thread_time_ns() - c0) / 1e6)
            fits += result.fits
            index.apply_pod("DELETED", pod)
        key = f"{level}_{size}"
        figures["queries"][key] = {
            "p50_ms": round(_pct(samples, 0.5), 4), "p99_ms": round(_pct(samples, 0.99), 4),
            "cpu_p50_ms": round(_pct(cpu, 0.5), 4), "cpu_p99_ms": round(_pct(cpu, 0.99), 4),
            "fits": fits, "runs": len(samples),
        }
        base = []
        for _ in range(args.baseline_queries if li >= 0 else 0):
            t0 = time.perf_counter_ns()
            naive.query(li, size)
            base.append((time.perf_counter_ns() - t0) / 1e6)
        figures["baseline_queries"][key] = {"p50_ms": round(_pct(base, 0.5), 3), "p99_ms": round(_pct(base, 0.99), 3)}
    events, events_cpu, creates, deletes, base_events = [], [], [], [], []
    for e in range(args.events):
        node = names[rng.randrange(len(names))]
        pod = _pod(f"ev{e}", node, 1)
        pending = {**pod, "spec": {k: v for k, v in pod["spec"].items() if k != "nodeName"}, "status": {"phase": "Pending"}}
        t0 = time.perf_counter_ns()
        index.apply_pod("ADDED", pending)  # the pod is created: its demand is read here, once
        c1, t1 = time.thread_time_ns(), time.perf_counter_ns()
        index.apply_pod("MODIFIED", pod)  # the scheduler binds it: counters move up the tree
        events.append((time.perf_counter_ns() - t1) / 1e6)
        events_cpu.append((time.thread_time_ns() - c1) / 1e6)
        creates.append((t1 - t0) / 1e6)
        t2 = time.perf_counter_ns()
        index.apply_pod("DELETED", pod)
        deletes.append((time.perf_counter_ns() - t2) / 1e6)
        t0 = time.perf_counter_ns()
        naive.bind(node, 1)
        base_events.append((time.perf_counter_ns() - t0) / 1e6)
        naive.bind(node, -1)
    # Binds that stay (no pod gone in between), then one query: the events leave bucket filing and the flat root's
    # free-amount counts to the next reader (at most `LAG_LIMIT` marks of each; events settle the oldest beyond), so
    # this is that work done for real, not coalesced away by a pod that went again.
    stay, stay_cpu, after_burst = [], [], []
    for b in range(args.burst):
        pod = _pod(f"burst{b}", names[rng.randrange(len(names))], 1)
        index.apply_pod("ADDED", {**pod, "spec": {k: v for k, v in pod["spec"].items() if k != "nodeName"}, "status": {"phase": "Pending"}})
        c1, t1 = time.thread_time_ns(), time.perf_counter_ns()
        index.apply_pod("MODIFIED", pod)
        stay.append((time.perf_counter_ns() - t1) / 1e6)
        stay_cpu.append((time.thread_time_ns() - c1) / 1e6)
        if b % 100 == 99:  # a gang query every 100 binds reads (and settles) what they marked
            c0, t0 = time.thread_time_ns(), time.perf_counter_ns()
            index.query(shapes[1][2])
            after_burst.append(((time.perf_counter_ns() - t0) / 1e6, (time.thread_time_ns() - c0) / 1e6))
    # Node events: a change placement sees and its undoing (MODIFIED), and every 5th node deleted and added back.
    node_samples: dict[str, tuple[list[float], list[float]]] = {}
    floor = Floor()  # the machine's own tail, timed at the same moments

    def timed(what: str, apply, event: str, obj: dict) -> None:
        if what != "heartbeat":
            floor.sample()
        c0, t0 = time.thread_time_ns(), time.perf_counter_ns()
        apply(event, obj)
        wall, cpu_ms = (time.perf_counter_ns() - t0) / 1e6, (time.thread_time_ns() - c0) / 1e6
        w, c = node_samples.setdefault(what, ([], []))
        w.append(wall)
        c.append(cpu_ms)

    for e in range(args.node_events):
        node = nodes[rng.randrange(len(nodes))]
        kind = NODE_CHANGES[e % len(NODE_CHANGES)]
        timed(kind, index.apply_node, "MODIFIED", _changed(node, kind, e))
        timed(kind + " undone", index.apply_node, "MODIFIED", node)
        if e % 5 == 4:
            timed("deleted", index.apply_node, "DELETED", node)
            timed("added", index.apply_node, "ADDED", node)
        timed("heartbeat", index.apply_node, "MODIFIED", _heartbeat(node, e))  # not a change: reported on its own
    # Taints that stay (no undoing in between, a query every 100): an event leaves its node's key move waiting (at most
    # `index.REKEY_LIMIT`; beyond, it does the oldest), and the next query does the rest, so this is that work done for
    # real, not taken back by the undoing as in the pairs above.
    taint_stay, after_taints = [], []
    for t, i in enumerate(rng.sample(range(len(nodes)), min(len(nodes), max(1, args.node_events // 5)))):
        c0, t0 = time.thread_time_ns(), time.perf_counter_ns()
        changed = _changed(nodes[i], "taint", t)
        c0, t0 = time.thread_time_ns(), time.perf_counter_ns()
        index.apply_node("MODIFIED", changed)
        taint_stay.append(((time.perf_counter_ns() - t0) / 1e6, (time.thread_time_ns() - c0) / 1e6))
        if t % 100 == 99:
            c0, t0 = time.thread_time_ns(), time.perf_counter_ns()
            index.query(shapes[1][2])
            after_taints.append(((time.perf_counter_ns() - t0) / 1e6, (time.thread_time_ns() - c0) / 1e6))
    figures["event_taint_stay_p50_ms"] = round(_pct([w for w, _c in taint_stay], 0.5), 4)
    figures["event_taint_stay_p99_ms"] = round(_pct([w for w, _c in taint_stay], 0.99), 4)
    figures["event_taint_stay_cpu_p99_ms"] = round(_pct([c for _w, c in taint_stay], 0.99), 4)
    figures["query_after_100_taints_p99_ms"] = round(_pct([w for w, _c in after_taints], 0.99), 4)
    figures["query_after_100_taints_cpu_p99_ms"] = round(_pct([c for _w, c in after_taints], 0.99), 4)
    changes = [k for k in node_samples if k != "heartbeat"]
    node_wall = [x for k in changes for x in node_samples[k][0]]
    node_cpu = [x for k in changes for x in node_samples[k][1]]
    figures["node_events"] = {k: {"p50_ms": round(_pct(w, 0.5), 4), "p99_ms": round(_pct(w, 0.99), 4),
                                  "cpu_p99_ms": round(_pct(c, 0.99), 4), "runs": len(w)} for k, (w, c) in node_samples.items()}
    figures["event_node_p50_ms"] = round(_pct(node_wall, 0.5), 4)
    figures["event_node_p99_ms"] = round(_pct(node_wall, 0.99), 4)
    figures["event_node_cpu_p50_ms"] = round(_pct(node_cpu, 0.5), 4)
    figures["event_node_cpu_p99_ms"] = round(_pct(node_cpu, 0.99), 4)
    figures["event_node_runs"] = len(node_wall)
    figures["machine_floor"] = floor.figures()
    p50 = figures["event_node_p50_ms"]
    figures["event_node_tail_ratio"] = round(figures["event_node_p99_ms"] / p50, 2) if p50 else None
    figures["event_stay_bind_p50_ms"] = round(_pct(stay, 0.5), 4)
    figures["event_stay_bind_p99_ms"] = round(_pct(stay, 0.99), 4)
    figures["event_stay_bind_cpu_p99_ms"] = round(_pct(stay_cpu, 0.99), 4)
    figures["query_after_100_binds_p99_ms"] = round(_pct([w for w, _c in after_burst], 0.99), 4)
    figures["query_after_100_binds_cpu_p99_ms"] = round(_pct([c for _w, c in after_burst], 0.99), 4)
    figures["event_unbind_p50_ms"] = round(_pct(deletes, 0.5), 4)
    figures["event_unbind_p99_ms"] = round(_pct(deletes, 0.99), 4)
    figures["event_bind_p50_ms"] = round(_pct(events, 0.5), 4)
    figures["event_bind_p99_ms"] = round(_pct(events, 0.99), 4)
    figures["event_bind_cpu_p50_ms"] = round(_pct(events_cpu, 0.5), 4)
    figures["event_bind_cpu_p99_ms"] = round(_pct(events_cpu, 0.99), 4)
    figures["event_create_p50_ms"] = round(_pct(creates, 0.5), 4)
    figures["event_create_p99_ms"] = round(_pct(creates, 0.99), 4)
    figures["baseline_event_bind_p50_ms"] = round(_pct(base_events, 0.5), 4)
    worst_q = max(v["p99_ms"] for v in figures["queries"].values())
    worst_cpu = max(v["cpu_p99_ms"] for v in figures["queries"].values())
    figures["query_p99_worst_ms"] = worst_q
    figures["query_cpu_p99_worst_ms"] = worst_cpu
    figures["load_average_1m"] = round(os.getloadavg()[0], 2)  # wall-clock tails include other processes' turns
    figures["budgets"] = {
        "query_p99_le_5ms": worst_q <= 5.0,
        "query_cpu_p99_le_5ms": worst_cpu <= 5.0,
        "event_p99_le_0.05ms": figures["event_bind_p99_ms"] <= 0.05,
        "event_cpu_p99_le_0.05ms": figures["event_bind_cpu_p99_ms"] <= 0.05,
        "pod_delete_p99_le_0.05ms": figures["event_unbind_p99_ms"] <= 0.05,
        "node_event_p99_le_0.05ms": figures["event_node_p99_ms"] <= 0.05,
        "node_event_cpu_p99_le_0.05ms": figures["event_node_cpu_p99_ms"] <= 0.05,
        "load_le_20s": load_s <= 20.0,
        "load_cpu_le_20s": load_cpu_s <= 20.0,
        "rss_le_3GiB": rss <= 3 * 2**30,
    }
    if args.json:
        print(json.dumps(figures))
    else:
        _print_table(figures)
    return 0


def _print_table(f: dict) -> None:
    out = sys.stdout.write
    out(f"cluster: {f['nodes']} nodes, {f['gpus']} GPUs, {f['pods_loaded']} pods, levels {','.join(f['levels'])}\n")
    out(f"load: {f['load_ms'] / 1000:.2f} s (cpu {f['load_cpu_ms'] / 1000:.2f} s)   peak RSS: {f['peak_rss_mib']:.0f} MiB (generator: {f['generate_s']} s, not counted)\n")
    out(f"{'query':<17}{'p50 ms':>9}{'p99 ms':>9}{'cpu p99':>9}{'fits':>9}{'naive p50':>11}{'ratio':>9}\n")
    for key, q in f["queries"].items():
        b = f["baseline_queries"][key]
        ratio = b["p50_ms"] / q["p50_ms"] if q["p50_ms"] and b["p50_ms"] else 0.0
        naive = f"{b['p50_ms']:>10.1f}{ratio:>8.0f}x" if ratio else f"{'-':>10}{'-':>9}"
        out(f"{key:<17}{q['p50_ms']:>9.3f}{q['p99_ms']:>9.3f}{q['cpu_p99_ms']:>9.3f}{q['fits']:>5}/{q['runs']:<4}{naive}\n")
    out(f"pod-bind event: p50 {f['event_bind_p50_ms'] * 1000:.1f} µs, p99 {f['event_bind_p99_ms'] * 1000:.1f} µs, "
        f"cpu p99 {f['event_bind_cpu_p99_ms'] * 1000:.1f} µs "
        f"(naive dict update p50 {f['baseline_event_bind_p50_ms'] * 1000:.2f} µs: it pays at query time instead)\n")
    out(f"pod-create event (demand read once): p50 {f['event_create_p50_ms'] * 1000:.1f} µs, p99 {f['event_create_p99_ms'] * 1000:.1f} µs; "
        f"pod-delete event: p50 {f['event_unbind_p50_ms'] * 1000:.1f} µs, p99 {f['event_unbind_p99_ms'] * 1000:.1f} µs\n")
    out(f"binds that stay: p50 {f['event_stay_bind_p50_ms'] * 1000:.1f} µs, p99 {f['event_stay_bind_p99_ms'] * 1000:.1f} µs "
        f"(cpu p99 {f['event_stay_bind_cpu_p99_ms'] * 1000:.1f} µs); a query after each 100 (it settles their marks): "
        f"p99 {f['query_after_100_binds_p99_ms']:.3f} ms (cpu {f['query_after_100_binds_cpu_p99_ms']:.3f} ms)\n")
    out(f"node event (a change placement sees, or its undoing; deleted; added): p50 {f['event_node_p50_ms'] * 1000:.1f} µs, "
        f"p99 {f['event_node_p99_ms'] * 1000:.1f} µs, cpu p99 {f['event_node_cpu_p99_ms'] * 1000:.1f} µs over {f['event_node_runs']} events\n")
    out("  " + ", ".join(f"{k} {v['p50_ms'] * 1000:.1f}/{v['p99_ms'] * 1000:.1f}" for k, v in f["node_events"].items()) + " µs (p50/p99)\n")
    fl = f["machine_floor"]
    if fl.get("runs"):
        out(f"  the machine's own tail: a loop of fixed work ({fl['loop']} additions) timed before each of them: "
            f"p50 {fl['p50_ms'] * 1000:.1f} µs, p99 {fl['p99_ms'] * 1000:.1f} µs (p99 = {fl['tail_ratio']}x p50; "
            f"node events {f['event_node_tail_ratio']}x)\n")
    out(f"taints that stay (their key moves done for real): p50 {f['event_taint_stay_p50_ms'] * 1000:.1f} µs, "
        f"p99 {f['event_taint_stay_p99_ms'] * 1000:.1f} µs (cpu p99 {f['event_taint_stay_cpu_p99_ms'] * 1000:.1f} µs); "
        f"a query after each 100 (it does the waiting moves): p99 {f['query_after_100_taints_p99_ms']:.3f} ms "
        f"(cpu {f['query_after_100_taints_cpu_p99_ms']:.3f} ms)\n")
    out(f"load average {f['load_average_1m']} on {os.cpu_count()} cores: wall p99 counts other processes' turns, cpu p99 does not\n")
    out("budgets: " + ", ".join(f"{k} {'ok' if v else 'MISSED'}" for k, v in f["budgets"].items()) + "\n")
