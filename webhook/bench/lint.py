"""`allot bench lint [N]`: `allot lint` over a generated repository of N manifests, beside `allot check` on the same set.

The repository holds Deployments, Jobs and JobSets (GPU and CPU-only, some with findings),
one object per file in team directories, plus a few multi-document files; the policy set
is `allot bench check`'s generated one (or --policy DIR). Both commands run as the user
runs them, in a child process, so start-up and imports count. Budget: 5,000 manifests <= 10 s.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

BUDGET_S_PER_5000 = 10.0

_DEPLOYMENT = """# serving replicas of team {t}
apiVersion: apps/v1
kind: Deployment
metadata:
  name: infer-{i}
  namespace: {ns}
  labels:
    app.kubernetes.io/component: inference-{c}
spec:
  replicas: {r}
  selector:
    matchLabels: {{app: infer-{i}}}
  template:
    metadata:
      labels: {{app: infer-{i}}}
    spec:
      nodeSelector:
        nvidia.com/gpu.product: NVIDIA-L4
      containers:
      - name: server
        image: registry.example/infer:{i}
        args: ["--port", "8080"]
        resources:
          limits:
            cpu: "4"
            memory: 16Gi
            nvidia.com/gpu: "{g}"
"""

_JOB = """apiVersion: batch/v1
kind: Job
metadata:
  name: batch-{i}
  namespace: {ns}
spec:
  parallelism: {r}
  completions: {r}
  template:
    spec:
      restartPolicy: Never
      containers:
      - name: work
        image: registry.example/batch:{i}
        resources:
          requests: {{cpu: "2", memory: 8Gi}}
          limits: {{nvidia.com/gpu: "{g}"}}
"""

_JOBSET = """apiVersion: jobset.x-k8s.io/v1alpha2
kind: JobSet
metadata:
  name: train-{i}
  namespace: {ns}
  labels:
    acme.io/workload: training-{c}
spec:
  replicatedJobs:
  - name: workers
    replicas: {r}
    template:
      spec:
        parallelism: 2
        completions: 2
        template:
          spec:
            nodeSelector:
              nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3
            containers:
            - name: trainer
              image: registry.example/train:{i}
              resources:
                limits: {{nvidia.com/gpu: "{g}"}}
"""

_CONFIGMAP = """---
apiVersion: v1
kind: ConfigMap
metadata:
  name: settings-{i}
  namespace: {ns}
data:
  level: info
"""


def add_arguments(parser) -> None:
    """Manifests, repeats, policy, --json."""
    parser.add_argument("manifests", type=int, nargs="?", default=5000, metavar="N", help="manifests to generate (default 5000)")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each command; the median is reported (default 3)")
    parser.add_argument("--blocks", type=int, default=200, help="blocks of the generated policy set (default 200)")
    parser.add_argument("--policy", metavar="DIR", help="lint and check this policy directory instead of a generated one")
    parser.add_argument("--json", action="store_true", help="print one JSON object, times in seconds")


def generate_manifests(root: str, n: int) -> int:
    """Write N manifests under `root` (one per file; every 50th file also carries a ConfigMap); returns files written."""
    templates = (_DEPLOYMENT, _JOB, _JOBSET)
    files = 0
    for i in range(n):
        team = i % 20
        ns = (f"team-{team}", f"inference-{team}-chat", f"ns-{team}")[i % 3]
        text = templates[i % 3].format(i=i, t=team, ns=ns, c=i % 40, r=1 + i % 4, g=(0, 1, 2, 4)[i % 4])
        if i % 50 == 49:
            text += _CONFIGMAP.format(i=i, ns=ns)
        d = os.path.join(root, f"team-{team}", ("serving", "batch", "training")[i % 3])
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, f"m{i:05d}.yaml"), "w", encoding="utf-8") as fh:
            fh.write(text)
        files += 1
    return files


def _time(argv: list[str], env: dict) -> tuple[float, float, int, str]:
    """(wall s, CPU s of the child and its workers, exit code, last line of output)."""
    import resource

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    last = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else proc.stderr.strip()[:300]
    return wall, cpu, proc.returncode, last


def run(args) -> int:
    """Print lint and check wall times (median of --repeat), the budget and the ratio."""
    from webhook.bench.check import generate
    from webhook.errors import UsageError

    if not 1 <= args.manifests <= 200_000 or args.repeat < 1 or args.blocks < 8:
        raise UsageError("N must be 1..200000, --repeat at least 1, --blocks at least 8")
    env = dict(os.environ)
    here = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["PYTHONPATH"] = here + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    with tempfile.TemporaryDirectory(prefix="allot-bench-lint-") as tmp:
        policy = args.policy
        if policy is None:
            policy = os.path.join(tmp, "policy")
            for path, text in generate(args.blocks, 4):
                full = os.path.join(policy, path)
                os.makedirs(os.path.dirname(full), exist_ok=True)
                with open(full, "w", encoding="utf-8") as fh:
                    fh.write(text)
        repo = os.path.join(tmp, "repo")
        files = generate_manifests(repo, args.manifests)
        allot = [sys.executable, "-m", "webhook"]
        lint_t, check_t, lint_cpu, check_cpu = [], [], [], []
        lint_rc = check_rc = 0
        lint_line = check_line = ""
        for _ in range(args.repeat):
            t, c, lint_rc, lint_line = _time([*allot, "lint", "--policy", policy, "--now", "0", repo], env)
            lint_t.append(t)
            lint_cpu.append(c)
            t, c, check_rc, check_line = _time([*allot, "check", policy], env)
            check_t.append(t)
            check_cpu.append(c)
    lint_s, check_s = statistics.median(lint_t), statistics.median(check_t)
    lint_c, check_c = statistics.median(lint_cpu), statistics.median(check_cpu)
    budget = BUDGET_S_PER_5000 * args.manifests / 5000
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0
    result = {
        "manifests": args.manifests, "files": files, "repeat": args.repeat, "policy": args.policy or f"generated ({args.blocks} blocks)",
        "lint_s": round(lint_s, 3), "check_s": round(check_s, 3), "ratio_lint_to_check": round(lint_s / max(check_s, 1e-9), 2),
        "per_manifest_ms": round(1000 * lint_s / args.manifests, 3), "budget_s": budget, "within_budget": lint_s <= budget,
        "lint_cpu_s": round(lint_c, 3), "check_cpu_s": round(check_c, 3), "within_budget_cpu": lint_c <= budget,
        "lint_exit": lint_rc, "check_exit": check_rc, "lint_summary": lint_line, "check_summary": check_line,
        "load_average": round(load, 2), "cores": os.cpu_count(),
    }
    if args.json:
        print(json.dumps(result))
    else:
        print(f"allot bench lint: {args.manifests} manifests in {files} files, policy {result['policy']}, median of {args.repeat}")
        print(f"  lint    {lint_s:8.3f} s   ({result['per_manifest_ms']:.3f} ms per manifest)   budget {budget:.1f} s: "
              f"{'OK' if result['within_budget'] else 'OVER BUDGET'}")
        print(f"  check   {check_s:8.3f} s   (the same policy set)")
        print(f"  cpu     lint {lint_c:.3f} s, check {check_c:.3f} s   (process CPU time, workers included: "
              f"{'OK' if result['within_budget_cpu'] else 'OVER BUDGET'}; load average {load:.2f} on {os.cpu_count()} cores)")
        print(f"  ratio   lint is {result['ratio_lint_to_check']}x check")
        print(f"  lint:  exit {lint_rc}: {lint_line}")
        print(f"  check: exit {check_rc}: {check_line}")
    if load > (os.cpu_count() or 1):
        print("  note: the machine is busier than its core count; wall times are inflated", file=sys.stderr)
    return 0 if (result["within_budget"] or result["within_budget_cpu"]) and lint_rc in (0, 1) and check_rc == 0 else 1
