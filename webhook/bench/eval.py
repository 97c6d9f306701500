"""`allot bench eval`: per-decision latency (normalization + evaluation), side by side with cedarpy.

    allot bench eval [--policy DIR] [--cluster FILE] [REQUEST] [--runs N] [--json]

Without --policy, a realistic generated 30-block set (webhook/bench/eval_data.py) is
used, with its Cedar equivalent for the baseline; without --cluster, a generated
64-node cluster; without REQUEST, a 2-GPU training pod. The input is parsed JSON
already: the timed call is `Engine.decide(request, snapshot, now)` on the
validating side (reservations off, so every run sees the same state).
Without REQUEST, a 1,024-pod JobSet (128 replicated Jobs x 8 one-GPU pods, rack-required)
is also timed, printed beside the pod.
Budget: median <= 25 us for a 30-block set, and >= 10x faster than cedarpy; the JobSet p99 <= 5 ms.
"""

from __future__ import annotations

import gc
import json
import sys
import time

BUDGET_MEDIAN_US = 25.0
BUDGET_RATIO = 10.0


def add_arguments(parser) -> None:
    """Options of the eval benchmark."""
    parser.add_argument("request", nargs="?", metavar="REQUEST", help="manifest or AdmissionReview (default: generated pod)")
    parser.add_argument("--policy", action="append", metavar="DIR", help="policy set (default: generated 30-block set)")
    parser.add_argument("--cluster", metavar="FILE", help="cluster state (default: generated 64-node cluster)")
    parser.add_argument("--runs", type=int, default=20000, help="timed decisions per engine (default 20000)")
    parser.add_argument("--json", action="store_true", help="print one JSON object (times in microseconds)")


def _time(fns: dict, runs: dict, rounds: int = 10) -> dict:
    """Per-call times (us) of each fn, measured in interleaved rounds so machine noise hits all alike.

    Each fn is warmed up first; GC is off while timing so a pause is not charged to one call.
    """
    for name, fn in fns.items():
        for _ in range(min(2000, runs[name])):
            fn()
    samples: dict = {name: [] for name in fns}
    clock = time.perf_counter_ns
    gc.disable()
    try:
        for _ in range(rounds):
            for name, fn in fns.items():
                out = samples[name]
                for _ in range(max(1, runs[name] // rounds)):
                    t0 = clock()
                    fn()
                    out.append((clock() - t0) / 1000.0)
    finally:
        gc.enable()
    for out in samples.values():
        out.sort()
    return samples


def _stats(samples: list[float]) -> dict:
    n = len(samples)
    return {
        "median_us": round(samples[n // 2], 2),
        "p99_us": round(samples[min(n - 1, int(n * 0.99))], 2),
        "min_us": round(samples[0], 2),
        "runs": n,
    }


def _inputs(args):
    from policy.cluster.snapshot import ClusterSnapshot
    from webhook.bench import eval_data as data
    from webhook.errors import UsageError
    from webhook.cli.eval import build_request, load_policy, load_snapshot, read_document

    if args.runs < 10:
        raise UsageError("--runs must be at least 10")
    cedar_text = None
    if args.policy:
        policy_set = load_policy(args.policy)
        label = ", ".join(args.policy)
    else:
        import lang

        text, cedar_text, _ = data.generate()
        policy_set, _ = lang.compile_policies([("<generated>/bench.policy", text)])
        label = "generated"
    snapshot = load_snapshot(args.cluster) if args.cluster else ClusterSnapshot.from_objects(data.cluster_objects())
    doc = read_document(args.request) if args.request else data.request_pod()
    request = build_request(doc, user="system:serviceaccount:ml:trainer", groups=["system:authenticated"], operation="CREATE")
    jobset = member = None
    if not args.request:
        member = build_request(data.request_member(), user="system:serviceaccount:ml:trainer", groups=["system:authenticated"], operation="CREATE")  # beside the default pod: a whole 1,024-pod JobSet, decided at submission
        jobset = build_request(data.request_jobset(), user="system:serviceaccount:ml:trainer", groups=["system:authenticated"], operation="CREATE")
    return policy_set, label, cedar_text, snapshot, request, jobset, member


def _blocks(policy_set) -> int:
    return sum(len(x) for x in (policy_set.quotas, policy_set.fractions, policy_set.gangs, policy_set.agents, policy_set.rules))


def _cedar(cedar_text, engine, snapshot, request):
    """(timed call, cedar decision, note) of cedarpy.is_authorized on the same request, or (None, None, why)."""
    if cedar_text is None:
        return None, None, "no Cedar equivalent for a custom --policy set (only the generated set is translated)"
    try:
        import cedarpy
    except ImportError:
        return None, None, "cedarpy is not installed"
    from policy.subject.normalize import normalize
    from webhook.bench import eval_data as data

    w = engine.enrich(normalize(request, snapshot))
    creq = data.cedar_request(w, request, engine, snapshot)
    policies, entities = cedarpy.PolicySet.from_str(cedar_text), cedarpy.Entities.from_json_str("[]")
    result = cedarpy.is_authorized(creq, policies, entities)
    errors = list(result.diagnostics.errors)
    if errors:
        return None, None, f"Cedar evaluation errors: {errors[:2]}"
    return (lambda: cedarpy.is_authorized(creq, policies, entities)), result.allowed, "is_authorized only (context prepared outside the timing)"


def run(args) -> int:
    """Time both engines and print the figures and the budget verdicts."""
    from policy.engine import Engine

    policy_set, label, cedar_text, snapshot, request, jobset, member = _inputs(args)
    if policy_set is None:
        return 1
    engine = Engine(policy_set)
    decision = engine.decide(request, snapshot, 0.0, reserve=False)
    from policy.subject.normalize import normalize

    w = engine.enrich(normalize(request, snapshot))
    fns = {
        "allot": lambda: engine.decide(request, snapshot, 0.0, reserve=False),
        "allot_mutate": lambda: engine.decide(request, snapshot, 0.0, mutate=True, reserve=False),
        "normalize": lambda: normalize(request, snapshot),
        "evaluate": lambda: engine.evaluate(w, snapshot, 0.0, reserve=False),
    }
    runs = {"allot": args.runs, "allot_mutate": args.runs // 4, "normalize": args.runs // 4, "evaluate": args.runs // 4}
    if jobset is not None:
        fns["jobset"], runs["jobset"] = (lambda: engine.decide(jobset, snapshot, 0.0, reserve=False)), max(10, args.runs // 20)
    if member is not None:  # the same pod, owned by an admitted Deployment still holding its 2 GPUs: own engine and snapshot
        from policy.cluster.snapshot import ClusterSnapshot
        from webhook.bench import eval_data as data

        held = ClusterSnapshot.from_objects(data.cluster_objects())
        member_engine = Engine(policy_set)
        member_engine.state_for(held)
        ids = [s.id for s in member_engine.compiled.quota_specs if s.namespace == "team-3"]
        held.reservations.reserve("wl:team-3/Deployment/train", tuple((q, 2000, 0, "h100", 2000) for q in ids), float("inf"))
        fns["member"], runs["member"] = (lambda: member_engine.decide(member, held, 0.0, reserve=False)), args.runs // 4
    cedar_call, cedar_allowed, note = _cedar(cedar_text, engine, snapshot, request)
    if cedar_call is not None:
        fns["cedar"], runs["cedar"] = cedar_call, max(10, args.runs // 4)
    samples = _time(fns, runs)
    allot, mutate = _stats(samples["allot"]), _stats(samples["allot_mutate"])
    parts = {"normalize": _stats(samples["normalize"]), "evaluate": _stats(samples["evaluate"])}
    cedar = _stats(samples["cedar"]) if "cedar" in samples else None
    out = {
        "policy": label,
        "blocks": _blocks(policy_set),
        "allowed": decision.allowed,
        "allot": allot,
        "allot_mutate": mutate,
        "parts": parts,
        "cedar": cedar,
        "cedar_allowed": cedar_allowed,
        "cedar_note": note,
        "ratio": round(cedar["median_us"] / allot["median_us"], 1) if cedar else None,
        "budget_median_us": BUDGET_MEDIAN_US,
        "budget_ratio": BUDGET_RATIO,
        "jobset": None,
        "member": {**_stats(samples["member"]), "allowed": member_engine.decide(member, held, 0.0, reserve=False).allowed} if member is not None else None,
    }
    if jobset is not None:
        from webhook.bench import eval_data as data

        js = engine.decide(jobset, snapshot, 0.0, reserve=False)
        out["jobset"] = {**_stats(samples["jobset"]), "allowed": js.allowed, "codes": sorted({r.code for r in js.reasons}),
                         "pods": data.JOBSET_REPLICAS * data.JOBSET_PODS_PER_JOB, "budget_p99_us": data.BUDGET_JOBSET_P99_US}
        out["jobset"]["p99_ok"] = out["jobset"]["p99_us"] <= data.BUDGET_JOBSET_P99_US
    out["median_ok"] = allot["median_us"] <= BUDGET_MEDIAN_US
    out["ratio_ok"] = None if out["ratio"] is None else out["ratio"] >= BUDGET_RATIO
    if args.json:
        print(json.dumps(out))
        return 0
    _print(out)
    return 0


def _print(o: dict) -> None:
    a, m, c = o["allot"], o["allot_mutate"], o["cedar"]
    lines = [
        f"policy set  {o['policy']} ({o['blocks']} governing blocks); decision: {'allowed' if o['allowed'] else 'denied'}",
        f"allot       median {a['median_us']:8.2f} us   p99 {a['p99_us']:8.2f} us   ({a['runs']} runs, normalize + evaluate)",
        f"  /mutate   median {m['median_us']:8.2f} us   p99 {m['p99_us']:8.2f} us",
    ]
    for name, part in o["parts"].items():
        lines.append(f"  {name:<9} median {part['median_us']:8.2f} us   p99 {part['p99_us']:8.2f} us   (alone, same request)")
    if c:
        agree = "same decision" if o["cedar_allowed"] == o["allowed"] else "DIFFERENT decision"
        lines.append(f"cedarpy     median {c['median_us']:8.2f} us   p99 {c['p99_us']:8.2f} us   ({c['runs']} runs, {o['cedar_note']}; {agree})")
        lines.append(f"ratio       cedarpy / allot median = {o['ratio']}x")
    else:
        lines.append(f"cedarpy     not run: {o['cedar_note']}")
    mb = o.get("member")
    if mb:
        lines.append(f"  member  median {mb['median_us']:8.2f} us   p99 {mb['p99_us']:8.2f} us   (the same pod as a pod of an admitted Deployment: its share from the hold; {'allowed' if mb['allowed'] else 'DENIED'})")
    j = o.get("jobset")
    if j:
        lines.append(f"jobset      median {j['median_us']:8.2f} us   p99 {j['p99_us']:8.2f} us   ({j['runs']} runs; a JobSet of {j['pods']} pods, "
                     f"128 x 8 one-GPU pods, rack-required; {'allowed' if j['allowed'] else 'denied: ' + ', '.join(j['codes'])})")
        lines.append(f"  vs pod    p99 {a['p99_us']:8.2f} us for the single pod above; jobset / pod p99 = {j['p99_us'] / a['p99_us']:.1f}x")
    verdict = "ok" if o["median_ok"] else "OVER BUDGET"
    lines.append(f"budget      median <= {o['budget_median_us']} us: {verdict}")
    if j:
        lines.append(f"budget      jobset p99 <= {j['budget_p99_us']:.0f} us: {'ok' if j['p99_ok'] else 'OVER BUDGET'}")
    if o["ratio_ok"] is not None:
        lines.append(f"budget      >= {o['budget_ratio']}x faster than cedarpy: {'ok' if o['ratio_ok'] else 'NOT MET'}")
    print("\n".join(lines))
    sys.stdout.flush()
