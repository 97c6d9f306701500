"""docs/webhook.md's `allot eval` section: its exit-code table is what the command does, row by row."""

from __future__ import annotations

import pathlib
import re

import pytest
import yaml

from webhook.cli import main

REPO = pathlib.Path(__file__).resolve().parents[3]
POLICY = 'quota solo {\n  for namespace == "solo"\n  gpus 4\n}\n'


def pod(gpus: int) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "solo"},
            "spec": {"containers": [{"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]}}


def documented_exits() -> dict[int, str]:
    doc = (REPO / "docs" / "webhook.md").read_text()
    section = doc[doc.index("## Deciding one request offline: `allot eval`"):doc.index("## Replaying the decision log")]
    return {int(code): meaning for code, meaning in re.findall(r"^\| (\d) \| (.+) \|$", section, re.M)}


@pytest.fixture
def files(tmp_path):
    (tmp_path / "p.policy").write_text(POLICY)
    (tmp_path / "bad.policy").write_text('quota x {\n  gpus "four"\n}\n')
    (tmp_path / "small.yaml").write_text(yaml.safe_dump(pod(2)))
    (tmp_path / "big.yaml").write_text(yaml.safe_dump(pod(8)))
    (tmp_path / "two.yaml").write_text(yaml.safe_dump_all([pod(1), pod(1)]))
    return tmp_path


ROWS = [
    # (documented exit, argv after `eval`, with {d} for the directory)
    (0, ["--policy", "{d}/p.policy", "--now", "0", "{d}/small.yaml"]),
    (3, ["--policy", "{d}/p.policy", "--now", "0", "{d}/big.yaml"]),
    (1, ["--policy", "{d}/bad.policy", "--now", "0", "{d}/small.yaml"]),
    (2, ["--policy", "{d}/p.policy", "--now", "0", "{d}/two.yaml"]),
    (2, ["--policy", "{d}/p.policy", "--now", "nan", "{d}/small.yaml"]),
    (2, ["--policy", "{d}/p.policy", "--cluster", "{d}/missing.yaml", "{d}/small.yaml"]),
]


def test_the_table_lists_exactly_the_codes_tested():
    assert sorted(documented_exits()) == sorted({code for code, _ in ROWS})


@pytest.mark.parametrize("want,argv", ROWS)
def test_each_documented_exit(files, capsys, want, argv):
    code = main(["eval", *(a.format(d=files) for a in argv)])
    capsys.readouterr()
    assert code == want, documented_exits()[want]


def test_now_makes_the_answer_repeatable(files, capsys):
    argv = ["eval", "--policy", f"{files}/p.policy", "--now", "1800000000", "--explain", f"{files}/big.yaml"]
    main(argv)
    first = capsys.readouterr().out
    main(argv)
    assert capsys.readouterr().out == first
