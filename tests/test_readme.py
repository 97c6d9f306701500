"""The README's Quickstart test command is the one CI runs."""

import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_ci_runs_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    block = re.search(r"## Quickstart.*?```sh\n(.*?)```", readme, re.S)
    assert block, "README has no Quickstart shell block"
    lines = [l.split("#")[0].strip() for l in block.group(1).splitlines() if l.strip()]
    assert len(lines) == 2, lines
    assert "allot demo" in lines[0]
    ci = (ROOT / ".ci" / "run").read_text()
    assert lines[1] in ci
