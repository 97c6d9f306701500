"""`parse_review` checks a well-formed review without formatting messages; a bad one still names its first bad field."""

from __future__ import annotations

import copy

import pytest

from policy.admission import ReviewError, parse_review, wrap_manifest

GOOD = wrap_manifest({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "a"}},
                     user="u", groups=["g"], operation="CREATE")


def _with(path: str, value):
    doc = copy.deepcopy(GOOD)
    *parents, last = path.split(".")
    at = doc
    for p in parents:
        at = at[p]
    if value is KeyError:
        del at[last]
    else:
        at[last] = value
    return doc


def _delete():
    doc = _with("request.operation", "DELETE")
    doc["request"]["oldObject"], doc["request"]["object"] = doc["request"]["object"], None
    return doc


CONNECT = wrap_manifest({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "a"}},
                        user="u", groups=["g"], operation="CONNECT")

CASES = [
    {"name": "not an object", "body": [], "want_error": "AdmissionReview must be a JSON object"},
    {"name": "apiVersion", "body": _with("apiVersion", "v1"), "want_error": "apiVersion must be admission.k8s.io/v1, got 'v1'"},
    {"name": "kind", "body": _with("kind", "X"), "want_error": "kind must be AdmissionReview, got 'X'"},
    {"name": "no request", "body": _with("request", KeyError), "want_error": "request must be an object"},
    {"name": "uid empty", "body": _with("request.uid", ""), "want_error": "request.uid must be a non-empty string"},
    {"name": "uid number", "body": _with("request.uid", 7), "want_error": "request.uid must be a non-empty string"},
    {"name": "kind not object", "body": _with("request.kind", "Pod"), "want_error": "request.kind must be an object with a string kind"},
    {"name": "resource", "body": _with("request.resource", {"resource": 1}),
     "want_error": "request.resource must be an object with a string resource"},
    {"name": "operation", "body": _with("request.operation", "PATCH"),
     "want_error": "request.operation must be one of CREATE, UPDATE, DELETE, CONNECT, got 'PATCH'"},
    {"name": "userInfo", "body": _with("request.userInfo", []), "want_error": "request.userInfo must be an object"},
    {"name": "groups", "body": _with("request.userInfo.groups", "g"), "want_error": "request.userInfo.groups must be a list"},
    {"name": "object", "body": _with("request.object", []), "want_error": "request.object must be an object or null"},
    {"name": "oldObject", "body": _with("request.oldObject", 1), "want_error": "request.oldObject must be an object or null"},
    {"name": "namespace", "body": _with("request.namespace", 1), "want_error": "request.namespace must be a string"},
    {"name": "name", "body": _with("request.name", {}), "want_error": "request.name must be a string"},
    {"name": "subResource", "body": _with("request.subResource", 1), "want_error": "request.subResource must be a string"},
    {"name": "dryRun", "body": _with("request.dryRun", "yes"), "want_error": "request.dryRun must be a boolean"},
    {"name": "well formed", "body": GOOD, "want_error": None},
    # A CREATE without its object cannot be decided: it used to pass and be allowed by silence.
    {"name": "null object on CREATE", "body": _with("request.object", None),
     "want_error": "request.object is null: a CREATE must carry the object it creates or updates"},
    {"name": "empty object on CREATE", "body": _with("request.object", {}),
     "want_error": "request.object is empty: a CREATE must carry the object it creates or updates"},
    {"name": "no object on CREATE", "body": _with("request.object", KeyError),
     "want_error": "request.object is missing: a CREATE must carry the object it creates or updates"},
    {"name": "kind of another case", "body": _with("request.kind.kind", "pod"),
     "want_error": "request.kind.kind 'pod' contradicts request.object.kind 'Pod'"},
    {"name": "namespace contradicts the object", "body": _with("request.namespace", "default"),
     "want_error": "request.namespace 'default' contradicts request.object.metadata.namespace 'a'"},
    {"name": "object namespace a number", "body": _with("request.object.metadata.namespace", 3),
     "want_error": "request.object.metadata.namespace must be a string, got number"},
    {"name": "exec on a CREATE", "body": _with("request.subResource", "exec"),
     "want_error": "request.subResource 'exec' belongs to CONNECT requests, but request.operation is 'CREATE'"},
    {"name": "status on a CREATE", "body": _with("request.subResource", "status"),
     "want_error": "request.subResource 'status' belongs to UPDATE requests, but request.operation is 'CREATE'"},
    {"name": "CONNECT without a sub-resource", "body": _with("request.operation", "CONNECT"),
     "want_error": "request.operation CONNECT needs a request.subResource (exec, attach, portforward, proxy)"},
    {"name": "object namespace absent", "body": _with("request.object.metadata.namespace", KeyError), "want_error": None},
    {"name": "DELETE with a null object", "body": _with("request.operation", "DELETE") and _delete(), "want_error": None},
    {"name": "CONNECT pods/exec", "body": CONNECT, "want_error": None},
    {"name": "userInfo absent", "body": _with("request.userInfo", KeyError), "want_error": None},
]


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_parse_review(case):
    if case["want_error"] is None:
        assert parse_review(case["body"]) is case["body"]["request"]
        return
    with pytest.raises(ReviewError) as err:
        parse_review(case["body"])
    assert str(err.value) == case["want_error"]
