"""`allot bench budget [--pods N] [--budgets B]`: what metering adds per pod event, at 100,000 live pods and 1,000 budgets.

The policy has B budgets, one per team namespace (`for namespace == "team-i"`) and one over
every GPU; the cluster N bound GPU pods spread over the teams. Timed: the meter's handling of
one watch event (a status update, a new pod, a pod gone), with the pod already normalized, as
the quota ledger normalizes it first in the same event (policy/engine.py LastWorkload); the
normalization itself is printed beside it. The baseline is the plain meter
(policy/budget/reference.py: every budget tested on every event, intervals kept), timed on the
same events from the same state; the ratio is baseline / fast at p50 and p99. As `allot serve`
does after loading (webhook/server/serving.py), the loaded state is frozen out of the collector
(`gc.collect(); gc.freeze()`); the collector stays on. Also: attaching the meter to the
snapshot, building one write of the meter object (every budget), and the writes of that object
under load (webhook/bench/budget_writes.py). Budget: p99 <= 5 us per event; at most one write
per budget per 10 s.
"""

from __future__ import annotations

import gc
import json
import statistics
import time

BUDGET_NS = 5000  # p99 per pod event


def add_arguments(parser) -> None:
    """Options of `allot bench budget`."""
    parser.add_argument("--pods", type=int, default=100_000, help="live GPU pods (default 100,000)")
    parser.add_argument("--budgets", type=int, default=1000, help="budgets (default 1,000)")
    parser.add_argument("--events", type=int, default=30_000, help="pod events timed (default 30,000)")
    parser.add_argument("--baseline-events", type=int, default=3000, help="pod events timed on the plain meter (default 3,000)")
    parser.add_argument("--writes-seconds", type=int, default=300, help="server seconds of the three-replica write run (default 300; 0: skip)")
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


def _time_events(state, meter, pods: int, teams: int, events: int, t: int) -> tuple[list[int], list[int], int]:
    """Time `meter.pod_event` on `events` events (a status update, a new pod, that pod gone); the normalization beside it."""
    normalize, meter_ns = [], []
    clock = time.perf_counter_ns
    written = t
    for k in range(events):
        i = k % pods
        kind = k % 3
        if kind == 0:
            event, obj = "MODIFIED", _pod(i, teams)  # a status update: the pod holds what it held
        elif kind == 1:
            event, obj = "ADDED", _pod(pods + k, teams)  # a new pod
        else:
            event, obj = "DELETED", _pod(pods + k - 1, teams)  # the one just added goes away
        t += 7
        if t - written >= 10_000 and hasattr(meter, "wrote"):  # as in serve: a write or an adoption every 10 s prunes the kept changes
            meter.wrote(t)
            written = t
        a = clock()
        state.live(obj)  # what the quota ledger's normalization of the same event costs (shared)
        b = clock()
        deleted = event == "DELETED"  # the snapshot hands (old, None) for a deletion, (old or None, new) otherwise
        meter.pod_event(event, obj if deleted else None, None if deleted else obj, t)
        c = clock()
        state.live.clear()
        normalize.append(b - a)
        meter_ns.append(c - b)
    return normalize, meter_ns, t


def run(args) -> int:
    """Print the figures; exit 1 when p99 is over budget."""
    import lang
    import webhook  # noqa: F401 - installs the zone offsets
    from policy.budget.calendar import days_from_civil
    from policy.budget.reference import PlainMeter
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
    gc.collect()
    gc.freeze()  # as `allot serve` does once loaded: the snapshot and meter leave the collector's scans
    normalize, meter_ns, t = _time_events(state, meter, args.pods, teams, args.events, t)
    plain = PlainMeter(meter.specs, meter.to_workload, meter.calendar)
    plain.open = {key: (t, charges) for key, charges in meter.pods.items()}  # the same pods held, from now
    plain.latest = t
    _, plain_ns, _ = _time_events(state, plain, args.pods, teams, args.baseline_events, t)
    start = time.perf_counter()
    values = meter.snapshot_values(t)
    body = store.encode("allot-system", "bench", t, values, None)
    write_s = time.perf_counter() - start
    size = len(json.dumps(body))
    writes = None
    if args.writes_seconds > 0:
        from webhook.bench.budget_writes import measure

        some = [_pod(i, teams) for i in range(min(args.pods, 2000))]
        writes = measure(_policy(args.budgets), some, lambda n: _pod(10_000_000 + n, teams), t, args.writes_seconds)
    p50, p99, b50, b99 = (_pct(meter_ns, 0.5), _pct(meter_ns, 0.99), _pct(plain_ns, 0.5), _pct(plain_ns, 0.99))
    out = {"pods": args.pods, "budgets": args.budgets, "events": args.events,
           "meter_p50_us": p50 / 1000, "meter_p99_us": p99 / 1000, "meter_mean_us": statistics.fmean(meter_ns) / 1000,
           "baseline_p50_us": b50 / 1000, "baseline_p99_us": b99 / 1000, "ratio_p50": b50 / max(p50, 1),
           "ratio_p99": b99 / max(p99, 1), "writes": writes, "normalize_p50_us": _pct(normalize, 0.5) / 1000,
           "normalize_p99_us": _pct(normalize, 0.99) / 1000, "attach_s": attach_s, "write_build_ms": write_s * 1000,
           "write_bytes": size, "budget_p99_us": BUDGET_NS / 1000}
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        print(f"{args.pods:,} live GPU pods, {args.budgets:,} budgets, {args.events:,} pod events")
        print(f"  metering per event: p50 {p50 / 1000:.2f} us, p99 {p99 / 1000:.2f} us (budget {BUDGET_NS / 1000:g} us)"
              f"  [normalizing the pod, shared with the quota ledger: p50 {out['normalize_p50_us']:.1f} us, "
              f"p99 {out['normalize_p99_us']:.1f} us]")
        print(f"  baseline, the plain meter (every budget tested per event): p50 {b50 / 1000:.1f} us, p99 {b99 / 1000:.1f} us"
              f"  ({out['ratio_p50']:.0f}x / {out['ratio_p99']:.0f}x the fast one)")
        print(f"  attaching the meter to the snapshot: {attach_s:.2f} s; one write of the meter object: "
              f"{out['write_build_ms']:.1f} ms to build, {size / 1024:.0f} KiB (every budget, at most once per 10 s)")
        if writes is not None:
            print(f"  meter object under load (3 replicas, ticks every 0.5 s, writer killed at the half, "
                  f"{writes['simulated_s']} s of server time): {writes['writes']} writes, at most {writes['most_in_10s']} "
                  f"in any 10 s (budget 1); writers {', '.join(writes['writers'])}; live replicas differ by "
                  f"{writes['replica_spread_mgpu_ms']} milli-GPU-ms at most")
    ok = p99 <= BUDGET_NS and (writes is None or writes["most_in_10s"] <= 1)
    if not args.json:
        print("  verdict: " + ("within budget" if ok else "OVER budget"))
    return 0 if ok else 1
