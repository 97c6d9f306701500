"""`allot --version` prints the version pyproject.toml declares and exits 0."""

from __future__ import annotations

import pathlib
import tomllib

import pytest

from webhook.cli import main

REPO = pathlib.Path(__file__).resolve().parents[3]


def test_version_is_the_projects(capsys):
    want = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0
    assert capsys.readouterr().out == f"allot {want}\n"


def test_version_after_a_command_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["check", "--version"])
    assert exc.value.code == 2
