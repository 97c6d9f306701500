"""Malformed => never allowed: one structural corruption of a denied review is answered 400 or `allowed: false`.

Bounded in CI (`ALLOT_FUZZ_EXAMPLES`, default 200 here); run with more on demand:
`ALLOT_FUZZ_EXAMPLES=20000 python3 -m pytest -q tests/robust/test_malformed_never_allowed.py`.
"""

from __future__ import annotations

import os

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from policy.cluster.snapshot import ClusterSnapshot
from tests.robust.malformed_cases import BASES, CLUSTER, ISSUE_CASES, corrupted
from tests.robust.robust_engine import real_engine
from tests.robust.test_review_fuzz import _Errors
from webhook.server.review import handle
from webhook.server.state import State

EXAMPLES = int(os.environ.get("ALLOT_FUZZ_EXAMPLES", "200"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
NOW = 1_800_000_000.0


class _Log(_Errors):
    """Keeps error lines and decision records (their reason codes)."""

    def __init__(self) -> None:
        super().__init__()
        self.records: list[dict] = []

    def record(self, **fields) -> None:
        self.records.append(fields)


@pytest.fixture(scope="module")
def state():
    return State(engine=real_engine(), snapshot=ClusterSnapshot.from_text(CLUSTER.read_text()), log=_Log(), max_body=1 << 20)


def answer(state, body: bytes, mutate: bool) -> tuple[int, dict]:
    """(status, document) of the pure handler; an engine exception fails the test (normalization never raises)."""
    before = len(state.log.errors)
    status, doc = handle(body, mutate=mutate, state=state, now=NOW)
    assert "decide" not in [e.get("stage") for e in state.log.errors[before:]], state.log.errors[before:]
    return status, doc


@pytest.mark.parametrize("mutate", [False, True])
@pytest.mark.parametrize("name", sorted(BASES))
def test_every_base_is_denied(state, name, mutate):
    status, doc = answer(state, orjson.dumps(BASES[name]), mutate)
    assert status == 200 and doc["response"]["allowed"] is False, doc


def refused(status: int, doc: dict) -> bool:
    """HTTP 400, or an answered denial."""
    return status == 400 or (status == 200 and doc["response"]["allowed"] is False)


@FUZZ
@given(corrupted(), st.booleans())
def test_one_corruption_of_a_denied_review_is_never_allowed(state, case, mutate):
    name, how, body = case
    status, doc = answer(state, body, mutate)
    assert refused(status, doc), (name, how, status, doc)


@pytest.mark.parametrize("case", ISSUE_CASES, ids=[c["name"] for c in ISSUE_CASES])
def test_the_issue_cases_are_refused_with_a_located_reason(state, case):
    status, doc = answer(state, case["body"], False)
    assert status == case["want_status"], doc
    if status == 400:
        assert doc["error"] == case["want_code"] and case["want_text"] in doc["message"], doc
        return
    resp = doc["response"]
    assert resp["allowed"] is False and case["want_text"] in resp["status"]["message"], resp
    assert case["want_code"] in state.log.records[-1]["codes"], state.log.records[-1]["codes"]
