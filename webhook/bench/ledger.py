"""`allot bench ledger`: two (or `--replicas N`) `allot serve --ledger` replicas against one quota, through the API double.

    allot bench ledger [--quota N] [--concurrency C] [--replicas R] [--escrow | --no-escrow] [--json]

The Kubernetes API double starts (webhook/bench/apidouble.py, plain HTTP on loopback;
or `--kubeconfig` a real API server), then R `allot serve --kubeconfig ... --ledger allot-system`
replicas watching it (default 2; more shows how the 409 rate grows with the writers of one shard).
This process sends 1-GPU pod CREATEs to all of them at once over TLS.
Phase 1 (stateless): the same pods with `dryRun: true` decide the quota but hold
nothing, so they write nothing (the double's write counter must not move); their p99
is the baseline. Phase 2 (stateful): 1.25x the quota in real creates; exactly
`--quota` must be admitted. Figures: admitted GPU pods/s across the replicas, p99
of stateful decisions minus the stateless p99 (the ledger's cost), over-admissions.
Budget: >= 1,000 admitted/s, <= 20 ms added p99, 0 over-admitted, 0 writes when stateless.
"""

from __future__ import annotations

import asyncio
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid

from webhook.bench.serve import wait_port

BUDGET_RATE = 1000.0
BUDGET_P99_MS = 20.0
NS = "allot-system"


def add_arguments(parser) -> None:
    """Options of the ledger benchmark."""
    parser.add_argument("--quota", type=int, default=2000, help="GPUs in the one quota; 1.25x as many pods are sent (default 2000)")
    parser.add_argument("--concurrency", type=int, default=16, help="connections per replica (default 16)")
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--escrow", dest="escrow", action="store_true", default=True,
                       help="replicas run with --ledger-escrow (serve's default): they keep slices of the quota and admit inside them")
    group.add_argument("--no-escrow", dest="escrow", action="store_false",
                       help="replicas run with --no-ledger-escrow: a compare-and-swap per admission")
    peers = parser.add_mutually_exclusive_group()
    peers.add_argument("--peers", dest="peers", action="store_true", default=True,
                       help="with escrow (the default): replicas run with --peer-address 127.0.0.1, so a denial only "
                            "another replica's slice stands behind is asked of it directly")
    peers.add_argument("--no-peers", dest="peers", action="store_false",
                       help="no peer channel: such a denial writes a want and waits for the holder's answer in the API")
    parser.add_argument("--replicas", type=int, default=2, help="replicas writing the one shard, 2..4 (default 2)")
    parser.add_argument("--kubeconfig", metavar="FILE",
                        help="a real API server instead of the double (the ledger goes to a fresh namespace, deleted after)")
    parser.add_argument("--json", action="store_true", help="print one JSON object (times in milliseconds)")


def _kubeconfig(path: pathlib.Path, port: int) -> None:
    path.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: double\n"
        f"clusters: [{{name: double, cluster: {{server: 'http://127.0.0.1:{port}'}}}}]\n"
        "users: [{name: bench, user: {token: bench}}]\n"
        "contexts: [{name: double, context: {cluster: double, user: bench, namespace: default}}]\n"
    )


def _counters(ports: list[int], ctx) -> dict:
    """Ledger writes, conflicts, seconds spent in successful writes and the commit/want wait histograms, summed over the replicas."""
    out = {"writes": 0, "conflicts": 0, "write_seconds": 0.0, "background": 0, "waits": {}, "peer": {}}
    for port in ports:
        with urllib.request.urlopen(f"https://127.0.0.1:{port}/metrics", context=ctx, timeout=10) as r:
            for line in r.read().decode().splitlines():
                if line.startswith('allot_ledger_writes_total{result="ok"}'):
                    out["writes"] += int(float(line.rsplit(" ", 1)[1]))
                elif line.startswith('allot_ledger_writes_total{result="conflict"}'):
                    out["conflicts"] += int(float(line.rsplit(" ", 1)[1]))
                elif line.startswith('allot_ledger_slice_events_total{event="background_write"}'):
                    out["background"] += int(float(line.rsplit(" ", 1)[1]))
                elif line.startswith("allot_ledger_peer_asks_total{"):
                    result = line[line.index('"') + 1:line.rindex('"')]
                    out["peer"][result] = out["peer"].get(result, 0) + int(float(line.rsplit(" ", 1)[1]))
                elif line.startswith("allot_ledger_write_seconds_sum"):
                    out["write_seconds"] += float(line.rsplit(" ", 1)[1])
                elif line.startswith(("allot_ledger_commit_seconds_bucket{", "allot_ledger_want_seconds_bucket{",
                                      "allot_ledger_peer_wait_seconds_bucket{", "allot_ledger_request_seconds_bucket{")):
                    labels, value = line[line.index("{") + 1:].rsplit("} ", 1)
                    fields = dict(kv.split("=", 1) for kv in labels.split(","))
                    what = {"allot_ledger_want": "want ", "allot_ledger_peer": "peer ",
                            "allot_ledger_requ": "request (all waits)"}.get(line[:17], "") + (
                        fields.get("path") or fields.get("result") or "").strip('"')
                    le = fields["le"].strip('"')
                    per = out["waits"].setdefault(what, {})
                    per[le] = per.get(le, 0) + int(float(value))
    return out


def _waits(before: dict, after: dict) -> dict:
    """Per commit path (and want result): how many waited, and how many more than 20 / 50 / 100 ms, in the phase."""
    out = {}
    for what, per in after.items():
        old = before.get(what, {})
        n = per.get("+Inf", 0) - old.get("+Inf", 0)
        if n <= 0:
            continue

        over = {le: n - (per.get(le, 0) - old.get(le, 0)) for le in ("0.02", "0.05", "0.1")}
        out[what] = {"n": n, "over_20ms": over["0.02"], "over_50ms": over["0.05"], "over_100ms": over["0.1"]}
    return out


def _ready(port: int, ctx, limit: float = 60.0) -> None:
    end = time.monotonic() + limit
    while time.monotonic() < end:
        try:
            with urllib.request.urlopen(f"https://127.0.0.1:{port}/readyz", context=ctx, timeout=5) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"replica on port {port} did not become ready")


def _body(name: str, dry_run: bool) -> bytes:
    import orjson

    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "team-a"},
           "spec": {"containers": [{"name": "m", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}
    req = {"uid": str(uuid.uuid4()), "kind": {"group": "", "version": "v1", "kind": "Pod"},
           "resource": {"group": "", "version": "v1", "resource": "pods"}, "name": name, "namespace": "team-a",
           "operation": "CREATE", "userInfo": {"username": "bench"}, "object": pod, "oldObject": None, "dryRun": dry_run}
    return orjson.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": req})


async def _load(ports: list[int], ctx, bodies: list[bytes], concurrency: int) -> dict:
    """Send `bodies` split across the replicas over keep-alive connections; allowed count, latencies, wall."""
    from webhook.bench.loadgen import _read_response, encode_post

    queue = list(reversed([encode_post("/validate?timeout=10s", b) for b in bodies]))
    latencies: list[float] = []
    allowed = 0

    async def worker(port: int) -> None:
        nonlocal allowed
        reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=ctx, server_hostname="localhost")
        try:
            while queue:
                data = queue.pop()
                t = time.perf_counter()
                writer.write(data)
                status, body = await _read_response(reader)
                latencies.append(time.perf_counter() - t)
                if status != 200:
                    raise RuntimeError(f"HTTP {status}: {body[:200]!r}")
                allowed += b'"allowed":true' in body
        finally:
            writer.close()

    t0 = time.perf_counter()
    await asyncio.gather(*(worker(p) for p in ports for _ in range(concurrency)))
    wall = time.perf_counter() - t0
    latencies.sort()

    def pct(p: float) -> float:
        return latencies[min(len(latencies) - 1, int(p * len(latencies)))] * 1000

    return {"requests": len(bodies), "allowed": allowed, "seconds": wall, "p50_ms": pct(0.5), "p99_ms": pct(0.99)}


def run(args) -> int:
    """Start the double and the replicas, run the stateless then the stateful phase, print figures."""
    from webhook.errors import UsageError
    from webhook.server.serving import self_signed
    from webhook.server.tls import client_context

    if args.quota < 10 or args.quota > 3500 or args.concurrency < 1:
        raise UsageError("--quota must be 10..3500 (one ledger shard holds 4000) and --concurrency at least 1")
    if not 2 <= args.replicas <= 4:
        raise UsageError(f"--replicas {args.replicas}: give 2 to 4 (one replica has no one to conflict with; "
                         "more than 4 only oversubscribes the cores)")
    work = pathlib.Path(tempfile.mkdtemp(prefix="allot-bench-ledger-"))
    cert, key, ca = self_signed(str(work / "certs"), "127.0.0.1")
    ctx = client_context(ca)
    pdir = work / "policies"
    pdir.mkdir()
    (pdir / "q.policy").write_text(f'quota team-a {{\n  for namespace matches "team-a*"\n  gpus {args.quota}\n}}\n')
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    procs: list[subprocess.Popen] = []
    ledger_ns, core = NS, None
    kubeconfig = args.kubeconfig or str(work / "kubeconfig")
    try:
        if args.kubeconfig:  # a real API server: a namespace of its own, so no earlier run's holds count
            from webhook.server.watch import api_client_from
            from kubernetes import client

            ledger_ns = f"allot-bench-{uuid.uuid4().hex[:6]}"
            core = client.CoreV1Api(api_client_from(args.kubeconfig))
            core.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ledger_ns}})
        else:
            derr = work / "double.err"
            with open(derr, "w") as fe:
                double = subprocess.Popen([sys.executable, "-m", "webhook.bench.apidouble"], stdout=subprocess.DEVNULL,
                                          stderr=fe, env=env)
            procs.append(double)
            dport = wait_port(derr, double, "api double listening on")
            _kubeconfig(work / "kubeconfig", dport)
        ports = []
        for i in range(args.replicas):
            err = work / f"replica{i}.err"
            with open(err, "w") as fe:
                procs.append(subprocess.Popen(
                    [sys.executable, "-m", "webhook", "serve", "--policy", str(pdir), "--kubeconfig", kubeconfig,
                     "--ledger", ledger_ns, "--tls-cert", cert, "--tls-key", key, "--host", "127.0.0.1", "--port", "0",
                     "--decision-log", "off", "--ledger-escrow" if args.escrow else "--no-ledger-escrow",
                     *(["--peer-address", "127.0.0.1"] if args.escrow and args.peers else [])],
                    stdout=subprocess.DEVNULL, stderr=fe, env=env))
            ports.append(wait_port(err, procs[-1], "allot serve: listening on"))
        for p in ports:
            _ready(p, ctx)
        from webhook.cli.serve import run_loop

        out: dict = {}

        async def main() -> None:
            await _load(ports, ctx, [_body(f"w{i}", True) for i in range(400)], args.concurrency)  # warm-up
            w0 = _counters(ports, ctx)
            out["stateless"] = await _load(ports, ctx, [_body(f"d{i}", True) for i in range(args.quota)], args.concurrency)
            w1 = _counters(ports, ctx)
            # Writes carrying a hold: none may come from a dryRun decision. (Escrow's keeper renews
            # slices in the background meanwhile: writes with no hold, counted apart.)
            out["stateless"]["background"] = w1["background"] - w0["background"]
            out["stateless"]["writes"] = w1["writes"] - w0["writes"] - out["stateless"]["background"]
            c0 = _counters(ports, ctx)
            sent = args.quota + args.quota // 4
            out["stateful"] = await _load(ports, ctx, [_body(f"p{i}", False) for i in range(sent)], args.concurrency)
            c1 = _counters(ports, ctx)
            out["stateful"]["writes"] = c1["writes"] - c0["writes"]
            out["stateful"]["background"] = c1["background"] - c0["background"]
            out["stateful"]["conflicts"] = c1["conflicts"] - c0["conflicts"]
            out["stateful"]["write_seconds"] = c1["write_seconds"] - c0["write_seconds"]
            out["stateful"]["waits"] = _waits(c0["waits"], c1["waits"])
            out["stateful"]["peer"] = {k: v - c0["peer"].get(k, 0) for k, v in c1["peer"].items() if v - c0["peer"].get(k, 0)}

        run_loop(main)
    except Exception as exc:  # noqa: BLE001 - a process that would not start, an API server that refused
        print(f"allot bench ledger: error: {type(exc).__name__}: {str(exc)[:500]} (processes' stderr in {work})",
              file=sys.stderr)
        work = None  # kept for a look
        return 1
    finally:
        if core is not None:
            try:
                core.delete_namespace(ledger_ns)
            except Exception:  # noqa: BLE001 - best effort: the namespace only holds this run's ledger
                pass
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
        if work is not None:
            shutil.rmtree(work, ignore_errors=True)  # certificates, policy, the replicas' stderr: nothing to keep
    st, sf = out["stateless"], out["stateful"]
    admitted = sf["allowed"]
    figures = {
        "quota": args.quota, "replicas": args.replicas, "escrow": args.escrow, "sent": sf["requests"], "admitted": admitted,
        "over_admitted": max(0, admitted - args.quota), "under_admitted": max(0, args.quota - admitted),
        "admitted_per_s": admitted / sf["seconds"] if sf["seconds"] else 0.0,
        "stateful_p50_ms": sf["p50_ms"], "stateful_p99_ms": sf["p99_ms"],
        "stateless_p50_ms": st["p50_ms"], "stateless_p99_ms": st["p99_ms"],
        "added_p99_ms": sf["p99_ms"] - st["p99_ms"],
        "ledger_writes": sf["writes"], "conflicts": sf["conflicts"], "stateless_writes": st["writes"],
        "background_writes": sf["background"], "stateless_background_writes": st["background"],
        "conflict_rate": sf["conflicts"] / max(1, sf["writes"] + sf["conflicts"]),  # 409s among all write attempts
        "holds_per_write": admitted / max(1, sf["writes"]),
        "write_mean_ms": 1000 * sf["write_seconds"] / max(1, sf["writes"]),
        "waits": sf["waits"],  # commits by path, want waits by result: counts over 20 / 50 / 100 ms
        "peers": args.escrow and args.peers, "peer_asks": sf["peer"],  # denials asked of a slice's holder, by result
        "load_average": os.getloadavg()[0],
    }
    ok = (figures["over_admitted"] == 0 and figures["admitted_per_s"] >= BUDGET_RATE
          and figures["added_p99_ms"] <= BUDGET_P99_MS and figures["stateless_writes"] == 0)
    figures["within_budget"] = ok
    if args.json:
        print(json.dumps(figures))
        return 0 if ok else 1
    print(f"allot bench ledger: {args.replicas} replicas, one quota of {args.quota} GPUs, {sf['requests']} 1-GPU pod creates, "
          f"{args.concurrency} connections per replica, {'escrow' if args.escrow else 'no escrow'}{', peer channel' if args.escrow and args.peers else ''} ({'API server ' + args.kubeconfig if args.kubeconfig else 'API double'})")
    print(f"  admitted           {admitted} of {args.quota}  (over-admitted {figures['over_admitted']}, "
          f"under {figures['under_admitted']})")
    print(f"  admitted pods/s    {figures['admitted_per_s']:.0f}   (budget >= {BUDGET_RATE:.0f})")
    print(f"  stateful  p50/p99  {sf['p50_ms']:.2f} / {sf['p99_ms']:.2f} ms   "
          f"({sf['writes']} ledger writes: {figures['holds_per_write']:.1f} holds per write, "
          f"{figures['write_mean_ms']:.1f} ms each)")
    print(f"  409 conflicts      {sf['conflicts']} of {sf['writes'] + sf['conflicts']} write attempts "
          f"({100 * figures['conflict_rate']:.0f} %)")
    print(f"  stateless p50/p99  {st['p50_ms']:.2f} / {st['p99_ms']:.2f} ms   ({st['writes']} ledger writes with a hold; "
          f"{st['background']} background slice writes)")
    print(f"  added p99          {figures['added_p99_ms']:.2f} ms   (budget <= {BUDGET_P99_MS:.0f})")
    for what, w in sorted(sf["waits"].items()):
        print(f"  waited: {what:<14} {w['n']:>5} commits, {w['over_20ms']} over 20 ms, {w['over_50ms']} over 50, "
              f"{w['over_100ms']} over 100")
    if figures["peers"]:
        asks = ", ".join(f"{n} {r}" for r, n in sorted(sf["peer"].items())) or "none"
        print(f"  peer asks          {asks}")
    print(f"  load average       {figures['load_average']:.2f}")
    print("  within budget" if ok else "  OVER BUDGET")
    return 0 if ok else 1
