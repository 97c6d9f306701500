"""docs/blocks.md: reads never reach an `agents` block — no read verb compiles, and the webhook
configurations Allot emits for the whole library ask the API server for writes and CONNECT only."""

from __future__ import annotations

import pathlib

import pytest

from lang import compile_policies
from policy.manifests.configurations import mutating_configuration, validating_configuration

REPO = pathlib.Path(__file__).resolve().parents[3]
ADMITTED = {"CREATE", "UPDATE", "DELETE", "CONNECT", "*"}


@pytest.mark.parametrize("verb", ["get", "list", "watch"])
def test_a_read_verb_is_an_error(verb):
    text = f'agents a {{\n  identity "x" in groups\n  allow {verb} pods\n}}\n'
    _, diags = compile_policies([("a.policy", text)])
    assert [d.code for d in diags if d.severity == "error"] == ["E0109"]


def test_the_emitted_configurations_ask_for_no_reads():
    files = sorted((REPO / "policies").rglob("*.policy"))
    ps, diags = compile_policies([(str(f), f.read_text()) for f in files])
    assert not [d for d in diags if d.severity == "error"]
    ops = {op for cfg in (validating_configuration(ps), mutating_configuration(ps))
           for hook in cfg["webhooks"] for rule in hook["rules"] for op in rule["operations"]}
    assert ops and ops <= ADMITTED, ops
    assert "CONNECT" in ops  # the agents entry asks for exec/attach, the only non-write it can see


def test_the_doc_says_so():
    doc = (REPO / "docs" / "blocks.md").read_text()
    agents = doc[doc.index("## agents"):doc.index("## rule")]
    assert "Reads never reach an `agents` block" in agents and "`allow get pods` is `E0109`" in agents
