"""`allot bench check N [--json]`: parse and check a generated N-block policy set; budget 1,000 blocks <= 1 s."""

from __future__ import annotations

import json
import os
import statistics
import sys
import time

BUDGET_MS_PER_1000 = 1000.0


def add_arguments(parser) -> None:
    """Number of blocks, repeats, --json."""
    parser.add_argument("blocks", type=int, nargs="?", default=1000, metavar="N", help="blocks to generate (default 1000)")
    parser.add_argument("--repeat", type=int, default=5, help="runs; the median is reported (default 5)")
    parser.add_argument("--files", type=int, default=10, help="spread the blocks over this many files (default 10)")
    parser.add_argument("--json", action="store_true", help="print one JSON object, times in milliseconds")


_HEAD = """gpu h100 { product "NVIDIA-H100-80GB-HBM3" memory 80Gi }
gpu l4 { product "NVIDIA-L4" memory 24Gi }
topology fabric {
  block "topology.acme.io/block"
  rack "topology.acme.io/rack"
  host "kubernetes.io/hostname"
}
priority bench-default 100 default
agents {
  identity user matches "system:serviceaccount:agents-*:*" or "acme:agents" in groups
  allow create, delete pods when namespace == "agents-sandbox" and gpus <= 0.25
  deny when privileged or host_path "agents may not escalate"
}
"""

_BLOCKS = (
    'quota team-{i} {{\n  for namespace matches "team-{i}*"\n  cohort c{c}\n  gpus {g}\n  gpus {h} of h100\n  gpu_memory 2Ti\n  borrow 8\n}}\n',
    'rule r-{i} {{\n  mode warn\n  for labels["app.kubernetes.io/component"] == "inference-{i}"\n  when gpus > 0 and not has(annotations["acme.io/vram-floor"])\n  deny "pod {{name}} holds {{gpus}} GPUs"\n}}\n',
    'fraction f-{i} {{\n  for namespace matches "inference-{i}-*"\n  min 0.1\n  max 0.5\n  memory at least 10Gi\n  per_gpu at most 4\n}}\n',
    'gang g-{i} {{\n  for labels["acme.io/workload"] == "training-{i}"\n  require min_members\n  require topology fabric.rack when total_gpus > 8\n  require topology fabric.block when total_gpus > 64\n  on unplaceable deny\n}}\n',
    'priority p-{i} {i}\n',
    'rule label-{i} {{\n  for gpus > 0 and not ("team" in labels) and namespace == "ns-{i}"\n  set labels["team"] = namespace.labels["team"]\n}}\n',
)


def generate(n: int, files: int) -> list[tuple[str, str]]:
    """A realistic mix of N blocks (the shared head counts toward N) spread over `files` files."""
    blocks = [_HEAD]
    for i in range(max(n - 7, 0)):
        blocks.append(_BLOCKS[i % len(_BLOCKS)].format(i=i, c=i // 12, g=32 + i % 8, h=16))
    files = max(1, min(files, len(blocks)))
    per = -(-len(blocks) // files)
    return [(f"bench/{k:03d}.policy", "\n".join(blocks[k * per : (k + 1) * per])) for k in range(files) if blocks[k * per : (k + 1) * per]]


def _median_ms(samples: list[float]) -> float:
    return round(statistics.median(samples) * 1000, 2)


def run(args) -> int:
    """Print parse, check and total times (median of --repeat) against the budget and a raw-lark baseline."""
    from lang import check, parse
    from webhook.errors import UsageError

    if args.blocks < 1 or args.blocks > 1_000_000 or args.repeat < 1:
        raise UsageError("N must be 1..1000000 and --repeat at least 1")
    sources = generate(args.blocks, args.files)
    raw, parsed, checked, cpu = [], [], [], []
    errors = 0
    from lang.parser import bare_parser

    lark_parser = bare_parser()  # baseline: lark alone on the same grammar, plain trees
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        for _path, text in sources:
            lark_parser.parse(text)
        t1 = time.perf_counter()
        c1 = time.process_time()
        files = [parse(text, path)[0] for path, text in sources]
        t2 = time.perf_counter()
        diags = check(files)
        t3 = time.perf_counter()
        cpu.append(time.process_time() - c1)
        raw.append(t1 - t0)
        parsed.append(t2 - t1)
        checked.append(t3 - t2)
        errors = sum(d.severity == "error" for d in diags)
    total = [p + c for p, c in zip(parsed, checked)]
    budget = BUDGET_MS_PER_1000 * args.blocks / 1000
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0
    result = {
        "blocks": args.blocks,
        "files": len(sources),
        "lines": sum(t.count("\n") for _, t in sources),
        "repeat": args.repeat,
        "parse_ms": _median_ms(parsed),
        "check_ms": _median_ms(checked),
        "total_ms": _median_ms(total),
        "budget_ms": budget,
        "total_cpu_ms": _median_ms(cpu),
        "within_budget": _median_ms(total) <= budget,
        "within_budget_cpu": _median_ms(cpu) <= budget,
        "load_average": round(load, 2),
        "cores": os.cpu_count(),
        "baseline_lark_parse_ms": _median_ms(raw),
        "ratio_total_to_baseline": round(statistics.median(total) / max(statistics.median(raw), 1e-9), 2),
        "errors": errors,
    }
    if args.json:
        print(json.dumps(result))
    else:
        print(f"allot bench check: {result['blocks']} blocks in {result['files']} files ({result['lines']} lines), median of {args.repeat}")
        print(f"  parse   {result['parse_ms']:10.2f} ms")
        print(f"  check   {result['check_ms']:10.2f} ms")
        print(f"  total   {result['total_ms']:10.2f} ms   budget {budget:.0f} ms: {'OK' if result['within_budget'] else 'OVER BUDGET'}")
        print(f"  cpu     {result['total_cpu_ms']:10.2f} ms   (process CPU time: {'OK' if result['within_budget_cpu'] else 'OVER BUDGET'}; load average {load:.2f} on {os.cpu_count()} cores)")
        print(f"  baseline: bare lark tree parse {result['baseline_lark_parse_ms']:.2f} ms; total is {result['ratio_total_to_baseline']}x of it")
        if errors:
            print(f"  warning: the generated set has {errors} errors (generator out of step with the checker)")
    if load > (os.cpu_count() or 1):
        print("  note: the machine is busier than its core count; wall times are inflated, CPU time is the fairer figure", file=sys.stderr)
    return 0 if (result["within_budget"] or result["within_budget_cpu"]) and not errors else 1
