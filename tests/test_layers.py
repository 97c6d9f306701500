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


# --- no import loops between modules -------------------------------------------------------------
# Every import counts, at module top, inside functions (lazy) and under TYPE_CHECKING: a loop that only
# runs late still ties two modules into one room. A piece both need moves down to a module both import.


def _module_name(path: pathlib.Path, root: pathlib.Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(root: pathlib.Path = ROOT, packages=("lang", "policy", "webhook")) -> dict[str, set[str]]:
    """Module -> the project modules it imports (`from pkg import mod` counts as importing `pkg.mod`)."""
    files = {_module_name(p, root): p for pkg in packages for p in sorted((root / pkg).rglob("*.py"))}
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        is_pkg = path.name == "__init__.py"
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                deps.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = name.split(".")[: len(name.split(".")) - node.level + (1 if is_pkg else 0)]
                    base = ".".join(anchor + ([base] if base else []))
                for a in node.names:
                    deps.add(f"{base}.{a.name}" if f"{base}.{a.name}" in files else base)
        graph[name] = {d for d in deps if d in files and d != name}
    return graph


def import_loops(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected groups of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    loops: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on.add(start)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                group = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    group.append(w)
                    if w == v:
                        break
                if len(group) > 1:
                    loops.append(sorted(group))
    return loops


def test_no_import_loops_between_modules():
    assert import_loops(import_graph()) == []


def test_loop_check_sees_a_loop(tmp_path):
    pkg = tmp_path / "lang"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("def f():\n    from lang import b\n")
    (pkg / "b.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from lang.a import f\n")
    (pkg / "c.py").write_text("from lang.a import f\n")
    graph = import_graph(tmp_path, packages=("lang",))
    assert graph["lang.c"] == {"lang.a"}
    assert import_loops(graph) == [["lang.a", "lang.b"]]
