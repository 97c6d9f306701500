"""`allot usage --cluster DUMP`: the stored meter adopted, plus what ran since, per budget; run-out at the burn rate."""

from __future__ import annotations

import json
from pathlib import Path

from webhook.cli import main

FIX = Path(__file__).resolve().parents[2] / "fixtures" / "budget"
ARGS = ["usage", "--policy", str(FIX / "budgets.policy"), "--cluster", str(FIX / "cluster.yaml")]


def test_usage_prints_used_left_burn_and_run_out(capsys):
    assert main([*ARGS, "--at", "2025-06-03T00:00:00Z"]) == 0
    out, err = capsys.readouterr()
    lines = out.splitlines()
    # stored: 19,870 H100-hours at 22:00 UTC; a 64-GPU pod since then: 2 h x 64 = 128 more
    assert lines[1].split() == ["research", "2025-06", "19,998", "H100-hours", "20,000", "2", "64", "2025-06-03", "02:01", "CEST"]
    assert lines[2].split()[:6] == ["everyone", "2025-06-03", "0", "GPU-hours", "500", "500"]
    assert "old-name: in the meter object, declared by no budget" in err


def test_usage_json_has_exact_integers_and_says_spent(capsys):
    assert main([*ARGS, "--at", "2025-06-03T01:00:00Z", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    research = next(r for r in doc["budgets"] if r["budget"] == "research")
    assert research["used"] == 71_532_000_000_000 + 64_000 * 3 * 3_600_000 and research["spent"] is True


def test_a_bad_time_is_a_usage_error(capsys):
    assert main([*ARGS, "--at", "tomorrow"]) == 2
    assert "is not an RFC 3339 time" in capsys.readouterr().err
