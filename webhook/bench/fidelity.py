"""`allot bench fidelity`: `allot simulate --method artifact` against the FGD paper's published curves.

For each openb pod list (variant) and model, the artifact's experiment is run once per
seed — the GPU node list, the trace tuned to 1.3x, seeds 42-51 — and the mean percent of
GPUs allocated at each 10 % of arrived demand is set beside the artifact's own mean
(`webhook/data/simulate/artifact_curves.json`, from its `expected_results`). Budget
(issue 32): within ±1.0 point at every point, for best-fit, random and fgd.
"""

from __future__ import annotations

import json
import os
import pathlib
import time

CURVES = pathlib.Path(__file__).resolve().parents[1] / "data" / "simulate" / "artifact_curves.json"
NODE_FILE = "openb_node_list_gpu_node.csv"
TOLERANCE = 1.0


def add_arguments(parser) -> None:
    """Options of `allot bench fidelity`."""
    parser.add_argument("--openb", metavar="DIR", help="folder holding openb_node_list_gpu_node.csv and the openb_pod_list_*.csv variants "
                                                       "(default: ../shared/data/openb beside the repository)")
    parser.add_argument("--variants", metavar="A,B", help="pod lists by suffix (default, multigpu50, …; default: every one found in DIR)")
    parser.add_argument("--schedulers", metavar="A,B", default="best-fit,fgd,random", help="models to compare (default best-fit,fgd,random)")
    parser.add_argument("--seeds", metavar="A-B", default="42-51", help="seeds (default 42-51, the artifact's)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")


def curve(node_text: str, pod_text: str, variant: str, scheduler: str, seeds: list[int]) -> list[dict[str, float]]:
    """The allocation-at-arrived curve of each seed's run of one variant under one model (no policy)."""
    from fractions import Fraction

    import lang
    from policy.cluster.snapshot import ClusterSnapshot
    from policy.engine import Engine
    from policy.simulate.openb import openb_nodes, openb_pods
    from policy.simulate.report import at_arrived
    from policy.simulate.run import Options, Simulation
    from policy.simulate.saturate import target_milli, tune

    policy_set = lang.compile_policies([])[0]
    trace = openb_pods(pod_text, f"openb_pod_list_{variant}.csv")
    out = []
    for seed in seeds:
        snap = ClusterSnapshot.from_objects(openb_nodes(node_text, NODE_FILE))
        sim = Simulation(Engine(policy_set), snap, Options(scheduler, seed=seed), workload=trace.arrivals)
        total = sim.scheduler.gpu_total
        events = tune(trace.arrivals, sim.gpu_shape_of, Fraction(13, 10), total, seed)
        out.append(at_arrived(sim.run(events, saturate_target=target_milli(total, Fraction(13, 10)))))
    return out


def run(args) -> int:
    """Run every (variant, model) over the seeds and print ours beside the artifact's."""
    from webhook.bench.simulate import _openb_dir
    from webhook.cli import UsageError
    from webhook.cli.simulate import ARTIFACT_MODELS, parse_seeds

    published = json.loads(CURVES.read_text())["curves"]
    d = pathlib.Path(args.openb) if args.openb else _openb_dir(None)
    if d is None or not (d / NODE_FILE).is_file():
        raise UsageError(f"no {NODE_FILE} in {args.openb or '../shared/data/openb'}: give --openb DIR")
    found = sorted(p.name[len("openb_pod_list_"):-4] for p in d.glob("openb_pod_list_*.csv"))
    variants = args.variants.split(",") if args.variants else [v for v in found if v in published]
    unknown = [v for v in variants if v not in published or v not in found]
    if unknown:
        raise UsageError(f"--variants {', '.join(unknown)}: not both in {d} and in the artifact's results ({', '.join(sorted(published))})")
    schedulers = args.schedulers.split(",")
    bad = [s for s in schedulers if s not in ARTIFACT_MODELS]
    if bad:
        raise UsageError(f"--schedulers {', '.join(bad)}: the artifact's models are {', '.join(ARTIFACT_MODELS)}")
    try:
        seeds = parse_seeds(args.seeds)
    except ValueError as exc:
        raise UsageError(f"--seeds {exc}") from None
    node_text = (d / NODE_FILE).read_text()
    rows = []
    load_before = os.getloadavg()
    for v in variants:
        pod_text = (d / f"openb_pod_list_{v}.csv").read_text()
        for s in schedulers:
            t0 = time.process_time()
            runs = curve(node_text, pod_text, v, s, seeds)
            points = sorted((x for x in published[v][s] if all(x in r for r in runs)), key=int)
            ours = {x: round(sum(r[x] for r in runs) / len(runs), 2) for x in points}
            diff = {x: round(ours[x] - published[v][s][x], 2) for x in points}
            worst = max((abs(x) for x in diff.values()), default=0.0)
            rows.append({"variant": v, "scheduler": s, "ours": ours, "artifact": {x: published[v][s][x] for x in points},
                         "diff": diff, "max_abs_diff": worst, "within": worst <= TOLERANCE, "cpu_s_per_run": round((time.process_time() - t0) / len(seeds), 2)})
    doc = {"seeds": seeds, "tolerance": TOLERANCE, "rows": rows, "load_average_before": [round(x, 2) for x in load_before]}
    if args.json:
        print(json.dumps(doc, indent=1, sort_keys=True))
        return 0
    points = list(rows[0]["ours"]) if rows else []
    print(f"allot bench fidelity: mean of seeds {args.seeds}, percent of GPUs allocated at arrived X% (ours / artifact's); budget ±{TOLERANCE}")
    print(f"{'variant':<12}{'model':<10}" + "".join(f"{x + '%':>13}" for x in points) + "  max|Δ|")
    for r in rows:
        cells = "".join(f"{r['ours'][x]:>6.2f}/{r['artifact'][x]:<6.2f}" for x in points)
        print(f"{r['variant']:<12}{r['scheduler']:<10}{cells}  {r['max_abs_diff']:.2f} {'ok' if r['within'] else 'OVER'}")
    print(f"{sum(r['within'] for r in rows)}/{len(rows)} within ±{TOLERANCE}; cpu per run {min(r['cpu_s_per_run'] for r in rows):.1f}-"
          f"{max(r['cpu_s_per_run'] for r in rows):.1f} s" if rows else "nothing run")
    return 0
