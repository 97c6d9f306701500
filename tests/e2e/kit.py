"""The real API server kit (../shared/kubeapi) and a local `allot serve` for the end-to-end suite.

The kit is started when no API server answers on its kubeconfig (and stopped again at
the end), or reused when one does. Allot runs as a subprocess of this checkout over
HTTPS with a certificate for IP:127.0.0.1, watching the kit through its kubeconfig; the
compiled webhook configurations point the API server at it with `clientConfig.url`.
"""

from __future__ import annotations

import collections
import concurrent.futures
import contextlib
import json
import os
import pathlib
import socket
import ssl
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

GPU = "nvidia.com/gpu"
H100 = "NVIDIA-H100-80GB-HBM3"
RACK = "topology.acme.io/rack"

REPO = pathlib.Path(__file__).resolve().parents[2]
NO_KIT = "skipped: no kube-apiserver kit"


def kit_dir() -> pathlib.Path:
    """`$KUBEAPI_DIR`, default `kubeapi` in the temp folder (as the kit's scripts default)."""
    return pathlib.Path(os.environ.get("KUBEAPI_DIR") or os.path.join(os.environ.get("TMPDIR", "/tmp"), "kubeapi"))


def has_kit(d: pathlib.Path) -> bool:
    """A built kit: its binaries and start script."""
    return (d / "bin" / "kube-apiserver").is_file() and (d / "bin" / "etcd").is_file() and (d / "start.sh").is_file()


def api_ready(d: pathlib.Path) -> bool:
    """True when the kit's API server answers /readyz with its admin credentials."""
    pki = d / "pki"
    kubeconfig = d / "kubeconfig"
    if not kubeconfig.is_file() or not (pki / "admin.crt").is_file():
        return False
    ctx = ssl.create_default_context(cafile=str(pki / "ca.crt"))
    ctx.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))
    server = next(line.split("server:", 1)[1].strip() for line in kubeconfig.read_text().splitlines() if "server:" in line)
    try:
        with urllib.request.urlopen(server + "/readyz", context=ctx, timeout=3) as r:
            return r.read().strip() == b"ok"
    except OSError:
        return False


def scheduler_runs() -> bool:
    """The kit was started with WITH_SCHED=1 and its scheduler (with the kubelet stand-in) lives."""
    pid = kit_dir() / "run" / "kube-scheduler.pid"
    try:
        os.kill(int(pid.read_text()), 0)
        return True
    except (OSError, ValueError):
        return False


def start_kit(d: pathlib.Path) -> None:
    """`FRESH=1 start.sh`: etcd, API server and controller manager on loopback (~10 s).

    With the alpha scheduling APIs and WorkloadAwarePreemption (the Priority plugin then admits
    upstream PodGroups), unless the environment chooses `ALPHA`/`FEATURE_GATES` itself.
    """
    env = {"ALPHA": "1", "FEATURE_GATES": "WorkloadAwarePreemption=true", **os.environ, "KUBEAPI_DIR": str(d), "FRESH": "1"}
    r = subprocess.run(["bash", str(d / "start.sh")], env=env, capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        raise RuntimeError(f"start.sh failed ({r.returncode}): {r.stdout[-2000:]}{r.stderr[-2000:]}")


def stop_kit(d: pathlib.Path) -> None:
    """`stop.sh`: the kit's processes, by their recorded PIDs."""
    subprocess.run(["bash", str(d / "stop.sh")], env={**os.environ, "KUBEAPI_DIR": str(d)}, capture_output=True,
                   timeout=120)


def free_port() -> int:
    """A loopback port nobody listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_allot(*argv: str, check: bool = True) -> subprocess.CompletedProcess:
    """`allot ARGV` from this checkout."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    r = subprocess.run([sys.executable, "-m", "webhook", *argv], capture_output=True, text=True, env=env, timeout=120)
    if check and r.returncode != 0:
        raise RuntimeError(f"allot {' '.join(argv)} failed ({r.returncode}): {r.stdout}{r.stderr}")
    return r


class Allot:
    """A running `allot serve --kubeconfig` subprocess: its URL, CA, decision log and metrics."""

    def __init__(self, policy_dir: pathlib.Path, kubeconfig: pathlib.Path, work: pathlib.Path, *, extra: tuple = (),
                 certs: pathlib.Path | None = None) -> None:
        self.port = free_port()
        self.url = f"https://127.0.0.1:{self.port}"
        self.certs = certs or work / "certs"  # given: replicas share ca.crt, tls.crt, tls.key already written there
        self.log_path = work / "decisions.jsonl"
        self.stderr_path = work / "serve.stderr"
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        tls = (["--tls-cert", str(self.certs / "tls.crt"), "--tls-key", str(self.certs / "tls.key")] if certs
               else ["--self-signed", "--certs-dir", str(self.certs)])
        argv = [sys.executable, "-m", "webhook", "serve", "--policy", str(policy_dir), "--kubeconfig", str(kubeconfig),
                "--host", "127.0.0.1", "--port", str(self.port), *tls,
                "--decision-log", str(self.log_path), "--reload-interval", "3600", *extra]
        self._stderr = open(self.stderr_path, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(argv, env=env, stdout=self._stderr, stderr=subprocess.STDOUT)

    @property
    def ca(self) -> pathlib.Path:
        """The self-signed CA (`--ca-bundle` for compile)."""
        return self.certs / "ca.crt"

    def _context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.ca))

    def get(self, path: str) -> tuple[int, str]:
        """(status, body) of a GET over HTTPS, verifying the server against its CA (so the SAN is checked)."""
        try:
            with urllib.request.urlopen(self.url + path, context=self._context(), timeout=5) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()

    def wait_ready(self, timeout: float = 90.0) -> dict:
        """/readyz detail once it says ready (policy loaded, every watched kind listed)."""
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"allot serve exited {self.proc.returncode}: {self.stderr_path.read_text()[-3000:]}")
            if self.ca.is_file():
                try:
                    status, body = self.get("/readyz")
                    last = body
                    if status == 200:
                        return json.loads(body)
                except OSError:
                    pass
            time.sleep(0.2)
        raise RuntimeError(f"allot serve not ready after {timeout}s: {last}; {self.stderr_path.read_text()[-3000:]}")

    def readyz(self) -> dict:
        """The /readyz detail now."""
        return json.loads(self.get("/readyz")[1])

    def metric(self, name: str, **labels: str) -> float:
        """The sum of /metrics samples named `name` (or `name_total`) whose labels include `labels`."""
        total = 0.0
        for line in self.get("/metrics")[1].splitlines():
            if line.startswith("#") or not line.strip():
                continue
            series, _, value = line.rpartition(" ")
            base, _, rest = series.partition("{")
            if base in (name, name + "_total") and all(f'{k}="{v}"' in rest for k, v in labels.items()):
                total += float(value)
        return total

    def decisions(self) -> list[dict]:
        """Every decision line written so far (the log is flushed every 0.25 s)."""
        if not self.log_path.is_file():
            return []
        return [json.loads(line) for line in self.log_path.read_text().splitlines() if line.strip().startswith("{")]

    def stop(self) -> None:
        """SIGTERM, then wait (the server drains in-flight requests)."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self._stderr.close()


def start_replicas(n: int, policy_dir: pathlib.Path, kubeconfig: pathlib.Path, work: pathlib.Path, certs: pathlib.Path,
                   ledger_ns: str) -> list[Allot]:
    """`n` replicas of `allot serve --ledger LEDGER_NS --peer-address 127.0.0.1` sharing `certs`, all ready with one policy."""
    servers: list[Allot] = []
    try:
        for i in range(n):
            (work / f"r{i}").mkdir(parents=True, exist_ok=True)
            servers.append(Allot(policy_dir, kubeconfig, work / f"r{i}", certs=certs,
                                 extra=("--ledger", ledger_ns, "--peer-address", "127.0.0.1")))  # (the peer channel too)
        for s in servers:
            ready = s.wait_ready()
            assert ready["ledger"]["synced"] and ready["digest"]
        assert len({s.readyz()["digest"] for s in servers}) == 1  # all decide with one policy
    except BaseException:
        for s in servers:
            s.stop()
        raise
    return servers


class Kube:
    """`kubectl --kubeconfig KIT` with JSON in and out, and the server's own error text on failure."""

    def __init__(self, kubeconfig: pathlib.Path) -> None:
        self.kubeconfig = kubeconfig

    def run(self, *argv: str, stdin: str | None = None, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess:
        """kubectl ARGV; raises with stderr when `check` and it fails."""
        r = subprocess.run(["kubectl", "--kubeconfig", str(self.kubeconfig), *argv], input=stdin, capture_output=True,
                           text=True, timeout=timeout)
        if check and r.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(argv)}: {r.stderr.strip()}")
        return r

    def create(self, obj: dict, *extra: str, check: bool = True) -> subprocess.CompletedProcess:
        """`kubectl create -f -` of one object (JSON)."""
        return self.run("create", "-f", "-", "-o", "json", *extra, stdin=json.dumps(obj), check=check)

    def get(self, kind: str, name: str, namespace: str | None = None) -> dict:
        """The stored object."""
        ns = ("-n", namespace) if namespace else ()
        return json.loads(self.run("get", kind, name, *ns, "-o", "json").stdout)


def wait_for(what: str, probe, timeout: float = 60.0, every: float = 0.2):
    """Poll `probe()` until it returns something truthy; fail naming `what`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = probe()
        if got:
            return got
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def node(name: str, rack: str, gpus: int = 8) -> dict:
    """A GPU node as GPU Feature Discovery labels it."""
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, RACK: rack, "nvidia.com/gpu.product": H100,
                                                  "nvidia.com/gpu.memory": "81559"}}}


def node_status(gpus: int) -> str:
    """The status merge patch a kubelet and the device plugin would have written."""
    res = {GPU: str(gpus), "cpu": "64", "memory": "512Gi", "pods": "110"}
    return json.dumps({"status": {"capacity": res, "allocatable": res,
                                  "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                                                  "message": "e2e", "lastHeartbeatTime": None, "lastTransitionTime": None}]}})


def revive(kube, node: str, gpus: int = 8) -> None:
    """A kubelet's heartbeat: no kubelet runs in the kit, so after ~40 s the node controller marks the node unreachable and taints it."""
    import datetime

    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    res = {GPU: str(gpus), "cpu": "64", "memory": "512Gi", "pods": "110"}
    status = {"status": {"capacity": res, "allocatable": res, "conditions": [
        {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "e2e", "lastHeartbeatTime": now, "lastTransitionTime": now}]}}
    kube.run("patch", "node", node, "--subresource=status", "--type=merge", "-p", json.dumps(status))
    kube.run("taint", "node", node, "node.kubernetes.io/unreachable-", "node.kubernetes.io/not-ready-", check=False)


def gpu_pod(name: str, namespace: str, gpus: int | None = 1, labels: dict | None = None, annotations: dict | None = None,
            **spec) -> dict:
    """A pod asking `gpus` whole GPUs (None: no GPU)."""
    container = {"name": "main", "image": "registry.k8s.io/pause:3.10"}
    if gpus is not None:
        container["resources"] = {"limits": {GPU: str(gpus)}}
    meta: dict = {"name": name, "namespace": namespace}
    if labels:
        meta["labels"] = labels
    if annotations:
        meta["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": {"containers": [container], **spec}}


def core_api(kubeconfig: pathlib.Path):
    """A `kubernetes` CoreV1Api on the kit's kubeconfig, with a pool as large as the create bursts' threads."""
    from kubernetes import client, config

    cfg = client.Configuration()
    config.load_kube_config(config_file=str(kubeconfig), client_configuration=cfg)
    cfg.connection_pool_maxsize = 64
    return client.CoreV1Api(client.ApiClient(cfg))


def create_pods(core, ns: str, names: list[str], *, outcomes: collections.Counter | None = None, progress=None,
                tolerate: bool = False) -> int:
    """Create 1-GPU pods concurrently (64 threads) through the API server; how many creates were answered "created".

    Without `tolerate` every refusal must be a quota denial or a failed webhook call; with it
    (a fault under way: the API server restarting, a replica stalled) any error counts as
    not created. `outcomes` counts each answer's kind; `progress(done)` is called after each.
    """
    from kubernetes.client.rest import ApiException

    done = [0]
    lock = threading.Lock()

    def kind(name: str) -> str:
        try:
            core.create_namespaced_pod(ns, gpu_pod(name, ns, gpus=1), _preload_content=False)  # no model classes built in 64 threads
            return "created"
        except ApiException as exc:
            body = (exc.body or "").lower()
            if "quota" in body and exc.status in (403, 500):
                return "quota"
            if "failed calling webhook" in body:
                return "webhook failed"
            if "ledger_unavailable" in body and exc.status in (403, 500):  # a replica whose view is not proven current
                return "stale"  # (it denies as --on-error, saying so: docs/ledger.md invariant 9)
            assert tolerate, exc.body
            return f"{exc.status}"
        except Exception as exc:  # only while a fault is under way: the connection itself failed
            if not tolerate:
                raise
            return type(exc).__name__

    def create(name: str) -> bool:
        got = kind(name)
        with lock:
            done[0] += 1
            if outcomes is not None:
                outcomes[got] += 1
            n = done[0]
        if progress is not None:
            progress(n)
        return got == "created"

    # One call on this thread first: the client builds its validators lazily, and CPython 3.11's AST state
    # is not thread-safe (the same call first made in 64 threads at once can corrupt it). A refusal or a
    # fault is fine: the warm-up only builds the client's parts.
    with contextlib.suppress(Exception):
        core.create_namespaced_pod(ns, gpu_pod("warm-up", ns, gpus=1), dry_run="All", _preload_content=False)
    with concurrent.futures.ThreadPoolExecutor(64) as pool:
        return sum(pool.map(create, names))
