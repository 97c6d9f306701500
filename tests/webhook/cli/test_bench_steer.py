"""`allot bench steer`: steer decisions timed memoised and plain, through the real CLI entry point."""

from __future__ import annotations

import json

import pytest

from webhook.cli import main


def test_bench_steer_times_both_ways_and_they_steer_alike(tmp_path, capsys):
    code = main(["bench", "steer", "--openb", str(tmp_path), "--sizes", "300", "--decisions", "8", "--json"])
    captured = capsys.readouterr()
    assert code == 0 and "openb CSVs not found" in captured.err
    (row,) = json.loads(captured.out)["clusters"]
    assert (row["cluster"], row["nodes"], row["decisions"], row["same_nodes"]) == ("synthetic 300", 300, 8, True)
    assert row["running_pods"] > 300  # filled to 60 % of ~5 GPUs a node before timing
    assert 0 < row["p50_ms"] <= row["p99_ms"] and 0 < row["plain_p50_ms"] <= row["plain_p99_ms"]


def test_bench_steer_table(tmp_path, capsys):
    assert main(["bench", "steer", "--openb", str(tmp_path), "--sizes", "200", "--decisions", "3"]) == 0
    assert "synthetic 200" in capsys.readouterr().out


@pytest.mark.parametrize("bad", [["--sizes", "ten"], ["--sizes", "0"], ["--decisions", "0"], ["--fill", "99"]])
def test_bench_steer_rejects_bad_sizes(bad, capsys):
    assert main(["bench", "steer", *bad]) == 2
    assert capsys.readouterr().err.strip()
