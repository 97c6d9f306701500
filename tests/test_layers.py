"""Imports point one way: lang <- policy <- webhook; lang and policy do no I/O libraries."""

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]

FORBIDDEN = {
    "lang": {"policy", "webhook", "aiohttp", "kubernetes", "socket", "requests", "time", "datetime"},
    "policy": {"webhook", "aiohttp", "kubernetes", "socket", "requests", "time", "datetime"},
}


def _imports(path: pathlib.Path) -> set[str]:
    tree = ast.parse(path.read_text(), str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_layer_imports_point_one_way(package):
    offenders = {}
    for path in sorted((ROOT / package).rglob("*.py")):
        bad = _imports(path) & FORBIDDEN[package]
        if bad:
            offenders[str(path.relative_to(ROOT))] = sorted(bad)
    assert offenders == {}


def test_layer_check_sees_a_violation(tmp_path):
    bad = tmp_path / "x.py"
    bad.write_text("import webhook.cli\nfrom policy import decision\n")
    assert {"webhook", "policy"} <= _imports(bad)
