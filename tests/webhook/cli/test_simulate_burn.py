"""`allot simulate` reports each budget's burn over a trace and when it is spent; `--against` shows how a budget change moves that."""

from __future__ import annotations

import json
import subprocess
import sys

from policy.budget.calendar import days_from_civil
from tests.policy.builders import gpu_container, node, pod

T0 = days_from_civil(2025, 6, 1) * 86_400  # trace seconds are seconds since the epoch
GH = 3_600_000_000  # milli-GPU-ms in a GPU-hour


def policy(tmp_path, name: str, research_hours: int):
    d = tmp_path / name
    d.mkdir(exist_ok=True)
    (d / "b.policy").write_text(f'budget research {{\n  for namespace == "research"\n  gpu_hours {research_hours}\n  period month\n}}\n'
                                'budget everyone {\n  gpu_hours 100\n  period month\n}\n')
    return d


def simulate(tmp_path, *extra: str) -> subprocess.CompletedProcess:
    cluster = tmp_path / "cluster.json"
    n = node("n1", gpus="8")
    n["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    cluster.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": [n]}))
    trace = tmp_path / "trace.jsonl"
    # 4 GPUs for 1 h from 0 s, 2 GPUs for 2 h from 1800 s: 8 GPU-hours in 2.5 h
    trace.write_text("\n".join(json.dumps(r) for r in (
        {"at": T0, "object": pod("a", "research", containers=[gpu_container("4")]), "duration": 3600},
        {"at": T0 + 1800, "object": pod("b", "research", containers=[gpu_container("2")]), "duration": 7200})) + "\n")
    return subprocess.run([sys.executable, "-m", "webhook", "simulate", "--policy", str(policy(tmp_path, "a", 4)),
                           "--cluster", str(cluster), "--trace", str(trace), *extra], capture_output=True, text=True, check=False)


def test_each_budget_burns_exactly_and_is_spent_at_the_instant_it_reaches_its_amount(tmp_path):
    r = simulate(tmp_path, "--json")
    assert r.returncode == 0, r.stderr
    rows = {b["budget"]: b for b in json.loads(r.stdout)["budgets"]}
    research, everyone = rows["research"], rows["everyone"]
    assert research["used"] == everyone["used"] == 8 * GH
    assert everyone["burn_mgpu"] == 3200  # 8 GPU-hours over 2.5 h
    # 2 GPU-hours by 1800 s, then 6 GPUs: the other 2 in 1200 s
    assert (research["spent_at"], research["how"]) == ((T0 + 3000) * 1000, "in the trace")
    # 92 GPU-hours left at 3.2 GPUs from the end (9000 s): 103,500 s later
    assert (everyone["spent_at"], everyone["how"]) == ((T0 + 9000 + 103_500) * 1000, "projected")


def test_against_a_bigger_budget_moves_the_day_it_is_spent(tmp_path):
    r = simulate(tmp_path, "--against", str(policy(tmp_path, "b", 6)))
    assert r.returncode == 0, r.stderr
    # 6 GPU-hours: 5 by 3600 s (a leaves), the last one at 2 GPUs in 1800 s: 5400 s, 2400 s later than 3000 s
    assert "research: 4 -> 6 GPU-hours; spent 2025-06-01 00:50 UTC -> 2025-06-01 01:30 UTC (+0.6 h)" in r.stdout
    assert "everyone: 100 -> 100 GPU-hours; spent 2025-06-02 07:15 UTC -> 2025-06-02 07:15 UTC (+0 h)" in r.stdout
    plain = simulate(tmp_path)
    assert "research: 8 of 4 GPU-hours used (2025-06), burn 3.2 GPUs; spent 2025-06-01 00:50 UTC (in the trace)" in plain.stdout
