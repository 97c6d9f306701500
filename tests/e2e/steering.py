"""The openb steering experiment on the real kube-scheduler: one seeded arrival sequence, with and without Allot's steering.

A scaled-down openb cluster (Node objects as `allot simulate` reads the CSV) is created in
the kit; the artifact's tuned arrival sequence (the same `tune` and seed as `allot simulate
--saturate X --method artifact`) is created pod by pod through the API server, each waited
for until the scheduler has bound it or found it unschedulable, and the GPU allocation ratio
is recorded after each, as the simulator records it.

The scheduler is the kit's kube-scheduler binary, run here with a profile of its own
(`schedulerName: allot-steer`, `percentageOfNodesToScore: 100`, as `allot simulate` scores
every node) and a device extender standing in for HAMi's scheduler extender: kube-scheduler
counts GPUs per node only, so GPU shares (HAMi's `nvidia.com/gpu: 1` + `nvidia.com/gpucores`)
need something that knows devices. The extender (`Devices`) filters the nodes whose devices
can take the pod and binds it, charging whole pods to untouched devices and shares to the
fullest shared device that takes them (HAMi's `binpack` GPU policy; the placement index's
own rule), then posts the Binding. Scores stay kube-scheduler's own (its default profile:
LeastAllocated, BalancedAllocation, NodeAffinity…): the extender adds none.

No kubelet runs: nodes get their Ready heartbeat from here; bound pods stay Pending, which
neither the scheduler nor Allot minds (both count bound pods).
"""

from __future__ import annotations

import json
import os
import pathlib
import random
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import kit

FULL = 1000
GPU, CORES = "nvidia.com/gpu", "nvidia.com/gpucores"
SCHEDULER = "allot-steer"
POOL = "allot-e2e/steer"


def subset(node_csv: pathlib.Path, count: int, seed: int, out: pathlib.Path) -> pathlib.Path:
    """A seeded sample of `count` nodes of an openb node list, in file order, as a CSV `allot simulate --cluster` reads."""
    head, *rows = [line for line in node_csv.read_text().splitlines() if line.strip()]
    picked = sorted(random.Random(seed).sample(rows, count))
    out.write_text("\n".join([head, *picked]) + "\n")
    return out


def gpu_ask(pod: dict) -> tuple[int, int]:
    """(whole devices, milli of one shared device) a pod asks in the HAMi dialect openb pods are written in."""
    whole = share = 0
    for c in pod["spec"].get("containers") or ():
        limits = (c.get("resources") or {}).get("limits") or {}
        n, cores = int(limits.get(GPU, 0)), int(limits.get(CORES, 100))
        if n and cores < 100:
            share = max(share, cores * 10)
        else:
            whole += n
    return whole, share


class Devices:
    """Per-device GPU accounting of the pool's nodes: the filter and bind verbs of a scheduler extender."""

    def __init__(self, gpus: dict[str, int], bind) -> None:
        self.used = {n: [0] * g for n, g in gpus.items()}  # milli taken per device
        self.bind_api = bind  # (namespace, name, uid, node) -> None; raises when the API server refuses
        self.lock = threading.Lock()
        self.held: dict[str, tuple[str, list[tuple[int, int]]]] = {}  # pod uid -> (node, [(device, milli)])

    def choose(self, node: str, whole: int, share: int) -> list[tuple[int, int]] | None:
        """The devices a pod would take on `node` (None: it does not fit)."""
        devs = self.used.get(node)
        if devs is None:
            return None if whole or share else []
        if share:
            fits = [(used, i) for i, used in enumerate(devs) if 0 < used and used + share <= FULL]
            if fits:
                return [(max(fits)[1], share)]  # the fullest shared device that takes it
            free = [i for i, used in enumerate(devs) if used == 0]
            return [(free[0], share)] if free else None
        free = [i for i, used in enumerate(devs) if used == 0]
        return [(i, FULL) for i in free[:whole]] if len(free) >= whole else None

    def release(self, uid: str) -> None:
        """A pod deleted: its devices are free again (as a device plugin frees them when the pod ends)."""
        with self.lock:
            node, got = self.held.pop(uid, (None, ()))
            for i, m in got:
                self.used[node][i] -= m

    def filter(self, args: dict) -> dict:
        """ExtenderFilterResult: the candidate nodes whose devices take the pod."""
        pod = args.get("Pod") or args.get("pod") or {}
        whole, share = gpu_ask(pod)
        names = args.get("NodeNames") or args.get("nodenames") or []
        ok, failed = [], {}
        with self.lock:
            for n in names:
                if self.choose(n, whole, share) is not None:
                    ok.append(n)
                else:
                    failed[n] = f"devices cannot take {whole} GPU(s)" if whole else f"no device has {share} milli-GPU free"
        return {"NodeNames": ok, "FailedNodes": failed, "Error": ""}

    def bind(self, args: dict, pod: dict) -> dict:
        """ExtenderBindingResult: devices charged, then the Binding posted (and the charge undone when it is refused)."""
        node, uid = args["Node"], args["PodUID"]
        whole, share = gpu_ask(pod)
        with self.lock:
            got = self.choose(node, whole, share)
            if got is None:
                return {"Error": f"{node}: the devices no longer take the pod"}
            for i, m in got:
                self.used[node][i] += m
            self.held[uid] = (node, got)
        try:
            self.bind_api(args["PodNamespace"], args["PodName"], uid, node)
        except Exception as exc:  # the API server refused: the devices are free again
            with self.lock:
                for i, m in self.held.pop(uid)[1]:
                    self.used[node][i] -= m
            return {"Error": f"binding: {exc}"}
        return {"Error": ""}


class Extender:
    """`Devices` over HTTP on loopback (`/filter`, `/bind`), as kube-scheduler's `extenders:` calls it."""

    def __init__(self, devices: Devices, pods: dict[str, dict]) -> None:
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - http.server's name
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                if self.path.endswith("/filter"):
                    out = devices.filter(body)
                elif self.path.endswith("/bind"):
                    out = devices.bind(body, outer.pods.get(f"{body['PodNamespace']}/{body['PodName']}") or {"spec": {}})
                else:
                    self.send_error(404)
                    return
                data = json.dumps(out).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *_a):
                pass

        self.pods = pods  # "ns/name" -> the pod as created (bind args carry names only)
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def score_percent() -> int | None:
    """`ALLOT_STEER_SCORE_PERCENT`: kube-scheduler's percentageOfNodesToScore (default 100; 0 or "adaptive": its own default)."""
    text = os.environ.get("ALLOT_STEER_SCORE_PERCENT", "100").strip()
    return None if text in ("0", "adaptive") else int(text)


def scheduler_config(kit_dir: pathlib.Path, extender_port: int, path: pathlib.Path) -> pathlib.Path:
    """A KubeSchedulerConfiguration: one profile `allot-steer` scoring every node, the device extender managing GPUs."""
    kubeconfig = kit_dir / "pki" / "kube-scheduler.kubeconfig"
    percent = score_percent()
    managed = "\n".join(f"  - name: {r}\n    ignoredByScheduler: true" for r in (GPU, CORES))
    path.write_text(f"""apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection:
  kubeconfig: {kubeconfig}
leaderElection:
  leaderElect: false
{"" if percent is None else f"percentageOfNodesToScore: {percent}"}
profiles:
- schedulerName: {SCHEDULER}
extenders:
- urlPrefix: http://127.0.0.1:{extender_port}
  filterVerb: filter
  bindVerb: bind
  nodeCacheCapable: true
  httpTimeout: 10s
  managedResources:
{managed}
""")
    return path


def start_scheduler(kit_dir: pathlib.Path, config: pathlib.Path, log: pathlib.Path) -> subprocess.Popen:
    """The kit's kube-scheduler binary with `config`, on a free loopback port."""
    ks = kit_dir / "pki" / "kube-scheduler.kubeconfig"
    argv = [str(kit_dir / "bin" / "kube-scheduler"), f"--config={config}", f"--authentication-kubeconfig={ks}",
            f"--authorization-kubeconfig={ks}", "--bind-address=127.0.0.1", f"--secure-port={kit.free_port()}"]
    return subprocess.Popen(argv, stdout=open(log, "wb"), stderr=subprocess.STDOUT)  # noqa: SIM115 - the process owns it


def ready(node: dict) -> dict:
    """The status a kubelet and the device plugin would post for an openb node (fresh heartbeat)."""
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    st = node["status"]
    return {"status": {"capacity": st["capacity"], "allocatable": st["allocatable"], "conditions": [
        {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "steer e2e", "lastHeartbeatTime": now,
         "lastTransitionTime": now}]}}


class Heartbeat:
    """Every 10 s, each pool node's Ready heartbeat (no kubelet runs: the node lifecycle controller would taint them)."""

    def __init__(self, core, nodes: list[dict]) -> None:
        self.core, self.nodes, self.stop_ = core, nodes, threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop_.wait(10):
            for n in self.nodes:
                try:
                    self.core.patch_node_status(n["metadata"]["name"], ready(n))
                except Exception:  # a node deleted at the end of a run: nothing to keep alive
                    pass

    def stop(self) -> None:
        self.stop_.set()
        self.thread.join(timeout=15)


def steps_of(outcomes: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """(arrived, allocated) milli-GPU after each attempt, from (asked, allocated-by-it) pairs."""
    arrived = alloc = 0
    out = []
    for asked, got in outcomes:
        arrived += asked
        alloc += got
        out.append((arrived, alloc))
    return out


def env_seeds(default: str = "42") -> list[int]:
    """`ALLOT_STEER_SEEDS` (A-B or a comma list), else `default`."""
    text = os.environ.get("ALLOT_STEER_SEEDS") or default
    if "-" in text:
        a, b = text.split("-", 1)
        return list(range(int(a), int(b) + 1))
    return [int(s) for s in text.split(",")]
