"""`webhook.review.handle` never raises and never fails inside: 200 with the uid echoed, or 400/413 with a JSON error."""

from __future__ import annotations

import copy
import os
import pathlib

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from policy.cluster.snapshot import ClusterSnapshot
from tests.policy.builders import gpu_container, pod, podgroup, request
from tests.robust.robust_engine import real_engine
from tests.robust.robust_objects import GARBAGE, _paths
from webhook.server.decisionlog import DecisionLog
from webhook.server.review import handle
from webhook.server.state import State

EXAMPLES = int(os.environ.get("ALLOT_FUZZ_EXAMPLES", "150"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
SMALL = pathlib.Path(__file__).resolve().parents[1] / "fixtures" / "cluster" / "small.yaml"
NOW = 1_800_000_000.0


class _Errors(DecisionLog):
    """A decision log that keeps `error` lines (the handler logs engine exceptions there)."""

    def __init__(self) -> None:
        super().__init__(None)
        self.errors: list[dict] = []

    def error(self, **fields) -> None:
        self.errors.append(fields)


@pytest.fixture(scope="module")
def state():
    return State(engine=real_engine(), snapshot=ClusterSnapshot.from_text(SMALL.read_text()), log=_Errors(), max_body=1 << 20)


def review(req: dict) -> dict:
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": req}


REVIEWS = [
    review(request(pod("p", "team-a", gpus="2", labels={"acme.io/workload": "training"}))),
    review(request(pod("p", "inference-x", containers=[gpu_container("1", **{"nvidia.com/gpumem": "4000"})]))),
    review(request(pod("p", "agents-sandbox", gpus="1", labels={"agents.acme.io/state": "sleeping"}))),
    review(request(podgroup("g", minMember=2), kind="PodGroup", resource="podgroups")),
    review(request(pod("p", "team-b", gpus="8"), operation="UPDATE", old=pod("p", "team-b", gpus="1"))),
    review(request(pod("p", "team-a", gpus="1", annotations={"gpu-fraction": "0.5"}), dry_run=True)),
]


def check(state, body: bytes, *, mutate: bool) -> tuple[int, dict]:
    before = len(state.log.errors)
    status, doc = handle(body, mutate=mutate, state=state, now=NOW)
    orjson.dumps(doc)  # always serializable
    if status == 200:
        resp = doc["response"]
        assert doc["apiVersion"] == "admission.k8s.io/v1" and doc["kind"] == "AdmissionReview"
        assert resp["uid"] == orjson.loads(body)["request"]["uid"]
        assert isinstance(resp["allowed"], bool)
        assert not mutate or "patch" not in resp or resp["patchType"] == "JSONPatch"
        assert mutate or "patch" not in resp
        stages = [e.get("stage") for e in state.log.errors[before:]]
        assert "decide" not in stages, state.log.errors[before:]  # the engine raised: a bug, answered by --on-error
    else:
        assert status in (400, 413), (status, doc)
        assert set(doc) == {"error", "message"} and isinstance(doc["message"], str)
    return status, doc


json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-(2**63), 2**64 - 1), st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=10)),
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)),
    max_leaves=20,
)


@FUZZ
@given(st.binary(max_size=200), st.booleans())
def test_random_bytes(state, body, mutate):
    check(state, body, mutate=mutate)


@FUZZ
@given(json_values, st.booleans())
def test_random_json(state, value, mutate):
    check(state, orjson.dumps(value), mutate=mutate)


@st.composite
def mutated_review(draw) -> dict:
    """A real-looking AdmissionReview with one to three fields given wrong types or odd values."""
    doc = copy.deepcopy(draw(st.sampled_from(REVIEWS)))
    for _ in range(draw(st.integers(1, 3))):
        paths = [p for p in _paths(doc) if p[:2] != ("request", "userInfo")]  # USER_INFO: a known gap, below
        path = draw(st.sampled_from(paths))
        value = draw(st.one_of(GARBAGE, json_values, st.text(alphabet=st.characters(min_codepoint=0x80), max_size=8)))
        at = doc
        for step in path[:-1]:
            at = at[step]
        at[path[-1]] = copy.deepcopy(value)  # st.just values are shared between examples
    return doc


@FUZZ
@given(mutated_review(), st.booleans())
def test_mutated_reviews(state, doc, mutate):
    try:
        body = orjson.dumps(doc)
    except orjson.JSONEncodeError:  # ints beyond 64 bits: not JSON the API server could send
        return
    check(state, body, mutate=mutate)


NASTY = {
    "deep list": b"[" * 100_000 + b"]" * 100_000,
    "deep object in request": orjson.dumps(review({**request(pod("p", gpus="1")), "object": None}))[:-2]
    + b',"x":' + b'{"a":' * 500 + b"1" + b"}" * 500 + b"}}",
    "deep labels": orjson.dumps(review(request(pod("p", gpus="1")))).replace(b'"labels":{', b'"labels":{"z":' + b"[" * 900 + b"]" * 900 + b",", 1),
    "too large": b" " * ((1 << 20) + 1),
    "not utf-8": b'{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"\xff"}}',
    "lone surrogate": b'{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"\\ud800"}}',
    "nul in names": orjson.dumps(review(request(pod("p\x00", "team-a\x00", gpus="1")))),
    "huge quantity": orjson.dumps(review(request(pod("p", containers=[gpu_container("9" * 4000)])))),
    "huge exponent": orjson.dumps(review(request(pod("p", containers=[gpu_container("1e999999999")])))),
    "emoji everywhere": orjson.dumps(review(request(pod("🔥", "🔥", gpus="1", labels={"🔥": "🔥"})))),
}


@pytest.mark.parametrize("mutate", [False, True])
@pytest.mark.parametrize("name", sorted(NASTY))
def test_nasty_bodies(state, name, mutate):
    check(state, NASTY[name], mutate=mutate)


# The API server always sends userInfo.username as a string and groups as strings; anything else is
# a malformed review (400), not an engine failure answered with the --on-error decision.
USER_INFO = {
    "username a boolean": {"username": False, "groups": ["dev"]},
    "username a list": {"username": ["alice"], "groups": ["dev"]},
    "group a list": {"username": "alice", "groups": [["dev"]]},
}


@pytest.mark.parametrize("name", sorted(USER_INFO))
def test_user_info_of_wrong_types_is_a_400_not_an_engine_failure(state, name):
    doc = review({**request(pod("p", "team-a", gpus="1")), "userInfo": USER_INFO[name]})
    status, _ = check(state, orjson.dumps(doc), mutate=False)
    assert status == 400
