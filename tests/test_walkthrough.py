"""docs/walkthrough.md, run as written: every file it shows is written, every command it shows is run
in order in a fresh directory (`allot` is `python3 -m webhook` of this checkout), and what the page
says comes out does.

Commands that need a live cluster cannot run here. Each is listed in CLUSTER with what runs in its
place, and said so: `kubectl get … > cluster.yaml` copies a committed dump in the same shape
(tests/fixtures/walkthrough/cluster.yaml), `kubectl create …` runs with `--dry-run=client`,
`kubectl apply -k` is rendered by `kubectl kustomize`; the namespace file is read, and
`rollout status` (which waits for the cluster's pods) is not run. Where no kubectl is installed,
the kubectl lines are not run and the tests of what they print skip, saying so.
"""

from __future__ import annotations

import base64
import json
import os
import pathlib
import re
import shutil
import socket
import stat
import subprocess
import sys
import time

import pytest
import yaml

ROOT = pathlib.Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "walkthrough.md"
DUMP = ROOT / "tests" / "fixtures" / "walkthrough" / "cluster.yaml"
PORT = "8443"  # the page's port; the test serves on a free one instead
FENCE = re.compile(r"^```(\w*)([^\n]*)\n(.*?)^```$", re.DOTALL | re.MULTILINE)
EXIT = re.compile(r"#\s*→\s*exit\s+(\d+)\s*$")
KUBECTL = shutil.which("kubectl")


def _namespace_file(cwd: pathlib.Path) -> str:
    doc = yaml.safe_load((cwd / "deploy" / "namespace.yaml").read_text())
    assert (doc["kind"], doc["metadata"]["name"]) == ("Namespace", "allot-system")
    return ""


# the page's command -> what runs here instead (a shell command, a check, or None: not run)
CLUSTER = {
    "kubectl get nodes,namespaces,priorityclasses,pods -A -o yaml > cluster.yaml": f"cp '{DUMP}' cluster.yaml",
    "kubectl apply -f deploy/namespace.yaml": _namespace_file,
    "kubectl -n allot-system create secret tls allot-tls --cert certs/tls.crt --key certs/tls.key":
        "kubectl -n allot-system create secret tls allot-tls --cert certs/tls.crt --key certs/tls.key --dry-run=client -o yaml",
    "kubectl -n allot-system create configmap allot-trust --from-file=allot.pub=keys/allot.pub":
        "kubectl -n allot-system create configmap allot-trust --from-file=allot.pub=keys/allot.pub --dry-run=client -o yaml",
    "kubectl apply -k deploy": "kubectl kustomize deploy",
    "kubectl -n allot-system rollout status deploy/allot": None,
}


def blocks() -> list[tuple[str, str, str]]:
    """(kind, argument, body) of every fence: ("sh", "", …), ("sh", "serve", …), ("file", PATH, …), ("other", …)."""
    out = []
    for lang, info, body in FENCE.findall(DOC.read_text(encoding="utf-8")):
        info = info.strip()
        if info.startswith("file="):
            out.append(("file", info[len("file="):], body))
        elif lang == "sh":
            out.append(("sh", info, body))
        else:
            out.append(("other", info, body))
    return out


def commands(body: str) -> list[tuple[str, int]]:
    """The shell lines of a block (continuations joined, comment lines dropped) and the exit each expects."""
    lines, cur = [], ""
    for raw in body.splitlines():
        cur += raw.rstrip()
        if cur.endswith("\\"):
            cur = cur[:-1] + " "
            continue
        if cur.strip() and not cur.lstrip().startswith("#"):
            m = EXIT.search(cur)
            lines.append((cur.strip(), int(m.group(1)) if m else 0))
        cur = ""
    return lines


def bare(command: str) -> str:
    """A command without its trailing comment (the page's comments never contain a quoted `#`)."""
    return re.sub(r"\s+#.*$", "", command).strip()


def test_every_cluster_command_of_the_page_is_listed_and_every_listed_one_is_on_the_page():
    shown = {bare(c) for kind, _, body in blocks() if kind == "sh" for c, _ in commands(body)}
    live = {c for c in shown if c.startswith("kubectl") and not c.startswith("kubectl kustomize")}
    assert live == set(CLUSTER)


def free_port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return str(s.getsockname()[1])


def wait_for(port: str, proc: subprocess.Popen, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"allot serve exited {proc.returncode}: {proc.stderr.read()}"
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", int(port))) == 0:
                return
        time.sleep(0.2)
    raise AssertionError(f"allot serve did not listen on {port} within {timeout} s")


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """Run the whole page once; return {bare command: CompletedProcess} and the final directory."""
    base = tmp_path_factory.mktemp("walkthrough")
    bindir = base / "bin"
    bindir.mkdir()
    shim = bindir / "allot"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m webhook "$@"\n')
    shim.chmod(shim.stat().st_mode | stat.S_IEXEC)
    env = {**os.environ, "PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}", "PYTHONPATH": str(ROOT),
           "ALLOT": str(ROOT), "HOME": str(base)}
    env.pop("KUBECONFIG", None)
    port = free_port()
    cwd, results, server = base, {}, None
    try:
        for kind, arg, body in blocks():
            if kind == "file":
                path = cwd / arg
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(body)
                continue
            if kind != "sh":
                continue
            for command, want in commands(body):
                key = bare(command)
                here = CLUSTER.get(key, command) if key in CLUSTER else command
                if here is None or (not KUBECTL and isinstance(here, str) and here.startswith("kubectl")):
                    continue
                if callable(here):
                    results[key] = subprocess.CompletedProcess(key, 0, here(cwd), "")
                    continue
                here = here.replace(PORT, port)
                if arg == "serve":
                    assert server is None, "one server at a time"
                    server = subprocess.Popen(here, shell=True, cwd=cwd, env=env, text=True, start_new_session=True,
                                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
                    wait_for(port, server)
                    continue
                script = f"{here}\nrc=$?\npwd > '{base}/.cwd'\nexit $rc\n"
                done = subprocess.run(["bash", "-c", script], check=False, cwd=cwd, env=env, text=True,
                                      capture_output=True, timeout=180)
                assert done.returncode == want, f"{command}\nexit {done.returncode}, page says {want}\n{done.stdout}\n{done.stderr}"
                cwd = pathlib.Path((base / ".cwd").read_text().strip())
                results[key] = done
            if server is not None and arg != "serve":  # the block after the server's is the one that asks it
                os.killpg(server.pid, 15)
                server.wait(timeout=15)
                server = None
    finally:
        if server is not None:
            os.killpg(server.pid, 9)
            server.wait()
    yield results, cwd
    shutil.rmtree(base, ignore_errors=True)


def result(results, prefix: str) -> subprocess.CompletedProcess:
    hits = [r for c, r in results.items() if c.startswith(prefix)]
    if not hits and prefix.startswith("kubectl") and not KUBECTL:
        pytest.skip("no kubectl installed: its lines of the walkthrough were not run")
    [hit] = hits
    return hit


def test_check_and_fmt_pass(run):
    results, _ = run
    assert "no problems" in result(results, "allot check policies").stdout
    assert result(results, "allot fmt --check policies").returncode == 0


def test_the_policy_tests_pass(run):
    results, _ = run
    assert result(results, "allot test policies").stdout.strip().splitlines()[-1] == "2 passed, 0 failed"


def test_lint_finds_the_job_over_quota_at_its_line(run):
    results, _ = run
    out = result(results, "allot lint").stdout
    assert re.search(r"^manifests/team-a/pretrain\.yaml:\d+:\d+: error\[QuotaExceeded\]", out, re.MULTILINE)
    # the message the page quotes is the one printed
    assert "team-a: 6 in use + 4 requested (for Job pretrain-2: 1 job pods x 4 GPU) > 8 nominal + 0 borrowable" in out
    assert "manifests/inference/chat.yaml" not in out.replace("linted", "")  # the quarter-GPU Deployment passes


def test_curl_gets_the_denial_the_page_shows(run):
    results, _ = run
    answer = json.loads(result(results, "curl").stdout)
    response = answer["response"]
    assert response["uid"] == "7f3c2a10-5b1e-4c8e-9d2a-000000000001"
    assert response["allowed"] is False
    assert response["status"]["code"] == 403
    assert response["status"]["message"] in DOC.read_text(encoding="utf-8")


def test_the_install_renders_with_the_ca_and_the_signed_bundle(run):
    results, cwd = run
    assert "signed by key" in result(results, "allot compile").stdout
    result(results, "kubectl kustomize deploy")
    docs = [d for d in yaml.safe_load_all((cwd / "rendered.yaml").read_text()) if d]
    kinds = {d["kind"] for d in docs}
    assert {"ValidatingWebhookConfiguration", "MutatingWebhookConfiguration", "PriorityClass", "Deployment"} <= kinds
    ca = base64.b64encode((cwd / "certs" / "ca.crt").read_bytes()).decode()
    for d in docs:
        if d["kind"].endswith("WebhookConfiguration"):
            assert {h["clientConfig"]["caBundle"] for h in d["webhooks"]} == {ca}
    [bundle] = [d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "allot-policy-bundle"]
    assert json.loads(bundle["data"]["allot-bundle.json"])["signatures"]
    classes = {d["metadata"]["name"] for d in docs if d["kind"] == "PriorityClass"}
    assert classes == {"critical", "batch"}


def test_the_secret_and_trust_objects_render_offline(run):
    results, _ = run
    secret = yaml.safe_load(result(results, "kubectl -n allot-system create secret tls").stdout)
    trust = yaml.safe_load(result(results, "kubectl -n allot-system create configmap").stdout)
    assert secret["type"] == "kubernetes.io/tls" and "allot.pub" in trust["data"]
