"""`allot bench budget [--pods N] [--budgets B]`: what metering adds per pod event, at 100,000 live pods and 1,000 budgets.

The policy has B budgets, one per team namespace (`for namespace == "team-i"`) and one over
every GPU; the cluster N bound GPU pods spread over the teams. Timed: the meter's handling of
one watch event (a status update, a new pod, a pod gone), with the pod already normalized, as
the quota ledger normalizes it first in the same event (policy/engine.py LastWorkload); the
normalization itself is printed beside it. Also: attaching the meter to the snapshot, and
building one write of the meter object (every budget). Budget: p99 <= 5 us per event.
"""

from __future__ import annotations

import json
import statistics
import time

BUDGET_NS = 5000  # p99 per pod event


def add_arguments(parser) -> None:
    """Options of `allot bench budget`."""
    parser.add_argument("--pods", type=int, default=100_000, help="live GPU pods (default 100,000)")
    parser.add_argument("--budgets", type=int, default=1000, help="budgets (default 1,000)")
    parser.add_argument("--events", type=int, default=30_000, help="pod events timed (default 30,000)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")


def _policy(budgets: int) -> str:
    lines = ['gpu h100 { product "NVIDIA-H100-80GB-HBM3" memory 80Gi }',
             "budget everyone {\n  gpu_hours 1000000\n  period month\n}"]
    for i in range(budgets - 1):
        lines.append(f'budget team-{i} {{\n  for namespace == "team-{i}"\n  gpu_hours 20000 of h100\n  period month in "Europe/Berlin"\n}}')
    return "\n".join(lines) + "\n"


def _pod(i: int, teams: int, phase: str = "Running") -> dict:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"p-{i}", "namespace": f"team-{i % teams}", "uid": f"u-{i}", "resourceVersion": str(i)},
            "spec": {"nodeName": f"n-{i % 5000}", "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
                     "containers": [{"name": "m", "image": "x", "resources": {"limits": {"nvidia.com/gpu": str(1 + i % 8)}}}]},
            "status": {"phase": phase, "startTime": "2025-06-01T00:00:00Z"}}


def _pct(xs: list[int], p: float) -> int:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * p))]


def run(args) -> int:
    """Print the figures; exit 1 when p99 is over budget."""
    import lang
    import webhook  # noqa: F401 - installs the zone offsets
    from policy.budget.calendar import days_from_civil
    from policy.cluster.snapshot import ClusterSnapshot
    from policy.engine import Engine
    from webhook.meter import store

    teams = max(1, args.budgets - 1)
    policy, diags = lang.compile_policies([("bench.policy", _policy(args.budgets))])
    assert policy is not None, diags
    snap = ClusterSnapshot.from_objects([_pod(i, teams) for i in range(args.pods)])
    state = Engine(policy).state_for(snap)
    t = days_from_civil(2025, 6, 10) * 86_400_000
    start = time.perf_counter()
    meter = state.meter_at(t)
    attach_s = time.perf_counter() - start
    normalize, meter_ns = [], []
    clock = time.perf_counter_ns
    for k in range(args.events):
        i = k % args.pods
        kind = k % 3
        if kind == 0:
            event, obj = "MODIFIED", _pod(i, teams)  # a status update: the pod holds what it held
        elif kind == 1:
            event, obj = "ADDED", _pod(args.pods + k, teams)  # a new pod
        else:
            event, obj = "DELETED", _pod(args.pods + k - 1, teams)  # the one just added goes away
        t += 7
        a = clock()
        state.live(obj)  # what the quota ledger's normalization of the same event costs (shared)
        b = clock()
        deleted = event == "DELETED"  # the snapshot hands (old, None) for a deletion, (old or None, new) otherwise
        meter.pod_event(event, obj if deleted else None, None if deleted else obj, t)
        c = clock()
        state.live.clear()
        normalize.append(b - a)
        meter_ns.append(c - b)
    start = time.perf_counter()
    values = meter.snapshot_values(t)
    body = store.encode("allot-system", "bench", t, values, None)
    write_s = time.perf_counter() - start
    size = len(json.dumps(body))
    out = {"pods": args.pods, "budgets": args.budgets, "events": args.events,
           "meter_p50_us": _pct(meter_ns, 0.5) / 1000, "meter_p99_us": _pct(meter_ns, 0.99) / 1000,
           "meter_mean_us": statistics.fmean(meter_ns) / 1000, "normalize_p50_us": _pct(normalize, 0.5) / 1000,
           "normalize_p99_us": _pct(normalize, 0.99) / 1000, "attach_s": attach_s, "write_build_ms": write_s * 1000,
           "write_bytes": size, "budget_p99_us": BUDGET_NS / 1000}
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        print(f"{args.pods:,} live GPU pods, {args.budgets:,} budgets, {args.events:,} pod events")
        print(f"  metering per event: p50 {out['meter_p50_us']:.2f} us, p99 {out['meter_p99_us']:.2f} us "
              f"(budget {BUDGET_NS / 1000:g} us)  [normalizing the pod, shared with the quota ledger: "
              f"p50 {out['normalize_p50_us']:.1f} us, p99 {out['normalize_p99_us']:.1f} us]")
        print(f"  attaching the meter to the snapshot: {attach_s:.2f} s; one write of the meter object: "
              f"{out['write_build_ms']:.1f} ms to build, {size / 1024:.0f} KiB (every budget, at most once per 10 s)")
        print("  verdict: " + ("within budget" if _pct(meter_ns, 0.99) <= BUDGET_NS else "OVER budget"))
    return 0 if _pct(meter_ns, 0.99) <= BUDGET_NS else 1
