"""Assemble a running webhook from options: policy, cluster state, TLS, background tasks, the listener.

Shared by `allot serve`, `allot demo` and `allot bench serve` so all three run the
same server.
"""

from __future__ import annotations

import gc
import ipaddress
import logging
import os
import pathlib
import tempfile
from dataclasses import dataclass, field
from typing import IO

from aiohttp import web

from webhook import certs
from webhook.server import app as server, tls
from webhook.server.decisionlog import DecisionLog
from webhook.server.reload import PolicyReloader, PolicySource
from webhook.server.state import DEFAULT_MAX_BODY, State, warm_engine

log = logging.getLogger("allot.serve")


class StartError(Exception):
    """The server cannot start; the message is one line for the operator."""


@dataclass
class ServeOptions:
    """Everything `allot serve` takes, with defaults fit for a Pod in a cluster."""

    policy: str | None = None
    bundle: str | None = None
    trust: tuple[str, ...] = ()
    cluster: str | None = None
    kubeconfig: str | None = None
    in_cluster: bool = False
    host: str = "0.0.0.0"
    port: int = 8443
    tls_cert: str | None = None
    tls_key: str | None = None
    self_signed: bool = False
    certs_dir: str | None = None
    on_error: str = "deny"
    mode: str | None = None
    reload_interval: float = 2.0
    tls_interval: float = 2.0
    decision_log: IO | None = None
    log_requests: bool = False
    buffered_log: bool = True  # flushed every 0.25 s: one write per batch instead of one per request
    max_body: int = DEFAULT_MAX_BODY
    reuse_port: bool = False  # SO_REUSEPORT: `--workers` processes share one port
    ledger: str | None = None  # namespace of the cluster reservation ledger (webhook/ledger/cluster.py); None: holds stay local
    ledger_escrow: bool = True  # slices kept and returned on demand (webhook/ledger/escrow.py); False: a write per admission
    extra_sans: tuple[str, ...] = field(default=())
    peer_address: str | None = None  # the peer channel's listener (a port of its own on this address); None: no channel
    reclaim: str = "off"  # off | audit (plans logged) | on (plans recorded, the Lease holder carries them out): webhook/reclaim
    reclaim_namespace: str | None = None  # where plan records and the Lease live; None: the --ledger namespace, else allot-system
    reclaim_lease: float = 15.0  # leaseDurationSeconds of the reclaim Lease


@dataclass
class Running:
    """A started server: its state, runner (for cleanup), port, and the CA a client should trust."""

    state: State
    runner: web.AppRunner
    port: int
    ca_path: str | None
    tls: tls.ReloadingTLS

    @property
    def url(self) -> str:
        """Base URL on loopback."""
        return f"https://127.0.0.1:{self.port}"

    async def stop(self) -> None:
        """Finish in-flight requests, stop background tasks, close the listener."""
        await self.runner.cleanup()


def self_signed(directory: str | None, host: str, extra: tuple[str, ...] = ()) -> tuple[str, str, str]:
    """(cert, key, ca) paths of a fresh CA and a serving cert for localhost, 127.0.0.1, ::1 and `host`."""
    d = pathlib.Path(directory or tempfile.mkdtemp(prefix="allot-certs-"))
    dns, ips = ["localhost"], ["127.0.0.1", "::1"]
    for name in (host, *extra):
        if name in ("", "0.0.0.0", "::"):
            continue
        try:
            ipaddress.ip_address(name)
            ips.append(name) if name not in ips else None
        except ValueError:
            dns.append(name) if name not in dns else None
    ca_key, ca_cert = certs.generate_ca("allot self-signed CA")
    key, cert = certs.issue_serving_cert(ca_key, ca_cert, dns, ips)
    _, ca_path = certs.write_pem(d, "ca", ca_key, ca_cert)
    key_path, cert_path = certs.write_pem(d, "tls", key, cert)
    return str(cert_path), str(key_path), str(ca_path)


def _policy_source(o: ServeOptions) -> PolicySource:
    if bool(o.policy) == bool(o.bundle):
        raise StartError("give exactly one of --policy DIR or --bundle FILE")
    if o.bundle:
        if not o.trust:
            raise StartError("--bundle needs --trust PUBLIC_KEY (a bundle is only loaded if a trusted key signed it)")
        return PolicySource(o.bundle, bundle=True, trust=tuple(o.trust))
    if o.trust:
        raise StartError("--trust only applies to --bundle")
    return PolicySource(o.policy)


def _load_cluster_file(path: str):
    from webhook.clusterfile import read_cluster_file
    from webhook.errors import UsageError

    try:
        return read_cluster_file(path)  # the one reader: "not UTF-8 text" and an empty file's warning as every command
    except (UsageError, ValueError) as exc:
        raise StartError(str(exc)) from None


def prepare(o: ServeOptions) -> tuple[State, list, tls.ReloadingTLS, str | None]:
    """Validate options, load policy, snapshot and certificates; (state, tasks, tls, ca_path). Raises StartError."""
    source = _policy_source(o)
    sources_of_state = [bool(o.cluster), bool(o.kubeconfig), o.in_cluster]
    if sum(sources_of_state) != 1:
        raise StartError("give exactly one of --cluster FILE, --kubeconfig FILE or --in-cluster")
    if o.reclaim != "off" and o.cluster:
        raise StartError("--reclaim carries plans out through the Kubernetes API: it needs --kubeconfig or --in-cluster")
    if o.ledger and o.cluster:
        raise StartError("--ledger shares holds through the Kubernetes API: it needs --kubeconfig or --in-cluster")
    if o.self_signed == bool(o.tls_cert or o.tls_key):
        raise StartError("give --tls-cert and --tls-key, or --self-signed")
    if not o.self_signed and not (o.tls_cert and o.tls_key):
        raise StartError("--tls-cert and --tls-key go together")
    decisions = DecisionLog(o.decision_log, requests=o.log_requests, buffered=o.buffered_log)
    state = State(on_error=o.on_error, mode=o.mode, log=decisions, max_body=o.max_body)
    reloader = PolicyReloader(state, source, interval=o.reload_interval)
    if not reloader.load_now():
        raise StartError(f"policy set from {source.describe()} rejected: {state.policy.last_error}")
    tasks = [reloader.watch, decisions.flush_periodically]
    if o.cluster:
        state.swap_snapshot(_load_cluster_file(o.cluster), source=f"file {o.cluster}", synced=True)
        state.metrics.cluster_synced.set(1)
    else:
        from policy.cluster.snapshot import ClusterSnapshot
        from webhook.server.watch import ClusterWatcher, api_client_from

        try:
            api = api_client_from(o.kubeconfig)
        except Exception as exc:  # noqa: BLE001 - kubeconfig/in-cluster errors are configuration errors
            raise StartError(f"cannot configure the Kubernetes client: {exc}") from None
        state.swap_snapshot(ClusterSnapshot(), source=o.kubeconfig or "in-cluster", synced=False)
        tasks.append(ClusterWatcher(state, api).run)
        if o.ledger:
            from webhook.ledger import ClusterLedger

            state.ledger = ClusterLedger(api, o.ledger, state=state, escrow=o.ledger_escrow)
            log.info("ledger in namespace %s, %s", o.ledger,
                     "with escrow (slices)" if state.ledger.escrow else "without escrow: a compare-and-swap per admission")
            tasks.append(state.ledger.run)
            from webhook.meter.service import start_meter

            start_meter(state, api, o.ledger, tasks)
        if o.reclaim != "off":
            tasks.append(_reclaim(state, api, o))
    ca_path = None
    if o.self_signed:
        cert, key, ca_path = self_signed(o.certs_dir, o.host, o.extra_sans)
    else:
        cert, key = o.tls_cert, o.tls_key
    try:
        reloading = tls.ReloadingTLS(cert, key, metrics=state.metrics, status=state.tls)
    except (OSError, Exception) as exc:  # noqa: BLE001 - bad files or a key that does not match
        raise StartError(f"cannot load TLS certificate {cert} / key {key}: {exc}") from None
    tasks.append(lambda: reloading.watch(o.tls_interval))
    warm_engine(state.engine, state.snapshot)
    return state, tasks, reloading, ca_path


def _reclaim(state: State, api, o: ServeOptions):
    """The reclaim controller (webhook/reclaim) on the server's state; its background task."""
    import time

    from webhook.reclaim import ReclaimController, for_client, replanner  # the server reaches the ledger only by its face

    client = for_client(api)
    if client is None:
        raise StartError("--reclaim needs a direct connection to the API server (no proxy, no custom retries or sockets)")
    namespace = o.reclaim_namespace or o.ledger or "allot-system"
    state.reclaim = ReclaimController(client, namespace, mode=o.reclaim, replan=replanner(state, time.time),
                                      lease_seconds=o.reclaim_lease)
    log.info("reclaim %s: plan records and Lease in namespace %s", o.reclaim, namespace)
    return state.reclaim.run


async def start(o: ServeOptions) -> Running:
    """Prepare and start listening; the caller awaits forever or calls `stop()`."""
    state, tasks, reloading, ca_path = prepare(o)
    # The snapshot and compiled policy are long-lived: move them out of the collector's
    # view so a full collection does not walk the whole cluster inside an admission request.
    gc.collect()
    gc.freeze()
    app = server.make_app(state, tasks=tuple(tasks))
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=5.0)
    await runner.setup()
    site = web.TCPSite(runner, o.host, o.port, ssl_context=reloading.base, backlog=1024, reuse_port=o.reuse_port or None)
    try:
        await site.start()
    except OSError as exc:
        await runner.cleanup()
        raise StartError(f"cannot listen on {o.host}:{o.port}: {exc.strerror or exc}") from None
    port = runner.addresses[0][1]
    if o.peer_address and state.ledger is not None and state.ledger.escrow:
        await _listen_peers(runner, o.peer_address, state, reloading)
    log.info("allot webhook listening on https://%s:%d (policy generation %d)", o.host, port, state.policy.generation)
    return Running(state=state, runner=runner, port=port, ca_path=ca_path, tls=reloading)


async def _listen_peers(runner: web.AppRunner, address: str, state: State, reloading: tls.ReloadingTLS) -> None:
    """A listener of this process's own on `address` for the peer channel (webhook/ledger/peers.py), advertised in the ledger."""
    site = web.TCPSite(runner, address, 0, ssl_context=reloading.base)
    try:
        await site.start()
    except OSError as exc:
        await runner.cleanup()
        raise StartError(f"cannot listen on {address} for the peer channel: {exc.strerror or exc}") from None
    port = runner.addresses[-1][1]
    host = f"[{address}]" if ":" in address else address
    state.ledger.enable_peer_channel(f"{host}:{port}", reloading)
    log.info("peer channel on https://%s:%d", host, port)


def env_in_cluster() -> bool:
    """True inside a Pod (the service-account environment is present)."""
    return bool(os.environ.get("KUBERNETES_SERVICE_HOST"))
