"""Pod CREATE latency through a real API server: no policy, a native ValidatingAdmissionPolicy, the webhook.

    python3 -m webhook.bench.native_latency --kit /tmp/kubeapi-NAME [--n 200] [--rounds 3]

Needs a running kit (../shared/kubeapi). One stateless rule is compiled twice: for 1.36
(a ValidatingAdmissionPolicy) and for 1.29 (the webhook judges it); rounds alternate the
three setups so the shared machine's noise falls on all alike. Each request is a
`dryRun=All` pod CREATE over one kept-alive HTTPS connection (the whole admission chain
runs; nothing is stored). Then, with the webhook stopped and the native policy installed,
a stateless denial and an ordinary pod are sent to show neither waits on the webhook.
"""

from __future__ import annotations

import argparse
import http.client
import json
import pathlib
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import time

RULE = """\
rule critical-is-for-serving {
  for priority_class == "critical"
  when not (namespace matches "prod-*")
  deny "priority class critical is reserved for prod-* namespaces, not {namespace}"
}
priority critical 1000
"""
NS = "bench-native"


class Api:
    """A kept-alive HTTPS connection to the kit's API server with its admin certificate."""

    def __init__(self, kit: pathlib.Path) -> None:
        server = next(line.split("server:", 1)[1].strip() for line in (kit / "kubeconfig").read_text().splitlines()
                      if "server:" in line)
        host, port = server.removeprefix("https://").split(":")
        ctx = ssl.create_default_context(cafile=str(kit / "pki" / "ca.crt"))
        ctx.load_cert_chain(str(kit / "pki" / "admin.crt"), str(kit / "pki" / "admin.key"))
        self.conn = http.client.HTTPSConnection(host, int(port), context=ctx, timeout=30)

    def create_pod(self, name: str, priority_class: str | None = None) -> tuple[int, str, float]:
        """(status, body, seconds) of a dry-run pod CREATE."""
        spec: dict = {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}
        if priority_class:
            spec["priorityClassName"] = priority_class
        body = json.dumps({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec})
        t = time.perf_counter()
        self.conn.request("POST", f"/api/v1/namespaces/{NS}/pods?dryRun=All", body, {"Content-Type": "application/json"})
        r = self.conn.getresponse()
        data = r.read().decode()
        return r.status, data, time.perf_counter() - t


def _kubectl(kit: pathlib.Path, *argv: str, check: bool = True) -> subprocess.CompletedProcess:
    r = subprocess.run(["kubectl", "--kubeconfig", str(kit / "kubeconfig"), *argv], capture_output=True, text=True, timeout=60, check=False)
    if check and r.returncode != 0:
        raise RuntimeError(f"kubectl {' '.join(argv)}: {r.stderr.strip()}")
    return r


def _compile(policy: pathlib.Path, out: pathlib.Path, version: str, url: str, ca: pathlib.Path) -> None:
    subprocess.run([sys.executable, "-m", "webhook", "compile", "--policy", str(policy), "-o", str(out), "--kube-version", version,
                    "--url", url, "--ca-bundle", str(ca)], check=True, capture_output=True)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _serve(policy: pathlib.Path, kit: pathlib.Path, work: pathlib.Path) -> tuple[subprocess.Popen, str]:
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "webhook", "serve", "--policy", str(policy), "--kubeconfig", str(kit / "kubeconfig"),
                             "--host", "127.0.0.1", "--port", str(port), "--self-signed", "--certs-dir", str(work / "certs")],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    ctx = None
    for _ in range(300):
        if (work / "certs" / "ca.crt").is_file():
            ctx = ssl.create_default_context(cafile=str(work / "certs" / "ca.crt"))
            try:
                c = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=2)
                c.request("GET", "/readyz")
                if c.getresponse().status == 200:
                    return proc, f"https://127.0.0.1:{port}"
            except OSError:
                pass
        time.sleep(0.2)
    proc.terminate()
    raise RuntimeError("allot serve did not become ready")


def _measure(api: Api, n: int, tag: str) -> list[float]:
    out = []
    for i in range(n):
        status, body, dt = api.create_pod(f"{tag}-{i}")
        if status != 201:
            raise RuntimeError(f"{tag}: pod CREATE answered {status}: {body[:300]}")
        out.append(dt)
    return out


def main(argv: list[str] | None = None) -> int:
    """Run the comparison and print p50/p90 per setup (ms), per round and overall."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--kit", required=True, type=pathlib.Path)
    p.add_argument("--n", type=int, default=200)
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args(argv)
    kit = args.kit
    work = pathlib.Path(tempfile.mkdtemp(prefix="allot-native-bench-"))
    policy = work / "policy"
    policy.mkdir()
    (policy / "bench.policy").write_text(RULE)
    _kubectl(kit, "create", "namespace", NS, check=False)
    proc, url = _serve(policy, kit, work)
    ca = work / "certs" / "ca.crt"
    native, hooks = work / "native", work / "hooks"
    _compile(policy, native, "1.36", url, ca)
    _compile(policy, hooks, "1.29", url, ca)
    made = _kubectl(kit, "create", "-f", str(native / "priorityclasses.yaml"), "-o", "name", check=False).stdout.split()
    api = Api(kit)
    setups = {
        "none": ([], []),
        "native": ([native / "validating-policies.yaml"], []),
        "webhook": ([hooks / "validating-webhook.yaml"], []),
    }
    times: dict[str, list[float]] = {k: [] for k in setups}
    try:
        for rnd in range(args.rounds):
            for name, (files, _) in setups.items():
                for f in files:
                    _kubectl(kit, "create", "-f", str(f))
                time.sleep(3)  # the API server picks configurations up from its informers
                _measure(api, 20, f"warm-{name}-{rnd}")
                got = _measure(api, args.n, f"{name}-{rnd}")
                times[name] += got
                print(f"round {rnd + 1} {name:8s} p50 {statistics.median(got) * 1e3:6.2f} ms  "
                      f"p90 {statistics.quantiles(got, n=10)[-1] * 1e3:6.2f} ms")
                for f in files:
                    _kubectl(kit, "delete", "-f", str(f), "--ignore-not-found")
        base = statistics.median(times["none"])
        for name, ts in times.items():
            p50 = statistics.median(ts)
            print(f"all      {name:8s} p50 {p50 * 1e3:6.2f} ms  (+{(p50 - base) * 1e3:5.2f} ms over none)  n={len(ts)}")
        # Availability: native policy and the webhook configuration (failurePolicy Fail) installed, the webhook stopped.
        _kubectl(kit, "create", "-f", str(native / "validating-policies.yaml"))
        _kubectl(kit, "create", "-f", str(native / "validating-webhook.yaml"))
        proc.terminate()
        proc.wait(timeout=20)
        time.sleep(3)
        denied = api.create_pod("stopped-critical", "critical")
        plain = api.create_pod("stopped-plain")
        print(f"webhook stopped: critical pod -> {denied[0]} {json.loads(denied[1]).get('message', '')[:160]}")
        print(f"webhook stopped: ordinary pod -> {plain[0]}")
    finally:
        if proc.poll() is None:
            proc.terminate()
        for f in (native / "validating-policies.yaml", native / "validating-webhook.yaml", hooks / "validating-webhook.yaml"):
            _kubectl(kit, "delete", "-f", str(f), "--ignore-not-found", check=False)
        for name in made:  # only the class this run created
            _kubectl(kit, "delete", name, "--ignore-not-found", check=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
