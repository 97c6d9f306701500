"""`allot bench ledger`: its usage errors, and a small run of 3 replicas that must admit exactly the quota."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[3]


def bench(*args, timeout=180):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "webhook", "bench", "ledger", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT, env=env)


USAGE = [(["--replicas", "1"], "--replicas 1: give 2 to 4"), (["--replicas", "5"], "--replicas 5: give 2 to 4"),
         (["--quota", "5"], "--quota must be 10..3500")]


@pytest.mark.parametrize("args,want_message", USAGE, ids=[" ".join(a) for a, _ in USAGE])
def test_bench_ledger_usage_errors(args, want_message):
    got = bench(*args)
    assert got.returncode == 2 and want_message in got.stderr and "Traceback" not in got.stderr


@pytest.mark.parametrize("escrow", ["--escrow", "--no-escrow"])
def test_three_replicas_admit_exactly_the_quota_and_stateless_writes_nothing(escrow):
    got = bench("--replicas", "3", "--quota", "20", "--concurrency", "4", escrow, "--json")
    assert got.returncode in (0, 1), got.stderr  # 1: over the speed budget on a loaded machine, not an error
    figures = json.loads(got.stdout)
    assert figures["replicas"] == 3 and figures["sent"] == 25 and figures["escrow"] == (escrow == "--escrow")
    assert ("plain" in figures["waits"]) == (escrow == "--no-escrow")  # the replicas ran as asked
    assert figures["admitted"] == 20 and figures["over_admitted"] == 0  # three writers of one shard, still exact
    assert figures["stateless_writes"] == 0 and figures["ledger_writes"] >= 1
