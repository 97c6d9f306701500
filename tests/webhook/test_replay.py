"""`allot eval --replay`: a decision log written by the real server over HTTPS, decided again offline."""

from __future__ import annotations

import asyncio
import io
import json
import pathlib
import shutil
import subprocess
import sys

import aiohttp
import orjson
import pytest

from lang import compile_policies
from policy.cluster.snapshot import ClusterSnapshot
from policy.engine import Engine
from webhook.server import tls
from webhook.demo.script import steps
from webhook.replay import NO_REQUEST, replay
from webhook.server.serving import ServeOptions, start
from webhook.sources import read_policy_sources

ROOT = pathlib.Path(__file__).resolve().parents[2]
CLUSTER = ROOT / "webhook" / "data" / "demo-cluster.yaml"


@pytest.fixture(scope="module")
def served_log(tmp_path_factory) -> str:
    """The decision log (with requests) of the demo script sent to the real server."""
    log = io.BytesIO()
    opts = ServeOptions(policy=str(ROOT / "policies"), cluster=str(CLUSTER), host="127.0.0.1", port=0, self_signed=True,
                        certs_dir=str(tmp_path_factory.mktemp("certs")), decision_log=log, buffered_log=False,
                        log_requests=True, reload_interval=3600, tls_interval=3600)

    async def main():
        running = await start(opts)
        try:
            conn = aiohttp.TCPConnector(ssl=tls.client_context(running.ca_path))
            async with aiohttp.ClientSession(connector=conn) as session:
                for step in steps():
                    async with session.post(f"{running.url}/{step.endpoint}", data=orjson.dumps(step.review)) as resp:
                        assert resp.status == 200
        finally:
            await running.stop()

    asyncio.run(main())
    return log.getvalue().decode()


def engine_for(policy_dir: pathlib.Path) -> Engine:
    policy, diags = compile_policies(read_policy_sources([str(policy_dir)]))
    assert policy is not None, diags
    return Engine(policy)


def demo_snapshot() -> ClusterSnapshot:
    return ClusterSnapshot.from_text(CLUSTER.read_text())


def test_the_same_policy_over_the_same_starting_state_reproduces_every_decision(served_log):
    lines = served_log.splitlines()
    assert len(lines) == len(steps())
    report = replay(lines, engine_for(ROOT / "policies"), demo_snapshot())
    assert report.replayed == len(lines) and report.changed == [] and report.skipped == []


def test_holds_carry_across_lines_as_they_did_live(served_log):
    # `one-more` was denied live only because earlier admitted pods held team-a's quota:
    # replaying it alone, without the lines before it, admits it.
    lines = served_log.splitlines()
    at = next(i for i, line in enumerate(lines) if json.loads(line)["name"] == "one-more")
    assert json.loads(lines[at])["result"] == "denied"
    alone = replay([lines[at]], engine_for(ROOT / "policies"), demo_snapshot())
    assert [(r.was_allowed, r.now_allowed) for r in alone.changed] == [(False, True)]


def test_a_smaller_quota_shows_the_decisions_it_would_have_denied(served_log, tmp_path):
    pol = tmp_path / "policies"
    shutil.copytree(ROOT / "policies", pol)
    contract = pol / "contract" / "contract.policy"
    text = contract.read_text()
    assert "\n  gpus 32 " in text
    contract.write_text(text.replace("\n  gpus 32 ", "\n  gpus 24 ", 1))
    report = replay(served_log.splitlines(), engine_for(pol), demo_snapshot())
    newly = {r.what for r in report.changed if r.was_allowed and not r.now_allowed}
    assert newly == {"CREATE pods team-a-dev/job-8-dry", "CREATE pods team-a-dev/job-8"}
    assert report.newly_denied == 2 and report.newly_allowed == 0
    assert all("QuotaExceeded" in r.now_codes for r in report.changed)


def test_lines_that_cannot_be_replayed_are_counted_with_the_reason(served_log):
    first = json.loads(served_log.splitlines()[0])
    no_request = {k: v for k, v in first.items() if k != "request"}
    bad_request = {**first, "request": {**first["request"], "uid": ""}}
    no_ts = {k: v for k, v in first.items() if k != "ts"}
    lines = ["{not json", "", json.dumps({"ts": 1.0, "uid": None, "error": "NotJSON", "message": "x"}),
             json.dumps(no_request), json.dumps(bad_request), json.dumps(no_ts), "[1]"]
    report = replay(lines, engine_for(ROOT / "policies"), demo_snapshot())
    assert report.replayed == 0
    whys = dict(report.skipped)
    assert whys[1] == "not JSON" and 2 not in whys  # blank lines are not lines of the log
    assert whys[3].startswith("an error line (NotJSON)")
    assert whys[4] == NO_REQUEST
    assert whys[5].startswith("logged request is malformed: request.uid")
    assert whys[6] == "no decision time (ts) logged; give --now"
    assert whys[7] == "not a JSON object"


def test_the_cli_exits_0_when_nothing_changed_1_when_something_did_2_on_bad_use(served_log, tmp_path):
    log = tmp_path / "decisions.jsonl"
    log.write_text(served_log)

    def allot(*args):
        return subprocess.run([sys.executable, "-m", "webhook", "eval", *args], capture_output=True, text=True, cwd=ROOT, timeout=120)

    same = allot("--policy", "policies", "--cluster", str(CLUSTER), "--replay", str(log))
    assert same.returncode == 0, same.stderr
    assert same.stdout.strip().endswith(f"{len(steps())} replayed: {len(steps())} unchanged, 0 changed (0 newly denied, 0 newly allowed, 0 other reasons)")
    empty_cluster = allot("--policy", "policies", "--replay", str(log), "--format", "json")
    assert empty_cluster.returncode == 1
    doc = json.loads(empty_cluster.stdout)
    assert doc["replayed"] == len(steps()) and doc["changed"] and doc["unchanged"] == doc["replayed"] - len(doc["changed"])
    nothing = tmp_path / "empty.jsonl"
    nothing.write_text("\n")
    assert allot("--policy", "policies", "--replay", str(nothing)).returncode == 1
    for bad in (["--policy", "policies"], ["--policy", "policies", "--replay", str(log), "x.yaml"],
                ["--policy", "policies", "--replay", str(log), "--explain"],
                ["--policy", "policies", "--replay", str(tmp_path / "missing.jsonl")]):
        got = allot(*bad)
        assert got.returncode == 2 and "Traceback" not in got.stderr, (bad, got.stderr)


def test_any_line_is_replayed_or_skipped_never_a_crash(served_log):
    import os

    from hypothesis import given, settings
    from hypothesis import strategies as st

    first = json.loads(served_log.splitlines()[0])
    json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=8),
                               lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
                               max_leaves=10)
    mutated = st.builds(lambda key, value: json.dumps({**first, key: value}),
                        st.sampled_from(["ts", "endpoint", "result", "codes", "request", "failure"]), json_values)
    deep = st.builds(lambda key, value: json.dumps({**first, "request": {**first["request"], key: value}}),
                     st.sampled_from(["object", "name", "namespace", "resource", "operation", "userInfo", "dryRun"]), json_values)
    lines = st.lists(st.one_of(st.text(max_size=30), json_values.map(json.dumps), mutated, deep), max_size=6)
    engine, snapshot = engine_for(ROOT / "policies"), demo_snapshot()  # holds pile up across examples: harmless here

    @settings(max_examples=int(os.environ.get("ALLOT_FUZZ_EXAMPLES", "120")), deadline=None)
    @given(lines)
    def check(batch):
        report = replay(batch, engine, snapshot)
        assert report.replayed + len(report.skipped) == sum(1 for line in batch if line.strip())

    check()
