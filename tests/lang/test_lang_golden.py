"""Golden diagnostics: each `golden/*.policy` renders exactly as its `.out` (ALLOT_UPDATE_GOLDEN=1 rewrites them)."""

import os
import pathlib

import pytest

import lang
from lang.diagnostics import render_all, summarize

GOLDEN = pathlib.Path(__file__).with_name("golden")
CASES = sorted(GOLDEN.glob("*.policy"))


def render_check(path: pathlib.Path) -> str:
    rel = f"golden/{path.name}"
    text = path.read_text(encoding="utf-8")
    _, diags = lang.compile_policies([(rel, text)])
    body = render_all(diags, {rel: text})
    return (body + "\n\n" if body else "") + summarize(diags, 1) + "\n"


def test_there_are_golden_cases():
    assert len(CASES) >= 5


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_golden_diagnostics(path):
    got = render_check(path)
    expected = path.with_suffix(".out")
    if os.environ.get("ALLOT_UPDATE_GOLDEN") == "1":
        expected.write_text(got, encoding="utf-8")
    assert expected.exists(), f"no golden output for {path.name}; run with ALLOT_UPDATE_GOLDEN=1"
    assert got == expected.read_text(encoding="utf-8")


def test_golden_outputs_have_policies():
    orphans = [p.name for p in GOLDEN.glob("*.out") if not p.with_suffix(".policy").exists()]
    assert orphans == []
