"""`allot bench serve` judges each of issue 33's budgets from the figures, and prints each verdict."""

from __future__ import annotations

import json

import pytest

from webhook.bench import serve


def _run(rps: float, p99: float, handler: float, c: int) -> dict:
    return {"concurrency": c, "rps": rps, "p50_ms": p99 / 2, "p99_ms": p99, "server_cpu_us_per_request": 100.0,
            **({"handler_us_per_request": handler} if handler else {})}


def _results(c1_rps=0.85, c1_p99=1.2, c16_rps=0.65, c16_p99=3.0, handler=80.0, decision=50.0) -> dict:
    floor = {1: (1000.0, 1.0), 16: (4000.0, 1.0)}
    got = {"decision_us": decision}
    for c, (ratio, p99) in ((1, (c1_rps, c1_p99)), (16, (c16_rps, c16_p99))):
        frps, fp99 = floor[c]
        got[f"c{c}"] = {"floor": _run(frps, fp99, 0, c), "allot": _run(frps * ratio, fp99 * p99, handler, c)}
    return got


CASES = [
    {"name": "all within", "results": _results(), "ok": True},
    {"name": "c1 req/s under 0.8", "results": _results(c1_rps=0.79), "ok": False},
    {"name": "c1 p99 over 1.25", "results": _results(c1_p99=1.3), "ok": False},
    {"name": "c16 req/s under 0.6", "results": _results(c16_rps=0.59), "ok": False},
    {"name": "c16 p99 has no budget", "results": _results(c16_p99=9.0), "ok": True},
    {"name": "handler over 2x the decision", "results": _results(handler=101.0, decision=50.0), "ok": False},
]


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_each_budget_decides_the_verdict(case, capsys):
    assert serve._report(case["results"], True, 100) is case["ok"]
    doc = json.loads(capsys.readouterr().out)
    assert doc["within_budget"] is case["ok"]
    assert doc["budget"]["rps_ratio_min"] == {"c1": 0.8, "c16": 0.6}


def test_the_table_prints_every_ratio_and_its_verdict(capsys):
    serve._report(_results(c16_rps=0.31), False, 100)
    out = capsys.readouterr().out
    assert "decision    50.0 us/req" in out
    assert "req/s 0.85 (>= 0.8: ok)" in out and "p99 1.20 (<= 1.25: ok)" in out
    assert "req/s 0.31 (>= 0.6: OVER BUDGET)" in out and "p99 3.00 (no budget)" in out
    assert out.count("handler/decision 1.60 (<= 2.0: ok)") == 2
