"""The server calls the ledger through its face only (webhook/ledger/face.py), and the ledger never calls the server back."""

from __future__ import annotations

import ast
import pathlib

import pytest

from webhook.ledger import face

ROOT = pathlib.Path(__file__).resolve().parents[3]
FACE = {n.name for n in ast.walk(ast.parse((ROOT / "webhook/ledger/face.py").read_text()))
        if isinstance(n, ast.ClassDef) and n.name == "Face"
        for n in n.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))} | set(face.ATTRIBUTES)


def ledger_calls(source: str) -> set[str]:
    """Attribute names read on `<x>.ledger` or on a name `ledger` in `source`."""
    out = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute):
            v = node.value
            if (isinstance(v, ast.Attribute) and v.attr == "ledger") or (isinstance(v, ast.Name) and v.id == "ledger"):
                out.add(node.attr)
    return out


def ledger_imports(source: str) -> set[str]:
    """Modules of webhook.ledger (or the package) that `source` imports."""
    out = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("webhook.ledger"):
            out.add(node.module)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.startswith("webhook.ledger"))
    return out


SERVER = sorted((ROOT / "webhook/server").glob("*.py"))


@pytest.mark.parametrize("path", SERVER, ids=lambda p: p.name)
def test_the_server_calls_only_the_face(path):
    text = path.read_text()
    assert ledger_calls(text) - FACE == set()
    assert ledger_imports(text) <= {"webhook.ledger"}  # the package's top, never a room behind the face


def test_the_ledger_imports_nothing_of_the_server():
    offenders = {p.name: sorted(m for m in _modules(p) if m.startswith("webhook.server"))
                 for p in sorted((ROOT / "webhook/ledger").glob("*.py"))}
    assert {k: v for k, v in offenders.items() if v} == {}


def _modules(path: pathlib.Path) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
    return out


def test_the_face_check_sees_a_call_behind_the_face():
    source = ("async def h(state):\n    ledger = state.ledger\n    ledger.admit_asked([], None)\n"
              "    state.ledger.escrow_metrics.request.observe(1)\n    from webhook.ledger.peers import PeerKeys\n")
    assert ledger_calls(source) - FACE == {"admit_asked", "escrow_metrics"}
    assert ledger_imports(source) == {"webhook.ledger.peers"}


def test_the_face_names_what_the_server_needs():
    assert {"involves", "commit_decision", "forget", "stale", "not_ready", "detail", "peer_ask", "answer_peer",
            "enable_peer_channel", "close"} <= FACE
