"""`allot bench place`'s node-event figure, through the real CLI entry point."""

from __future__ import annotations

import json

import pytest

from webhook.bench.place import NODE_CHANGES
from webhook.cli import main


def test_bench_place_times_every_node_change_its_undoing_and_deletes_and_adds(capsys):
    code = main(["bench", "place", "--nodes", "600", "--queries", "2", "--events", "20", "--burst", "10",
                 "--node-events", "25", "--baseline-queries", "1", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0
    kinds = out["node_events"]
    want = {k for c in NODE_CHANGES for k in (c, c + " undone")} | {"deleted", "added", "heartbeat"}
    assert set(kinds) == want
    assert all(kinds[c]["runs"] == 5 and kinds[c + " undone"]["runs"] == 5 for c in NODE_CHANGES)
    assert kinds["deleted"]["runs"] == kinds["added"]["runs"] == 5 and kinds["heartbeat"]["runs"] == 25
    # every sample of a change is in the pooled figure (heartbeats are not changes: reported apart)
    assert out["event_node_runs"] == 25 * 2 + 5 * 2
    assert 0 < out["event_node_p50_ms"] <= out["event_node_p99_ms"]
    assert out["budgets"]["node_event_p99_le_0.05ms"] == (out["event_node_p99_ms"] <= 0.05)
    assert "pod_delete_p99_le_0.05ms" in out["budgets"]
    # the fixed-work loop is timed once before every pooled event, never before a heartbeat
    floor = out["machine_floor"]
    assert floor["runs"] == out["event_node_runs"] and 0 < floor["p50_ms"] <= floor["p99_ms"]
    # the ratio is taken before the figures are rounded to 0.1 µs: allow that rounding's error, no more
    slack = floor["p99_ms"] / floor["p50_ms"] * (0.00005 / floor["p50_ms"] + 0.00005 / floor["p99_ms"]) + 0.005
    assert abs(floor["tail_ratio"] - floor["p99_ms"] / floor["p50_ms"]) <= slack


def test_bench_place_table_prints_the_node_event_line(capsys):
    code = main(["bench", "place", "--nodes", "300", "--queries", "1", "--events", "5", "--burst", "0",
                 "--node-events", "5", "--baseline-queries", "1"])
    text = capsys.readouterr().out
    assert code == 0
    assert "node event (a change placement sees" in text and "taint undone" in text and "node_event_p99_le_0.05ms" in text
    assert "the machine's own tail: a loop of fixed work (400 additions)" in text


@pytest.mark.parametrize("bad", ["0", "-3"])
def test_bench_place_rejects_no_node_events(bad, capsys):
    assert main(["bench", "place", "--node-events", bad]) == 2
    assert "--node-events" in capsys.readouterr().err
