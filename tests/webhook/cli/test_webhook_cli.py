"""`allot serve` and `allot demo` as a user runs them: real processes, real HTTPS, exit codes, no tracebacks."""

import pathlib
import signal
import ssl
import subprocess
import sys
import time
import urllib.request

import pytest

from tests.webhook.wh_policy import write

ROOT = pathlib.Path(__file__).resolve().parents[3]


def allot(*args, timeout=60):
    return subprocess.run([sys.executable, "-m", "webhook", *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT)


USAGE = [
    # (args, want_message)
    (["serve", "--self-signed"], "give --cluster FILE or --kubeconfig FILE"),
    (["serve", "--cluster", "x.yaml", "--self-signed"], "give exactly one of --policy DIR or --bundle FILE"),
    (["serve", "--policy", "nope", "--cluster", "x.yaml", "--self-signed"], "policy set from nope rejected"),
    (["serve", "--policy", "policies", "--cluster", "x.yaml"], "give --tls-cert and --tls-key, or --self-signed"),
    (["serve", "--policy", "policies", "--cluster", "missing.yaml", "--self-signed"], "missing.yaml: no such cluster-state file"),  # as every command says it
    (["serve", "--bundle", "b.json", "--cluster", "x.yaml", "--self-signed"], "--bundle needs --trust"),
]


@pytest.mark.parametrize("args,want_message", USAGE, ids=[" ".join(a) for a, _ in USAGE])
def test_serve_usage_errors_are_one_line_exit_2(args, want_message):
    got = allot(*args)
    assert got.returncode == 2
    assert want_message in got.stderr and "Traceback" not in got.stderr


def test_serve_runs_answers_and_stops_on_sigterm(tmp_path):
    pdir, cluster = write(tmp_path)
    proc = subprocess.Popen(
        [sys.executable, "-m", "webhook", "serve", "--policy", str(pdir), "--cluster", str(cluster), "--self-signed",
         "--certs-dir", str(tmp_path / "certs"), "--host", "127.0.0.1", "--port", "0", "--decision-log", "off"],
        stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, cwd=ROOT)
    try:
        port, lines = None, []
        deadline = time.monotonic() + 30
        while port is None and time.monotonic() < deadline:
            line = proc.stderr.readline()
            lines.append(line)
            if line.startswith("allot serve: listening on https://"):
                port = int(line.rsplit(":", 1)[1])
        assert port, "".join(lines)
        assert any(f"CA certificate: {tmp_path / 'certs' / 'ca.crt'}" in x for x in lines)
        ctx = ssl.create_default_context(cafile=str(tmp_path / "certs" / "ca.crt"))
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=ctx))
        with opener.open(f"https://localhost:{port}/readyz", timeout=10) as resp:
            assert resp.status == 200
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(15) == 0
    finally:
        if proc.poll() is None:
            proc.kill()


def test_demo_runs_and_every_expectation_holds():
    got = allot("demo", timeout=120)
    assert "Traceback" not in got.stderr
    assert got.returncode == 0, got.stdout + got.stderr
    total = sum(1 for line in got.stdout.splitlines() if line[:3].strip().isdigit())
    assert f"{total}/{total} scripted expectations held" in got.stdout and total >= 15


def test_bench_serve_runs_both_servers_and_reports_every_figure():
    # Speed is not asserted (shared CI cores): the command must run end to end, without a
    # warm-up if asked, and report both servers at both concurrencies with their ratios.
    import json

    got = allot("bench", "serve", "--requests", "100", "--warmup", "0", "--rounds", "1", "--json", timeout=120)
    assert "Traceback" not in got.stderr
    assert got.returncode in (0, 1), got.stderr  # 1 = over budget, still a complete report
    doc = json.loads(got.stdout)
    for key in ("c1", "c16"):
        run = doc[key]
        for server in ("floor", "allot"):
            assert run[server]["requests"] == 100 and run[server]["rps"] > 0 and run[server]["p99_ms"] > 0
        assert run["allot"]["handler_us_per_request"] > 0 and "handler_us_per_request" not in run["floor"]
        budget = doc["budget"]  # issue 33's: req/s per concurrency, p99 at c1 only, the handler against the decision
        want = (run["rps_ratio"] >= budget["rps_ratio_min"][key] and run["handler_ratio"] <= budget["handler_per_decision_max"]
                and (key not in budget["p99_ratio_max"] or run["p99_ratio"] <= budget["p99_ratio_max"][key]))
        assert run["within_budget"] == want, key
    assert doc["within_budget"] == (doc["c1"]["within_budget"] and doc["c16"]["within_budget"])
    assert (got.returncode == 0) == doc["within_budget"]


def test_bench_requests_cycle_the_mix_each_with_its_own_uid():
    import orjson

    from webhook.bench.serve import _bodies, _requests

    bodies = _bodies()
    reqs = _requests(bodies, 2 * len(bodies) + 1)
    reviews = [orjson.loads(r.split(b"\r\n\r\n", 1)[1]) for r in reqs]
    assert len({r["request"]["uid"] for r in reviews}) == len(reqs)
    names = [r["request"].get("name") for r in reviews]
    assert names[: len(bodies)] == names[len(bodies): 2 * len(bodies)] and names[-1] == names[0]
    assert all(r["request"]["dryRun"] is True for r in reviews)


def test_load_generator_refuses_an_empty_run():
    import asyncio

    from webhook.bench.loadgen import run_load

    with pytest.raises(ValueError, match="at least one request"):
        asyncio.run(run_load("127.0.0.1", 1, None, [b""], total=0, concurrency=1))
