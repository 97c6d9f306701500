"""The AdmissionReview v1 envelope: strict parsing, the response shape, wrapping bare manifests."""

from __future__ import annotations

import base64
import json

import pytest
from tests.policy.engine.engine_builders import pod

from policy.admission import ReviewError, parse_review, respond, wrap_manifest
from policy.decision import Decision, Reason

REVIEW = wrap_manifest(pod(gpus=1), user="alice", groups=["devs"], operation="CREATE")


def broken(**changes):
    body = json.loads(json.dumps(REVIEW))
    for path, value in changes.items():
        node = body
        *parents, last = path.split(".")
        for p in parents:
            node = node[p]
        if value is ...:
            del node[last]
        else:
            node[last] = value
    return body


@pytest.mark.parametrize(
    "body, want_error",
    [
        ([], "JSON object"),
        (broken(apiVersion="admission.k8s.io/v1beta1"), "apiVersion"),
        (broken(kind="Review"), "kind must be AdmissionReview"),
        (broken(request=...), "request must be an object"),
        (broken(**{"request.uid": ...}), "request.uid"),
        (broken(**{"request.uid": ""}), "request.uid"),
        (broken(**{"request.operation": "PATCH"}), "request.operation"),
        (broken(**{"request.kind": "Pod"}), "request.kind"),
        (broken(**{"request.object": "x"}), "request.object"),
        (broken(**{"request.userInfo": []}), "request.userInfo"),
        (broken(**{"request.dryRun": "yes"}), "request.dryRun"),
    ],
)
def test_parse_review_rejects_bad_shapes(body, want_error):
    with pytest.raises(ReviewError, match=want_error):
        parse_review(body)


def test_parse_review_returns_the_request():
    assert parse_review(REVIEW) is REVIEW["request"]


DENY = Reason("QuotaExceeded", "quota team-a", "p.policy:3:1", "team-a: 30 in use + 4 requested > 32 nominal + 0 borrowable")
PATCH = ({"op": "add", "path": "/metadata/labels", "value": {"team": "a"}},)


@pytest.mark.parametrize(
    "decision, mutate, want_keys, want_code",
    [
        (Decision(allowed=True), False, {"uid", "allowed", "status"}, 200),
        (Decision(allowed=True, patch=PATCH), False, {"uid", "allowed", "status"}, 200),  # /validate: no patch
        (Decision(allowed=True, patch=PATCH), True, {"uid", "allowed", "status", "patchType", "patch"}, 200),
        (Decision(allowed=False, reasons=(DENY,), patch=PATCH), True, {"uid", "allowed", "status"}, 403),
        (Decision(allowed=True, warnings=("w",), audit={"quota.team-a": "x"}), False, {"uid", "allowed", "status", "warnings", "auditAnnotations"}, 200),
    ],
)
def test_respond_shape(decision, mutate, want_keys, want_code):
    out = respond(REVIEW["request"], decision, mutate=mutate)
    assert out["apiVersion"] == "admission.k8s.io/v1" and out["kind"] == "AdmissionReview"
    resp = out["response"]
    assert set(resp) == want_keys
    assert resp["uid"] == REVIEW["request"]["uid"] and resp["allowed"] is decision.allowed
    assert resp["status"]["code"] == want_code
    if "patch" in resp:
        assert resp["patchType"] == "JSONPatch"
        assert json.loads(base64.b64decode(resp["patch"])) == [dict(p) for p in PATCH]


def test_denial_status_message_carries_block_arithmetic_and_line():
    resp = respond(REVIEW["request"], Decision(allowed=False, reasons=(DENY,)), mutate=False)["response"]
    assert resp["status"]["message"] == "allot denied: quota team-a: 30 in use + 4 requested > 32 nominal + 0 borrowable (p.policy:3:1)"


def test_warnings_never_exceed_120_characters():
    resp = respond(REVIEW["request"], Decision(allowed=True, warnings=("w" * 500,)), mutate=False)["response"]
    assert [len(w) for w in resp["warnings"]] == [120]


@pytest.mark.parametrize(
    "operation, want_object, want_old, want_sub",
    [("CREATE", True, False, None), ("UPDATE", True, True, None), ("DELETE", False, True, None), ("CONNECT", False, False, "exec")],
)
def test_wrap_manifest(operation, want_object, want_old, want_sub):
    review = wrap_manifest(pod("p", "ns1"), user="bob", groups=["g"], operation=operation)
    req = parse_review(review)
    assert (req["object"] is not None and req["object"].get("kind") == "Pod") is want_object
    assert (req["oldObject"] is not None) is want_old
    assert req.get("subResource") == want_sub
    assert req["namespace"] == "ns1" and req["name"] == "p" and req["resource"]["resource"] == "pods"
    assert req["userInfo"] == {"username": "bob", "groups": ["g"]}


def test_wrap_manifest_uid_is_deterministic_and_input_sensitive():
    a = wrap_manifest(pod("p"), user="bob", groups=[], operation="CREATE")["request"]["uid"]
    b = wrap_manifest(pod("p"), user="bob", groups=[], operation="CREATE")["request"]["uid"]
    c = wrap_manifest(pod("q"), user="bob", groups=[], operation="CREATE")["request"]["uid"]
    assert a == b != c


def test_wrap_manifest_group_kind():
    pg = {"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup", "metadata": {"name": "g", "namespace": "t"}}
    req = wrap_manifest(pg, user="u", groups=[], operation="CREATE")["request"]
    assert req["kind"] == {"group": "scheduling.x-k8s.io", "version": "v1alpha1", "kind": "PodGroup"}
    assert req["resource"]["resource"] == "podgroups"
