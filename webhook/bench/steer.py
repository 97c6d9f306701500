"""`allot bench steer`: one fragmentation-steering decision (`Steering.steer` over the placement index), beside unmemoised scoring.

Clusters: openb's 1,213 GPU nodes (`openb_node_list_gpu_node.csv`, when the CSVs are found) and
synthetic ones of openb's node shapes (`--sizes`, default 10,000 nodes). Each is filled to
`--fill` % of its GPUs with running pods of openb's shapes (HAMi shares, 1/2/4/8 whole GPUs,
cpu-only), placed at random where they fit. Then `--decisions` pods of the same shapes are
steered one after another, each bound to the node it was steered to (so node states move, and
the live mix is re-read as it would be in a cluster: a p99 includes those re-reads). The
baseline runs the same decisions on a second copy with the memos cleared before each one (every
node scored afresh: what a steer decision costs without them); both must steer every pod to the
same nodes. Times in milliseconds.
"""

from __future__ import annotations

import json
import random
import statistics
import sys
import time

# (gpus, cpu cores, memory GiB, share) of openb's node shapes, with their counts among its 1,213 GPU nodes
NODE_SHAPES = ((8, 96, 384, 549), (2, 104, 384, 387), (2, 16, 128, 107), (8, 128, 512, 39), (4, 32, 128, 28), (2, 64, 256, 22),
               (8, 96, 384, 21), (1, 8, 32, 19), (4, 96, 384, 17), (4, 48, 192, 9))
# (whole GPUs, milli of a share, cpu millicores, memory MiB, weight): the shapes of openb's default pod list, roughly
POD_SHAPES = ((1, 0, 8000, 32768, 30), (0, 500, 4000, 16384, 14), (0, 250, 2000, 8192, 10), (0, 810, 3152, 12288, 6),
              (0, 470, 11908, 16384, 6), (0, 320, 8000, 16384, 4), (0, 0, 4000, 8192, 14), (2, 0, 16000, 65536, 1),
              (4, 0, 32000, 131072, 1), (8, 0, 64000, 262144, 1))


def add_arguments(parser) -> None:
    """Sizes, fill, decisions, --json."""
    parser.add_argument("--openb", metavar="DIR", help="folder holding the openb CSVs (default: ../shared/data/openb beside the repository)")
    parser.add_argument("--sizes", default="10000", help="synthetic cluster sizes, comma-separated (default 10000; 256000 takes minutes)")
    parser.add_argument("--fill", type=int, default=60, help="percent of GPUs the running pods hold before timing (default 60)")
    parser.add_argument("--decisions", type=int, default=200, help="steer decisions timed per cluster (default 200)")
    parser.add_argument("--seed", type=int, default=32)
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def synthetic_nodes(n: int) -> list[dict]:
    """`n` nodes of openb's GPU node shapes in its proportions."""
    from policy.simulate.openb import openb_nodes

    total = sum(s[3] for s in NODE_SHAPES)
    rows = ["sn,cpu_milli,memory_mib,gpu,model"]
    for i in range(n):
        gpus, cpu, mem, _c = next(s for s, acc in zip(NODE_SHAPES, _cumulative(NODE_SHAPES)) if (i * 7919) % total < acc)
        rows.append(f"node-{i:06d},{cpu * 1000},{mem * 1024},{gpus},G{gpus}")
    return openb_nodes("\n".join(rows) + "\n", "synthetic")


def _cumulative(shapes) -> list[int]:
    acc, out = 0, []
    for s in shapes:
        acc += s[-1]
        out.append(acc)
    return out


def pod(i: int, shape: tuple, node: str | None) -> dict:
    """A pod of one shape (HAMi's gpucores for a share), bound to `node` when given."""
    whole, milli, cpu, mem, _w = shape
    limits = {"nvidia.com/gpu": str(whole)} if whole else {"nvidia.com/gpu": "1", "nvidia.com/gpucores": str(milli // 10)} if milli else {}
    p = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"p{i}", "namespace": "openb", "uid": f"u{i}"},
         "spec": {"containers": [{"name": "m", "resources": {"requests": {"cpu": f"{cpu}m", "memory": f"{mem}Mi"}, "limits": limits}}]}}
    if node is not None:
        p["spec"]["nodeName"] = node
        p["status"] = {"phase": "Running"}
    return p


def demand(shape: tuple):
    """The placement index's demand of a pod of `shape`."""
    from policy.placement.devices import Demand

    whole, milli, cpu, mem, _w = shape
    return Demand(whole=whole, milli=milli, cpu=cpu, ram=mem << 20)


def filled(nodes: list[dict], fill: int, rng: random.Random) -> list[dict]:
    """Running pods holding about `fill` % of the nodes' GPUs, each on a random node it fits."""
    free = []
    for n in nodes:
        a = n["status"]["allocatable"]
        free.append([n["metadata"]["name"], int(a["cpu"][:-1]), int(a["memory"][:-2]), [1000] * int(a.get("nvidia.com/gpu", 0))])
    target = sum(len(f[3]) for f in free) * 1000 * fill // 100
    held, pods, misses = 0, [], 0
    weights = [s[-1] for s in POD_SHAPES]
    while held < target and misses < 1000:
        shape = rng.choices(POD_SHAPES, weights)[0]
        whole, milli, cpu, mem, _w = shape
        f = free[rng.randrange(len(free))]
        devs = [i for i, v in enumerate(f[3]) if v >= (1000 if whole else milli)] if (whole or milli) else []
        if f[1] < cpu or f[2] < mem or len(devs) < max(whole, 1 if milli else 0):
            misses += 1
            continue
        misses = 0
        f[1] -= cpu
        f[2] -= mem
        for d in devs[:whole] if whole else devs[:1] if milli else ():
            f[3][d] -= 1000 if whole else milli
        held += whole * 1000 + milli
        pods.append(pod(len(pods), shape, f[0]))
    return pods


def one_cluster(label: str, nodes: list[dict], args) -> dict:
    """Fill, then time `--decisions` steer decisions, memoised and plain; the same nodes both ways."""
    from policy.cluster.snapshot import ClusterSnapshot
    from policy.placement import PlacementIndex
    from policy.placement.steer import Steering

    rng = random.Random(args.seed)
    t0 = time.perf_counter()
    objs = nodes + filled(nodes, args.fill, rng)
    running = len(objs) - len(nodes)
    indexes = [PlacementIndex.from_snapshot(ClusterSnapshot.from_objects(objs)) for _ in range(2)]
    setup = time.perf_counter() - t0
    shapes = [rng.choices(POD_SHAPES, [s[-1] for s in POD_SHAPES])[0] for _ in range(args.decisions)]
    times, chosen = {}, {}
    for way, index in zip(("memoised", "plain"), indexes):
        steering = Steering(index)
        samples, picks = [], []
        for i, shape in enumerate(shapes):
            if way == "plain":
                steering.clear()
            t = time.perf_counter()
            got = steering.steer(demand(shape))
            samples.append(time.perf_counter() - t)
            picks.append(tuple(c.node for c in got.choices))
            if got.choices:  # bound where it was steered: the next decision sees the node moved
                index.apply_pod("ADDED", pod(running + i, shape, got.choices[0].node))
        samples.sort()
        times[way] = (statistics.median(samples) * 1000, samples[min(len(samples) - 1, len(samples) * 99 // 100)] * 1000)
        chosen[way] = picks
    if chosen["memoised"] != chosen["plain"]:
        raise AssertionError(f"{label}: memoised and plain steering chose different nodes")
    (p50, p99), (b50, b99) = times["memoised"], times["plain"]
    return {"cluster": label, "nodes": len(nodes), "running_pods": running, "decisions": len(shapes), "setup_s": round(setup, 1),
            "p50_ms": round(p50, 3), "p99_ms": round(p99, 3), "plain_p50_ms": round(b50, 3), "plain_p99_ms": round(b99, 3),
            "p99_ratio": round(b99 / p99, 1) if p99 else None, "same_nodes": True}


def run(args) -> int:
    """Each cluster: fill, time, compare; print a table (or JSON)."""
    from webhook.bench.simulate import _openb_dir
    from webhook.errors import UsageError

    try:
        sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    except ValueError:
        raise UsageError(f"--sizes {args.sizes!r}: give node counts, comma-separated (like 10000,256000)") from None
    if any(s < 1 for s in sizes) or args.decisions < 1 or not 0 <= args.fill <= 95:
        raise UsageError("--sizes and --decisions take positive numbers, --fill 0..95")
    clusters = []
    d = _openb_dir(args.openb)
    if d is not None and (d / "openb_node_list_gpu_node.csv").exists():
        from policy.simulate.openb import openb_nodes

        path = d / "openb_node_list_gpu_node.csv"
        clusters.append(("openb GPU nodes", openb_nodes(path.read_text(), str(path))))
    else:
        sys.stderr.write("allot bench steer: openb CSVs not found (--openb DIR): the openb cluster is left out\n")
    clusters.extend((f"synthetic {s:,}", synthetic_nodes(s)) for s in sizes)
    rows = [one_cluster(label, nodes, args) for label, nodes in clusters]
    if args.json:
        print(json.dumps({"fill_percent": args.fill, "clusters": rows}))
        return 0
    print(f"one steer decision (Steering.steer over the placement index), GPUs {args.fill} % held; baseline: memos cleared per decision")
    for r in rows:
        print(f"  {r['cluster']:<18} {r['nodes']:>7,} nodes {r['running_pods']:>8,} pods: p50 {r['p50_ms']:.3f} ms, p99 {r['p99_ms']:.3f} ms"
              f" | plain p50 {r['plain_p50_ms']:.3f} ms, p99 {r['plain_p99_ms']:.3f} ms ({r['p99_ratio']}x at p99); "
              f"same nodes; setup {r['setup_s']} s")
    return 0
