"""The real `policies/` set, compiled once per test module, for robustness tests."""

from __future__ import annotations

import pathlib

import lang
from policy.engine import Engine
from webhook.sources import read_policy_sources

ROOT = pathlib.Path(__file__).resolve().parents[2]


def real_policy_set():
    """The compiled `policies/` directory (every example set, as `allot test policies/` loads it)."""
    policy_set, diagnostics = lang.compile_policies(read_policy_sources([str(ROOT / "policies")]))
    assert policy_set is not None and not [d for d in diagnostics if d.severity == "error"], diagnostics
    return policy_set


def real_engine() -> Engine:
    """A fresh Engine over the real policy set."""
    return Engine(real_policy_set())
