"""`allot serve --workers N`: N processes on one port (SO_REUSEPORT), replicas of one ledger, exact together."""

from __future__ import annotations

import concurrent.futures
import json
import os
import pathlib
import signal
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid

import pytest

from webhook.bench.ledger import _kubeconfig
from webhook.bench.serve import wait_port
from webhook.server.serving import self_signed

ROOT = pathlib.Path(__file__).resolve().parents[3]
QUOTA = 10


def allot(*args, timeout=60):
    return subprocess.run([sys.executable, "-m", "webhook", *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT)


USAGE = [
    (["--workers", "2", "--cluster", "x.yaml", "--policy", "policies", "--self-signed"], "--workers N > 1 needs --ledger"),
    (["--workers", "0", "--cluster", "x.yaml", "--policy", "policies", "--self-signed"], "--workers 0: give 1 to 64"),
    (["--ledger", "Bad_NS", "--kubeconfig", "k", "--policy", "policies", "--self-signed"], "--ledger Bad_NS: give a namespace"),
    (["--ledger-escrow", "--kubeconfig", "k", "--policy", "policies", "--self-signed"], "--ledger-escrow needs --ledger"),
    (["--no-ledger-escrow", "--kubeconfig", "k", "--policy", "policies", "--self-signed"], "--no-ledger-escrow needs --ledger"),
    (["--ledger", "ns", "--ledger-escrow", "--no-ledger-escrow", "--kubeconfig", "k", "--policy", "policies", "--self-signed"],
     "not allowed with argument"),
    (["--peer-address", "127.0.0.1", "--kubeconfig", "k", "--policy", "policies", "--self-signed"],
     "--peer-address needs --ledger NAMESPACE with escrow"),
    (["--peer-address", "127.0.0.1", "--ledger", "ns", "--no-ledger-escrow", "--kubeconfig", "k", "--policy", "policies",
      "--tls-cert", "c", "--tls-key", "k"], "--peer-address needs --ledger NAMESPACE with escrow"),
    (["--peer-address", "127.0.0.1", "--ledger", "ns", "--kubeconfig", "k", "--policy", "policies", "--self-signed"],
     "shared by the replicas"),
    (["--peer-address", "my-pod", "--ledger", "ns", "--kubeconfig", "k", "--policy", "policies", "--tls-cert", "c",
      "--tls-key", "k"], "--peer-address my-pod: give the IP address"),
]


@pytest.mark.parametrize("args,want_message", USAGE, ids=[" ".join(a) for a, _ in USAGE])
def test_workers_and_ledger_usage_errors(args, want_message):
    got = allot("serve", *args)
    assert got.returncode == 2 and want_message in got.stderr and "Traceback" not in got.stderr


def _review(name: str) -> bytes:
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "team-a"},
           "spec": {"containers": [{"name": "m", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}
    req = {"uid": str(uuid.uuid4()), "kind": {"group": "", "version": "v1", "kind": "Pod"},
           "resource": {"group": "", "version": "v1", "resource": "pods"}, "name": name, "namespace": "team-a",
           "operation": "CREATE", "userInfo": {"username": "t"}, "object": pod, "oldObject": None, "dryRun": False}
    return json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": req}).encode()


def test_two_workers_share_the_port_and_admit_exactly_the_quota(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}
    derr = tmp_path / "double.err"
    procs = []
    try:
        with open(derr, "w") as fe:
            procs.append(subprocess.Popen([sys.executable, "-m", "webhook.bench.apidouble"], stderr=fe,
                                          stdout=subprocess.DEVNULL, env=env, cwd=ROOT))
        _kubeconfig(tmp_path / "kubeconfig", wait_port(derr, procs[0], "api double listening on"))
        cert, key, ca = self_signed(str(tmp_path / "certs"), "127.0.0.1")
        pdir = tmp_path / "policies"
        pdir.mkdir()
        (pdir / "q.policy").write_text(f'quota team-a {{\n  for namespace matches "team-a*"\n  gpus {QUOTA}\n}}\n')
        import socket

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        serr = tmp_path / "serve.err"
        with open(serr, "w") as fe:
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "webhook", "serve", "--workers", "2", "--ledger", "allot-system", "--kubeconfig",
                 str(tmp_path / "kubeconfig"), "--policy", str(pdir), "--tls-cert", cert, "--tls-key", key,
                 "--host", "127.0.0.1", "--port", str(port), "--decision-log", "off", "--peer-address", "127.0.0.1"],
                stderr=fe, stdout=subprocess.DEVNULL, env=env, cwd=ROOT))
        ctx = ssl.create_default_context(cafile=ca)

        def get(path: str):
            try:
                with urllib.request.urlopen(f"https://127.0.0.1:{port}{path}", context=ctx, timeout=10) as r:
                    return r.status, json.loads(r.read())
            except urllib.error.HTTPError as exc:
                return exc.code, json.loads(exc.read())

        replicas: dict[str, str] = {}
        deadline = time.monotonic() + 60
        while len(replicas) < 2 and time.monotonic() < deadline:  # each new connection lands on either worker
            try:
                status, body = get("/readyz")
                if status == 200:
                    replicas[body["ledger"]["replica"]] = body["ledger"]["peer"]
            except OSError:
                time.sleep(0.1)
        assert len(replicas) == 2, serr.read_text()[-2000:]
        # Each worker has a peer listener of its own (one shared port could not say which replica answers).
        assert all(peer.startswith(f"peer/{r}/127.0.0.1:") for r, peer in replicas.items())
        assert len({peer.rsplit(":", 1)[1] for peer in replicas.values()} | {str(port)}) == 3

        def post(i: int) -> bool:
            req = urllib.request.Request(f"https://127.0.0.1:{port}/validate?timeout=10s", data=_review(f"p{i}"),
                                         headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(req, context=ctx, timeout=15) as r:
                return json.loads(r.read())["response"]["allowed"]

        with concurrent.futures.ThreadPoolExecutor(12) as pool:
            allowed = sum(pool.map(post, range(60)))
        assert allowed == QUOTA
        procs[1].send_signal(signal.SIGTERM)
        assert procs[1].wait(30) == 0  # the first process stops its workers too
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()


@pytest.mark.parametrize("flags,env,want_escrow", [
    ([], None, True), ([], "1", True), ([], "0", False), (["--no-ledger-escrow"], None, False),
    (["--ledger-escrow"], "0", True), (["--no-ledger-escrow"], "1", False),
])
def test_escrow_is_the_default_with_ledger_and_off_by_flag_or_environment(monkeypatch, flags, env, want_escrow):
    from webhook.cli.serve import add_arguments, options_from

    if env is None:
        monkeypatch.delenv("ALLOT_LEDGER_ESCROW", raising=False)
    else:
        monkeypatch.setenv("ALLOT_LEDGER_ESCROW", env)
    import argparse

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(["--ledger", "allot-system", "--kubeconfig", "k", "--policy", "p", "--self-signed", *flags])
    assert options_from(args, None).ledger_escrow is want_escrow
