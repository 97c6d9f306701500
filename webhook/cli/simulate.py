"""`allot simulate`: what a policy set does to a cluster over time, replayed from a trace.

    allot simulate [--policy DIR]… [--cluster FILE] [--trace FILE] [--scheduler S]
                   [--retry N --deadline S] [--saturate X [--method allot|artifact] [--seed N | --seeds A-B]] [--against DIR]…
                   [--no-preempt] [--json] [--plot DIR] [--html FILE] [--progress] [--samples N]

Without --trace it runs the embedded example (webhook/data/simulate/). The simulation
itself is pure (policy/simulate/); this module reads the files and prints.
Exit 0 ran, 1 a policy set does not compile, 2 usage errors.
"""

from __future__ import annotations

import json
import pathlib
import sys

DATA = pathlib.Path(__file__).resolve().parents[1] / "data" / "simulate"
DEFAULT_POLICY = DATA / "policy"
DEFAULT_CLUSTER = DATA / "cluster.yaml"
DEFAULT_TRACE = DATA / "trace.jsonl"
ARTIFACT_MODELS = ("random", "best-fit", "packing", "dot-product", "clustering", "fgd")  # policy.simulate.scores.ARTIFACT
SCHEDULERS = ("spread", "binpack", "least-free-gpu", "default", *ARTIFACT_MODELS, "default+steer")  # policy.simulate.scheduler.SCHEDULERS first


def add_arguments(parser) -> None:
    """Options of `allot simulate`."""
    parser.add_argument("--policy", action="append", metavar="DIR", help="policy directory or file (repeatable; default with --trace: no policy, every pod admitted)")
    parser.add_argument("--cluster", metavar="FILE", help="starting cluster: `kubectl get nodes,pods -o yaml` List, or an openb node list CSV")
    parser.add_argument("--trace", metavar="FILE", help="arrivals and departures: Allot trace (JSONL/YAML), a decision log (serve --log-requests) or an openb pod list CSV (default: the embedded example)")
    parser.add_argument("--scheduler", choices=SCHEDULERS, default="spread", metavar="S",
                        help="how admitted pods are bound: spread (default, kube-scheduler's LeastAllocated), binpack, least-free-gpu, "
                             "default (kube-scheduler's default profile, preferred node affinity scored), "
                             "the FGD paper simulator's random, best-fit, packing, dot-product, clustering, fgd, "
                             "or default+steer: default with and without Allot's fragmentation steering, side by side")
    parser.add_argument("--retry", type=float, metavar="N", help="resubmit denied and unplaceable pods every N seconds (default: drop them)")
    parser.add_argument("--deadline", type=float, metavar="S", help="give a resubmitted pod up S seconds after it first arrived (default 3600; needs --retry)")
    parser.add_argument("--saturate", metavar="X", help="draw pods in seeded shuffled order, none departing, until arrived GPU demand reaches X times the cluster's GPUs")
    parser.add_argument("--seed", type=int, default=0, help="shuffle seed of --saturate, and the tie order of the FGD paper's models (default 0)")
    parser.add_argument("--seeds", metavar="A-B", help="run once per seed (A-B or a comma list) and report the mean allocation at each 10%% of arrived demand")
    parser.add_argument("--method", choices=("allot", "artifact"), default="allot",
                        help="how --saturate draws pods: allot (default: shuffled, then with replacement, until X) or artifact "
                             "(the FGD paper simulator's: the whole trace shuffled, then tuned up or down to X)")
    parser.add_argument("--against", action="append", metavar="DIR", help="a second policy set over the same trace: both side by side, with the decisions that differ")
    parser.add_argument("--no-preempt", action="store_true", help="evict nothing: admitted reclaim/preemption plans are not carried out (as under reclaim audit)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--plot", metavar="DIR", help="write PNG charts into DIR (needs matplotlib: pip install 'allot[sim]')")
    parser.add_argument("--html", metavar="FILE", help="write one self-contained HTML page with the charts and tables")
    parser.add_argument("--progress", action="store_true", help="show the progress bar on stderr even when it is not a terminal")
    parser.add_argument("--samples", type=int, default=120, metavar="N", help="timeline points in the report (default 120)")


def _read_text(path: str, what: str) -> str:
    from webhook.clusterfile import read_text_file

    return read_text_file(path, what)


def load_cluster(path: str):
    """The starting snapshot: a cluster-state file, or an openb node list CSV."""
    from policy.cluster.snapshot import ClusterSnapshot, SnapshotError
    from policy.simulate.openb import is_openb, openb_nodes
    from policy.simulate.trace import TraceError
    from webhook.cli import UsageError
    from webhook.clusterfile import check_cluster

    text = _read_text(path, "cluster")
    try:
        if is_openb(text, "nodes"):
            snapshot = ClusterSnapshot.from_objects(openb_nodes(text, path))
        else:
            snapshot = ClusterSnapshot.from_text(text)
    except (SnapshotError, TraceError) as exc:
        raise UsageError(f"{path}: {exc}" if not str(exc).startswith(path) else str(exc)) from None
    check_cluster(path, snapshot, needs_nodes="a cluster with no nodes cannot be simulated (every pod would be unplaceable)")
    return snapshot


def load_trace(path: str, names: dict | None = None):
    """The trace of `path`, whichever of the three formats it is."""
    from policy.simulate.openb import is_openb, openb_pods
    from policy.simulate.trace import TraceError, is_decision_log, parse_allot, parse_decision_log
    from webhook.cli import UsageError

    text = _read_text(path, "trace")
    path = names.get(path, path) if names else path
    try:
        if is_openb(text, "pods"):
            trace = openb_pods(text, path)
        elif is_decision_log(text):
            trace = parse_decision_log(text.splitlines(), path)
        else:
            trace = parse_allot(text, path)
    except TraceError as exc:
        raise UsageError(str(exc)) from None
    if not trace.arrivals:
        skipped = f" ({len(trace.skipped)} record(s) skipped, the first {trace.skipped[0][0]}: {trace.skipped[0][1]})" if trace.skipped else ""
        raise UsageError(f"trace {path} holds no pods{skipped}: nothing to simulate")
    return trace


class Progress:
    """A progress bar on stderr, redrawn at most every 0.1 s (the run calls it about 200 times in all)."""

    def __init__(self, label: str, stream=sys.stderr):
        import time

        self.label, self.stream, self._clock, self._last = label, stream, time.monotonic, 0.0
        self._finished = False

    def __call__(self, done: int, total: int) -> None:
        if self._finished:
            return
        now = self._clock()
        if done < total and now - self._last < 0.1:
            return
        self._last = now
        filled = 30 * done // max(total, 1)
        self.stream.write(f"\r{self.label} [{'#' * filled}{'.' * (30 - filled)}] {100 * done // max(total, 1):3d}% {done:,}/{total:,} events")
        if done >= total:
            self.stream.write("\n")
            self._finished = True
        self.stream.flush()


def _compile(paths: list[str] | None):
    from webhook.cli.eval import load_policy

    if not paths:
        import lang

        return lang.compile_policies([])[0]
    return load_policy(paths)


def simulate_once(policy_set, label: str, args, trace, progress, seed: int | None = None):
    """(report dict, Result) of one policy set over a freshly loaded starting cluster."""
    from policy.engine import Engine
    from policy.simulate.report import build_report
    from policy.simulate.run import Options, Simulation
    from policy.simulate.saturate import saturate, target_milli, tune
    from webhook.cli import UsageError

    seed = args.seed if seed is None else seed
    snapshot = load_cluster(args.cluster)
    engine = Engine(policy_set)
    deadline = args.deadline if args.deadline is not None else 3600.0
    sim = Simulation(engine, snapshot, Options(args.scheduler, args.retry, deadline, args.samples, seed, not args.no_preempt), workload=trace.arrivals)
    events, target = trace.events, None
    if args.saturate is not None:
        if not sim.scheduler.gpu_total:
            raise UsageError(f"{args.cluster}: the cluster has no schedulable GPUs to saturate")
        target = target_milli(sim.scheduler.gpu_total, args._multiple)
        try:
            if args.method == "artifact":
                events = tune(trace.arrivals, sim.gpu_shape_of, args._multiple, sim.scheduler.gpu_total, seed)
            else:
                events = saturate(trace.arrivals, sim.gpu_of, target, seed)
        except ValueError as exc:
            raise UsageError(f"{trace.name}: {exc}") from None
    from policy.simulate.burn import BurnWatch

    watch = BurnWatch(sim, min((e.at for e in events), default=0.0)) if engine.compiled.budget_specs else None
    result = sim.run(events, progress=progress, saturate_target=target)
    inputs = {
        "policy": label, "trace": trace.name, "trace_format": trace.fmt, "cluster": args._names.get(args.cluster, args.cluster),
        "scheduler": args.scheduler, "retry": args.retry, "deadline": deadline if args.retry else None,
        "saturate": args.saturate, "seed": seed if args.saturate is not None or args.scheduler in ARTIFACT_MODELS else None,
        "method": args.method if args.saturate is not None else None, "preempt": not args.no_preempt,
        "skipped": len(trace.skipped), "skipped_first": f"{trace.skipped[0][0]}: {trace.skipped[0][1]}" if trace.skipped else None,
    }
    report = build_report(result, inputs, sim.quota.specs)
    if watch is not None:
        report["budgets"] = watch.rows(result.end)
    return report, result


def _steer_run(args, trace, policy_set, show: bool) -> int:
    """`--scheduler default+steer`: the default scheduler model with the policy's steer blocks (or the built-in one) and without."""
    from policy.simulate.default import with_steering
    from policy.simulate.report import differences, render_against, render_seeds, seeds_report

    args.scheduler = "default"
    plain, steered = with_steering(policy_set)
    label = ",".join(args._names.get(p, p) for p in args.policy) if args.policy else "none (every pod admitted)"
    labels = (label + " (steer blocks left out)" if policy_set.steers else label,
              label + (" + its steer blocks" if policy_set.steers else " + steer allot-steering { by fragmentation } (built in)"))
    if args.seeds is not None:
        docs = []
        for name, ps, lab in (("default", plain, labels[0]), ("default+steer", steered, labels[1])):
            reports = [simulate_once(ps, lab, args, trace, Progress(f"{name} seed {s}") if show else None, seed=s)[0]
                       for s in parse_seeds(args.seeds)]
            doc = seeds_report(reports)
            doc["inputs"]["scheduler"] = name
            docs.append(doc)
        gain = {x: round(docs[1]["mean_allocated_at_arrived"][x] - docs[0]["mean_allocated_at_arrived"].get(x, 0.0), 2)
                for x in docs[1]["mean_allocated_at_arrived"]}
        if args.json:
            print(json.dumps({"default": docs[0], "default+steer": docs[1], "steering_gain": gain}, indent=1, sort_keys=True))
        else:
            print(render_seeds(docs[0]) + "\n\n" + render_seeds(docs[1]))
            print("steering gain (points)" + "".join(f"{v:>+7.2f}" for v in gain.values()))
        return 0
    a, res_a = simulate_once(plain, labels[0], args, trace, Progress("default") if show else None)
    b, res_b = simulate_once(steered, labels[1], args, trace, Progress("steered") if show else None)
    b["inputs"]["scheduler"] = "default+steer"
    diff = differences(res_a, res_b)
    print(json.dumps({"a": a, "b": b, "differences": diff}, indent=1, sort_keys=True) if args.json else render_against(a, b, diff))
    return 0


def parse_seeds(text: str) -> list[int]:
    """`42-51` or `1,5,9` -> the seeds; ValueError for anything else."""
    seeds: list[int] = []
    for part in text.split(","):
        lo, dash, hi = part.strip().partition("-")
        if not lo.isdigit() or (dash and not hi.isdigit()):
            raise ValueError(f"{text!r}: give seeds as A-B or a comma list of whole numbers (like 42-51)")
        a, b = int(lo), int(hi) if dash else int(lo)
        if b < a or b - a >= 1000:
            raise ValueError(f"{text!r}: a range A-B needs A <= B and at most 1000 seeds")
        seeds.extend(range(a, b + 1))
    return seeds


def run(args) -> int:
    """Simulate, print the summary (or JSON), write charts and HTML on request."""
    import math

    from policy.simulate import burn
    from policy.simulate.report import differences, render_against, render_text
    from policy.simulate.saturate import parse_multiple
    from webhook.cli import UsageError

    args._names = {}
    if args.trace is None and args.cluster is None and args.policy is None:
        args.policy, args.cluster, args.trace = [str(DEFAULT_POLICY)], str(DEFAULT_CLUSTER), str(DEFAULT_TRACE)
        # Shown by name, not by install path: the report of the example is the same bytes on every machine.
        args._names = {str(DEFAULT_POLICY): "example (embedded)", str(DEFAULT_CLUSTER): "example cluster.yaml (embedded)",
                       str(DEFAULT_TRACE): "example trace.jsonl (embedded)", str(DATA / "against"): "example what-if (embedded)"}
    if args.trace is None:
        raise UsageError("give --trace FILE (or no --policy/--cluster/--trace at all for the embedded example)")
    if args.cluster is None:
        raise UsageError("give --cluster FILE: the nodes to simulate on (a cluster-state file or an openb node list CSV)")
    for flag, value in (("--retry", args.retry), ("--deadline", args.deadline)):
        if value is not None and (not math.isfinite(value) or value <= 0):
            raise UsageError(f"{flag} {value}: give a positive number of seconds")
    if args.deadline is not None and args.retry is None:
        raise UsageError("--deadline applies to resubmission: give --retry N too")
    if args.samples < 1 or args.samples > 100000:
        raise UsageError(f"--samples {args.samples}: give 1..100000")
    args._multiple = None
    if args.saturate is not None:
        try:
            args._multiple = parse_multiple(args.saturate)
        except ValueError as exc:
            raise UsageError(f"--saturate {exc}") from None
        if args.retry is not None:
            raise UsageError("--retry has nothing to wait for under --saturate: no pod ever departs")
    elif args.method != "allot" or args.seeds is not None:
        raise UsageError(f"{'--method' if args.method != 'allot' else '--seeds'} applies to --saturate X: give it too")
    seeds = None
    if args.seeds is not None:
        try:
            seeds = parse_seeds(args.seeds)
        except ValueError as exc:
            raise UsageError(f"--seeds {exc}") from None
        extra = [flag for flag, on in (("--against", args.against), ("--plot", args.plot), ("--html", args.html)) if on]
        if extra:
            raise UsageError(f"--seeds prints the curves of its runs; {', '.join(extra)} take one run (give --seed N)")
    steering = args.scheduler == "default+steer"
    if steering and args.against:
        raise UsageError("--scheduler default+steer compares the policy set with and without steering; --against takes a second policy set")
    trace = load_trace(args.trace, args._names)
    policy_set = _compile(args.policy)
    if policy_set is None:
        return 1
    if steering:
        return _steer_run(args, trace, policy_set, args.progress or sys.stderr.isatty())
    other = None
    if args.against:
        other = _compile(args.against)
        if other is None:
            return 1
    show = args.progress or sys.stderr.isatty()
    label_a = ",".join(args._names.get(p, p) for p in args.policy) if args.policy else "none (every pod admitted)"
    if seeds is not None:
        from policy.simulate.report import render_seeds, seeds_report

        reports = [simulate_once(policy_set, label_a, args, trace, Progress(f"seed {s}") if show else None, seed=s)[0] for s in seeds]
        doc = seeds_report(reports)
        print(json.dumps(doc, indent=1, sort_keys=True) if args.json else render_seeds(doc))
        return 0
    report, result = simulate_once(policy_set, label_a, args, trace, Progress("simulate") if show else None)
    doc, text = report, None
    if other is not None:
        label_b = ",".join(args._names.get(p, p) for p in args.against)
        report_b, result_b = simulate_once(other, label_b, args, trace, Progress("against ") if show else None)
        diff = differences(result, result_b)
        doc = {"a": report, "b": report_b, "differences": diff}
        text = render_against(report, report_b, diff)
        if "budgets" in report and "budgets" in report_b:
            doc["budget_moves"] = burn.moves(report["budgets"], report_b["budgets"])
            text += "\n" + "\n".join(burn.render_moves(doc["budget_moves"]))
    wrote: list[str] = []  # where --plot and --html wrote, said after the report
    if args.plot or args.html:
        from webhook.simulate.charts import charts, html_page

        try:
            images = charts(report, report_b if other is not None else None)
        except ImportError:
            raise UsageError("--plot and --html need matplotlib: pip install 'allot[sim]'") from None
        if args.plot:
            out = pathlib.Path(args.plot)
            out.mkdir(parents=True, exist_ok=True)
            for name, png in images.items():
                (out / name).write_bytes(png)
            wrote.append(f"wrote {len(images)} chart{'s' * (len(images) != 1)} to {out}: {', '.join(sorted(images))}")
        if args.html:
            pathlib.Path(args.html).write_text(html_page(doc, images), encoding="utf-8")
            wrote.append(f"wrote the HTML page to {args.html}")
    if args.json:
        print(json.dumps(doc, indent=1, sort_keys=True))
    else:
        if text is None:
            text = render_text(report) + ("\n" + "\n".join(burn.render(report["budgets"])) if "budgets" in report else "")
        print(text)
    for line in wrote:  # after the report; with --json on stderr, so stdout stays one JSON document
        print(line, file=sys.stderr if args.json else sys.stdout)
    return 0
