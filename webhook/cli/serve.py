"""`allot serve`: run the admission webhook over HTTPS until SIGTERM/SIGINT."""

from __future__ import annotations

import argparse
import os
import re
import sys

from webhook.errors import UsageError


def add_arguments(parser) -> None:
    """Policy, cluster state, listener, TLS and failure options."""
    src = parser.add_argument_group("policy (one of)")
    src.add_argument("--policy", metavar="DIR", help="directory (or file) of .policy sources, reloaded on change")
    src.add_argument("--bundle", metavar="FILE", help="signed policy bundle (see `allot bundle`), reloaded on change")
    src.add_argument("--trust", metavar="PUB", nargs="+", default=[], help="public key(s) a bundle must be signed by")
    cl = parser.add_argument_group("cluster state (one of)")
    cl.add_argument("--cluster", metavar="FILE", help="snapshot from a `kubectl get -o yaml` List (no watching)")
    cl.add_argument("--kubeconfig", metavar="FILE", help="list and watch a cluster through this kubeconfig")
    cl.add_argument("--in-cluster", action="store_true", help="list and watch with the Pod's service account "
                    "(the default when running in a Pod and neither --cluster nor --kubeconfig is given)")
    net = parser.add_argument_group("listener and TLS")
    net.add_argument("--host", default="0.0.0.0", help="address to listen on (default 0.0.0.0)")
    net.add_argument("--port", type=int, default=8443, help="port (default 8443; 0 picks a free one)")
    net.add_argument("--workers", type=int, default=1, metavar="N",
                     help="N processes on one port (SO_REUSEPORT), each a replica of the --ledger (default 1)")
    net.add_argument("--reuse-port", action="store_true", help=argparse.SUPPRESS)  # set on the workers --workers starts
    net.add_argument("--tls-cert", metavar="FILE", help="serving certificate (PEM), reloaded when it changes")
    net.add_argument("--tls-key", metavar="FILE", help="its private key (PEM)")
    net.add_argument("--self-signed", action="store_true", help="generate a CA and a serving certificate; prints the CA path")
    net.add_argument("--certs-dir", metavar="DIR", help="where --self-signed writes ca.crt, tls.crt, tls.key (default: a temp dir)")
    beh = parser.add_argument_group("behaviour")
    beh.add_argument("--on-error", choices=("allow", "deny"), default="deny",
                     help="answer when a decision fails or would miss the API server's timeout (default deny)")
    beh.add_argument("--ledger", metavar="NAMESPACE",
                     help="share quota holds between replicas through ConfigMaps in NAMESPACE "
                          "(compare-and-swap before every reserving 'allowed'; needs --kubeconfig or in-cluster)")
    escrow = beh.add_mutually_exclusive_group()
    escrow.add_argument("--ledger-escrow", action="store_true",
                        help="with --ledger (the default): each replica keeps a slice of a quota's free capacity in the "
                             "ledger and admits inside it without a write per pod, giving it back when another replica "
                             "needs it (docs/escrow.md); overrides ALLOT_LEDGER_ESCROW=0")
    escrow.add_argument("--no-ledger-escrow", action="store_true",
                        help="with --ledger: no slices, every reserving 'allowed' waits for its own compare-and-swap "
                             "(ALLOT_LEDGER_ESCROW=0 in the environment does the same)")
    beh.add_argument("--peer-address", metavar="HOST",
                     help="with --ledger and escrow: listen on HOST (a port of this process's own, advertised in the "
                          "ledger) for the peer channel, so a request only another replica's slice denies is decided "
                          "by that replica with no API write; replicas must share --tls-cert/--tls-key (in a Pod: "
                          "$(POD_IP); docs/escrow.md, The peer channel)")
    beh.add_argument("--reclaim", choices=("off", "audit", "on"), default="off",
                     help="carry out admitted reclaim and preemption plans (docs/reclaim.md): 'on' records each plan and "
                          "the replica holding the Lease evicts or suspends its victims; 'audit' logs plans and evicts "
                          "nothing (default off; needs --kubeconfig or in-cluster)")
    beh.add_argument("--reclaim-namespace", metavar="NAMESPACE",
                     help="where plan records and the reclaim Lease live (default: the --ledger namespace, else allot-system)")
    beh.add_argument("--reclaim-lease", type=float, default=15.0, metavar="S",
                     help="seconds a reclaim leader's Lease lasts unrenewed (default 15; renewed every S/7.5)")
    beh.add_argument("--mode", choices=("audit", "warn"), help="override every block's mode, for safe rollouts")
    beh.add_argument("--decision-log", metavar="FILE", default="-", help="JSON lines, one per decision ('-' stdout, 'off' none)")
    beh.add_argument("--log-requests", action="store_true", help="include each AdmissionReview request in its log line (replayable)")
    beh.add_argument("--max-body", type=int, metavar="BYTES", help="largest request body accepted (default 7 MiB)")
    beh.add_argument("--reload-interval", type=float, default=2.0, metavar="S", help="seconds between policy/cert change checks")


def options_from(args, decision_log):
    """ServeOptions from parsed arguments; UsageError for contradictions."""
    from webhook.server.serving import ServeOptions, env_in_cluster
    from webhook.server.state import DEFAULT_MAX_BODY

    in_cluster = args.in_cluster or (not args.cluster and not args.kubeconfig and env_in_cluster())
    if not (args.cluster or args.kubeconfig or in_cluster):
        raise UsageError("give --cluster FILE or --kubeconfig FILE (or run in a Pod for in-cluster config)")
    if args.ledger is not None and (args.cluster or not re.fullmatch(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", args.ledger)):
        raise UsageError(f"--ledger {args.ledger}: give a namespace name, with --kubeconfig or in-cluster (not --cluster)")
    if (args.ledger_escrow or args.no_ledger_escrow) and args.ledger is None:
        flag = "--ledger-escrow" if args.ledger_escrow else "--no-ledger-escrow"
        raise UsageError(f"{flag} needs --ledger NAMESPACE (slices are claimed in the ledger's shards)")
    # Escrow is the default with --ledger: it is what meets the ledger's 1,000 pods/s (docs/escrow.md);
    # ALLOT_LEDGER_ESCROW=0 in the environment turns it off where no flag says otherwise.
    escrow = args.ledger_escrow or (not args.no_ledger_escrow and os.environ.get("ALLOT_LEDGER_ESCROW", "") != "0")
    if args.workers < 1 or args.workers > 64:
        raise UsageError(f"--workers {args.workers}: give 1 to 64 processes")
    if args.workers > 1 and (not args.ledger or args.port == 0 or args.self_signed):
        raise UsageError("--workers N > 1 needs --ledger (each worker is a replica: only the shared ledger makes their "
                         "holds add up), a fixed --port and --tls-cert/--tls-key (one certificate for every worker)")
    if args.peer_address is not None:
        import ipaddress

        if args.ledger is None or not escrow or args.self_signed:
            raise UsageError("--peer-address needs --ledger NAMESPACE with escrow (the channel lends slices) and "
                             "--tls-cert/--tls-key shared by the replicas (they prove each other with it)")
        try:
            ipaddress.ip_address(args.peer_address)
        except ValueError:
            raise UsageError(f"--peer-address {args.peer_address}: give the IP address other replicas reach this one at "
                             "(in a Pod: $(POD_IP) from the downward API)") from None
    if args.reclaim != "off" and args.cluster:
        raise UsageError(f"--reclaim {args.reclaim}: plans are carried out through the Kubernetes API; give --kubeconfig or in-cluster")
    if args.reclaim_namespace is not None and not re.fullmatch(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", args.reclaim_namespace):
        raise UsageError(f"--reclaim-namespace {args.reclaim_namespace}: give a namespace name")
    if not (1 <= args.reclaim_lease <= 3600):  # (refuses nan too)
        raise UsageError(f"--reclaim-lease {args.reclaim_lease}: give 1 to 3600 seconds")
    if not 0 <= args.port <= 65535:
        raise UsageError(f"--port {args.port} is not a port")
    if args.max_body is not None and args.max_body < 1:
        raise UsageError(f"--max-body {args.max_body}: give a positive number of bytes")
    if not (0 < args.reload_interval < float("inf")):  # also refuses nan: a poll loop needs a real interval
        raise UsageError(f"--reload-interval {args.reload_interval}: give a positive number of seconds")
    return ServeOptions(
        policy=args.policy, bundle=args.bundle, trust=tuple(args.trust), cluster=args.cluster,
        kubeconfig=args.kubeconfig, in_cluster=in_cluster and not (args.cluster or args.kubeconfig),
        host=args.host, port=args.port, tls_cert=args.tls_cert, tls_key=args.tls_key,
        self_signed=args.self_signed, certs_dir=args.certs_dir, on_error=args.on_error, mode=args.mode,
        reload_interval=args.reload_interval, tls_interval=args.reload_interval, decision_log=decision_log,
        log_requests=args.log_requests, max_body=args.max_body or DEFAULT_MAX_BODY, ledger=args.ledger,
        ledger_escrow=escrow, reuse_port=args.reuse_port or args.workers > 1, peer_address=args.peer_address,
        reclaim=args.reclaim, reclaim_namespace=args.reclaim_namespace, reclaim_lease=args.reclaim_lease,
    )


def open_log(target: str):
    """The decision-log stream for `--decision-log`."""
    if target == "-":
        return sys.stdout
    if target == "off":
        return None
    try:
        return open(target, "ab", buffering=0)  # noqa: SIM115 - lives as long as the server
    except OSError as exc:
        raise UsageError(f"--decision-log {target}: {exc.strerror}") from None


SWITCH_INTERVAL = 0.001  # seconds a thread holds the GIL before another may take it (Python's default: 0.005)


def run_loop(main) -> None:
    """Run `main()` on uvloop when installed (markedly faster TLS and HTTP), else asyncio."""
    try:
        import uvloop

        uvloop.run(main())
    except ImportError:
        import asyncio

        asyncio.run(main())


def run(args) -> int:
    """Start, print where, serve until a signal."""
    import asyncio
    import logging
    import signal

    from webhook.server.serving import StartError, start

    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    opts = options_from(args, open_log(args.decision_log))
    # Ledger writes and watches run in threads: on a busy loop each of their GIL hand-offs waited up to
    # the default 5 ms (a write makes several). Measured with bench ledger: median added p99 28.5 -> 21.2 ms.
    sys.setswitchinterval(SWITCH_INTERVAL)
    outcome = {"code": 0}
    workers = start_workers(getattr(args, "_argv", sys.argv[1:]), args.workers - 1)

    async def main() -> None:
        try:
            running = await start(opts)
        except StartError as exc:
            print(f"allot serve: error: {exc}", file=sys.stderr)
            outcome["code"] = 2
            return
        if running.ca_path:
            print(f"allot serve: CA certificate: {running.ca_path}", file=sys.stderr)
        sys.stderr.write(f"allot serve: listening on https://{opts.host}:{running.port}\n")  # one write: log lines from other threads cannot split it
        sys.stderr.flush()
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
        await running.stop()

    try:
        run_loop(main)
    finally:
        stop_workers(workers)
    return outcome["code"]


def start_workers(argv_in: list[str], count: int) -> list:
    """`count` more `allot serve` processes with this one's arguments, sharing its port through SO_REUSEPORT."""
    import subprocess

    if count <= 0:
        return []
    argv, skip = [], False
    for a in argv_in:
        if skip:
            skip = False
        elif a == "--workers":
            skip = True
        elif not a.startswith("--workers="):
            argv.append(a)
    return [subprocess.Popen([sys.executable, "-m", "webhook", *argv, "--reuse-port"]) for _ in range(count)]


def stop_workers(workers: list) -> None:
    """SIGTERM every worker (they drain like this process), then wait for them."""
    import subprocess

    for w in workers:
        if w.poll() is None:
            w.terminate()
    for w in workers:
        try:
            w.wait(timeout=20)
        except subprocess.TimeoutExpired:
            w.kill()
