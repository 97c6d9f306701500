"""`allot fmt --diff`: a unified diff of what fmt would change, nothing written, exit 1 if any (like --check)."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from webhook.cli import main

UGLY = "quota q {   gpus 8 }\n# kept\nrule r {\n for namespace == \"x\"\n deny \"no\" }\n"


def run(capsys, *argv):
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_diff_shows_the_change_and_writes_nothing(tmp_path, capsys):
    p = tmp_path / "q.policy"
    p.write_text(UGLY)
    code, out, err = run(capsys, "fmt", "--diff", str(p))
    assert code == 1 and p.read_text() == UGLY
    assert out.startswith(f"--- {p}\n+++ {p} (formatted)\n@@ ")
    assert "-quota q {   gpus 8 }\n" in out and "+  gpus 8\n" in out
    assert "1 of 1 file(s) would be reformatted" in err


@pytest.mark.skipif(shutil.which("patch") is None, reason="needs patch(1)")
def test_the_diff_applies_to_what_fmt_writes(tmp_path, capsys):
    p = tmp_path / "q.policy"
    p.write_text(UGLY)
    _, diff, _ = run(capsys, "fmt", "--diff", str(p))
    copy = tmp_path / "copy.policy"
    copy.write_text(UGLY)
    subprocess.run(["patch", "-s", str(copy)], input=diff, text=True, check=True)
    assert run(capsys, "fmt", str(p))[0] == 0
    assert copy.read_text() == p.read_text() != UGLY


def test_a_formatted_file_has_no_diff_and_exits_0(tmp_path, capsys):
    p = tmp_path / "q.policy"
    p.write_text(UGLY)
    run(capsys, "fmt", str(p))
    code, out, _ = run(capsys, "fmt", "--diff", str(p))
    assert (code, out) == (0, "")


def test_a_file_without_final_newline_is_marked(tmp_path, capsys):
    p = tmp_path / "q.policy"
    p.write_text("quota q { gpus 8 }")
    code, out, _ = run(capsys, "fmt", "--diff", str(p))
    assert code == 1 and "\\ No newline at end of file\n" in out
