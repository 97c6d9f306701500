"""`allot bench simulate`: the simulator's budget — the openb trace in time order and saturating, a synthetic
100,000-pod trace on 16,384 nodes, and the progress bar's overhead.

Each case runs in a fresh interpreter (`--case NAME`), so its peak RSS is its own.
Budgets (issue 15): openb ≤ 10 s each, synthetic ≤ 60 s and ≤ 2 GiB, progress bar ≤ 2 %.
`openb-artifact-fgd` is one experiment of the FGD paper (issue 32): its GPU node list, the
default trace tuned to 1.3x by the artifact's method, seed 42, the fgd model.
The baseline is the research simulator built for the same trace (Go), which its
authors report at about 10 minutes per experiment on 2 vCPUs.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

from webhook.cli.simulate import SCHEDULERS  # one list of models for both commands

CASES = ("openb-time", "openb-saturate", "openb-saturate-progress", "openb-artifact-fgd", "synthetic")
BUDGET_S = {"openb-time": 10.0, "openb-saturate": 10.0, "openb-saturate-progress": 10.0, "openb-artifact-fgd": 10.0, "synthetic": 60.0}
GIB = 2**30
REPEATS = 3
OPENB_FILES = ("openb_node_list_all_node.csv", "openb_pod_list_default.csv", "openb_node_list_gpu_node.csv")


def add_arguments(parser) -> None:
    """Options of `allot bench simulate`."""
    parser.add_argument("--openb", metavar="DIR", help="folder holding the openb CSVs (default: ../shared/data/openb beside the repository)")
    parser.add_argument("--nodes", type=int, default=16384, help="synthetic cluster nodes (default 16384)")
    parser.add_argument("--pods", type=int, default=100000, help="synthetic trace pods (default 100000)")
    parser.add_argument("--scheduler", choices=SCHEDULERS, default="spread")
    parser.add_argument("--only", choices=CASES, action="append", help="run only this case (repeatable)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--case", choices=CASES, help=argparse_suppress())


def argparse_suppress():
    import argparse

    return argparse.SUPPRESS


def _openb_dir(given: str | None) -> pathlib.Path | None:
    repo = pathlib.Path(__file__).resolve().parents[2]
    for d in ([pathlib.Path(given)] if given else [repo.parent / "shared" / "data" / "openb", repo.parent.parent / "shared" / "data" / "openb", pathlib.Path("/work/shared/data/openb")]):
        if all((d / f).is_file() for f in OPENB_FILES):
            return d
    return None


def _one(args) -> dict:
    """Run one case in this process and return its figures."""
    import resource
    import time
    from fractions import Fraction

    import lang
    from policy.cluster.snapshot import ClusterSnapshot
    from policy.engine import Engine
    from policy.simulate.report import at_arrived
    from policy.simulate.run import Options, Simulation
    from policy.simulate.saturate import saturate, target_milli, tune

    wall0, cpu0 = time.perf_counter(), time.process_time()
    case = args.case
    if case.startswith("openb"):
        from policy.simulate.openb import openb_nodes, openb_pods

        d = _openb_dir(args.openb)
        node_file = OPENB_FILES[2] if case == "openb-artifact-fgd" else OPENB_FILES[0]
        nodes = openb_nodes((d / node_file).read_text(), node_file)
        trace = openb_pods((d / OPENB_FILES[1]).read_text(), OPENB_FILES[1]).events
    else:
        from policy.simulate import synthetic

        nodes = synthetic.cluster(args.nodes)
        gpus = sum(int(n["status"]["allocatable"].get("nvidia.com/gpu", 0)) for n in nodes)
        trace = synthetic.trace(args.pods, gpus, seed=0)
    artifact = case == "openb-artifact-fgd"
    options = Options("fgd", seed=42) if artifact else Options(args.scheduler)
    sim = Simulation(Engine(lang.compile_policies([])[0]), ClusterSnapshot.from_objects(nodes), options, workload=trace)
    target = None
    if artifact:
        target = target_milli(sim.scheduler.gpu_total, Fraction(13, 10))
        trace = tune(trace, sim.gpu_shape_of, Fraction(13, 10), sim.scheduler.gpu_total, 42)
    elif case.startswith("openb-saturate"):
        target = target_milli(sim.scheduler.gpu_total, Fraction(13, 10))
        trace = saturate(trace, sim.gpu_of, target, 0)
    progress = None
    if case.endswith("progress"):
        from webhook.cli.simulate import Progress

        bar = Progress("simulate", open(os.devnull, "w"))
        spent = [0.0]

        def progress(done: int, total: int) -> None:  # the bar, timed from inside: its own cost, free of machine noise
            t0 = time.perf_counter()
            bar(done, total)
            spent[0] += time.perf_counter() - t0
    run0, run0_wall = time.process_time(), time.perf_counter()
    result = sim.run(trace, progress=progress, saturate_target=target)
    run_cpu = time.process_time() - run0
    run_wall = time.perf_counter() - run0_wall
    bound = sum(1 for o in result.outcomes if o.final == "bound")
    peak = max((s[3] for s in result.samples), default=0)
    return {"case": case, "wall_s": round(time.perf_counter() - wall0, 2), "cpu_s": round(time.process_time() - cpu0, 2),
            "run_cpu_s": round(run_cpu, 2), "rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
            "nodes": len(nodes), "pods": len(result.outcomes), "bound": bound,
            "allocated_final": round(result.samples[-1][3] / result.gpu_total, 4) if result.samples and result.gpu_total else 0,
            "allocated_peak": round(peak / result.gpu_total, 4) if result.gpu_total else 0,
            "progress_share_pct": round(100 * spent[0] / run_wall, 3) if progress is not None and run_wall else None,
            "allocated_at_arrived_130": at_arrived(result).get("130") if artifact else None}


def run(args) -> int:
    """Run each case in its own interpreter and print the table (or JSON)."""
    from webhook.cli import UsageError

    if args.case:
        print(json.dumps(_one(args)))
        return 0
    cases = args.only or list(CASES)
    if any(c.startswith("openb") for c in cases) and _openb_dir(args.openb) is None:
        raise UsageError("the openb CSVs are not in ../shared/data/openb: give --openb DIR, or --only synthetic")
    load_before = os.getloadavg()
    rows = []
    env = {**os.environ, "PYTHONPATH": str(pathlib.Path(__file__).resolve().parents[2])}
    def one(case: str) -> dict:
        cmd = [sys.executable, "-m", "webhook", "bench", "simulate", "--case", case, "--nodes", str(args.nodes),
               "--pods", str(args.pods), "--scheduler", args.scheduler] + (["--openb", args.openb] if args.openb else [])
        p = subprocess.run(cmd, capture_output=True, text=True, env=env)
        if p.returncode != 0:
            raise RuntimeError(f"case {case} failed: {p.stderr.strip().splitlines()[-1] if p.stderr.strip() else p.returncode}")
        return json.loads(p.stdout)

    # The progress pair runs interleaved, best of REPEATS each: one run's cpu time on a shared
    # machine moves by more than the 2 % being measured.
    pair = [c for c in ("openb-saturate", "openb-saturate-progress") if c in cases]
    best: dict[str, dict] = {}
    for _ in range(REPEATS if len(pair) == 2 else 1):
        for case in pair:
            r = one(case)
            if case not in best or r["run_cpu_s"] < best[case]["run_cpu_s"]:
                best[case] = r
    for case in cases:
        rows.append(best[case] if case in best else one(case))
    by = {r["case"]: r for r in rows}
    overhead = None
    if len(pair) == 2:
        base = by["openb-saturate"]["run_cpu_s"]
        overhead = round(100 * (by["openb-saturate-progress"]["run_cpu_s"] - base) / base, 1) if base else None
    inside = by.get("openb-saturate-progress", {}).get("progress_share_pct")
    figures = {"progress_inside_pct": inside, "load_average_before": [round(x, 2) for x in load_before], "load_average_after": [round(x, 2) for x in os.getloadavg()],
               "cases": rows, "progress_overhead_pct": overhead, "scheduler": args.scheduler}
    if args.json:
        print(json.dumps(figures, indent=1, sort_keys=True))
        return 0
    print(f"allot bench simulate (scheduler {args.scheduler}); load average before {figures['load_average_before']}, after {figures['load_average_after']}")
    print(f"{'case':<26}{'nodes':>7}{'pods':>8}{'wall s':>8}{'cpu s':>7}{'RSS MiB':>9}{'budget':>9}  result")
    for r in rows:
        budget = BUDGET_S[r["case"]]
        ok = "ok" if r["wall_s"] <= budget else ("ok on cpu" if r["cpu_s"] <= budget else "OVER")
        print(f"{r['case']:<26}{r['nodes']:>7}{r['pods']:>8}{r['wall_s']:>8.2f}{r['cpu_s']:>7.2f}{r['rss_bytes'] / 2**20:>9.0f}"
              f"{'≤' + str(int(budget)) + ' s':>9}  {ok}; {r['bound']} bound, GPUs allocated peak {r['allocated_peak'] * 100:.1f}%,"
              f" final {r['allocated_final'] * 100:.1f}%"
              + (f", {r['allocated_at_arrived_130']:.2f}% at arrived 130% (the artifact's FGD: 95.29% for seed 42)" if r.get("allocated_at_arrived_130") else ""))
    syn = by.get("synthetic")
    if syn:
        print(f"synthetic peak RSS {syn['rss_bytes'] / GIB:.2f} GiB (budget 2 GiB): {'ok' if syn['rss_bytes'] <= 2 * GIB else 'OVER'}")
    if overhead is not None:
        print(f"progress bar overhead (saturating openb): {inside:.3f}% of the run spent drawing it (budget 2%); "
              f"cpu with vs without, best of 3 interleaved runs each: {overhead:+.1f}% (machine noise)")
    print("baseline: the Go research simulator of the openb paper, ~600 s per experiment on 2 vCPUs")
    return 0
