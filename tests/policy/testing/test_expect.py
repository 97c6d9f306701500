"""Meta-tests of the expectation checks: a wrong expectation of either polarity must fail."""

import pytest

from policy.decision import Decision, Placement, Reason
from policy.testing.cases import Expect
from policy.testing.expect import compare_decision

OBJ = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "labels": {"app": "x"}}}


def deny(block="rule no-big", code="RuleDenied", message="no-big: too many GPUs: 8", mode="enforce"):
    """A decision with one reason; denied when the reason enforces."""
    r = Reason(code, block, "p.policy:1:1", message, mode)
    return Decision(allowed=mode != "enforce", reasons=(r,), blocks=(block,))


ALLOW = Decision(allowed=True)
LABEL_PATCH = ({"op": "add", "path": "/metadata/labels/team", "value": "ml"},)
PATCHED = Decision(allowed=True, patch=LABEL_PATCH)
PLACED = Decision(allowed=True, placement=Placement("fabric", "rack", "topology.acme.io/rack", "r3", {"n1": 1}))
WARNED = Decision(allowed=True, warnings=("rule w: declare a floor",), audit={"allot.dev/rule": "w fired"})

CASES = [
    # (name, expect, decision, want_fields)
    ("deny expected, allowed got", {"allowed": False}, ALLOW, ["allowed"]),
    ("allow expected, denied got", {"allowed": True}, deny(), ["allowed"]),
    ("deny expected and got", {"allowed": False, "denied_by": ["rule no-big"]}, deny(), []),
    ("allow expected and got", {"allowed": True}, ALLOW, []),
    ("wrong denying block", {"allowed": False, "denied_by": ["quota a"]}, deny(), ["denied_by"]),
    ("extra denying block counts", {"allowed": False, "denied_by": ["rule no-big"]},
     Decision(False, (deny().reasons[0], deny("quota a", "QuotaExceeded").reasons[0])), ["denied_by"]),
    ("warn reason is not a denial", {"allowed": True, "denied_by": []}, deny(mode="warn"), []),
    ("codes exact", {"allowed": False, "codes": ["RuleDenied"]}, deny(), []),
    ("codes missing one", {"allowed": False, "codes": ["RuleDenied", "QuotaExceeded"]}, deny(), ["codes"]),
    ("codes [] with a reason", {"allowed": True, "codes": []}, deny(mode="audit"), ["codes"]),
    ("message pattern matches", {"allowed": False, "messages": [r"too many GPUs: \d+$"]}, deny(), []),
    ("message pattern matches nothing", {"allowed": False, "messages": ["quota"]}, deny(), ["messages"]),
    ("messages [] with a reason", {"allowed": False, "messages": []}, deny(), ["messages"]),
    ("warning pattern matches", {"allowed": True, "warnings": ["floor"]}, WARNED, []),
    ("warning pattern matches nothing", {"allowed": True, "warnings": ["ceiling"]}, WARNED, ["warnings"]),
    ("warnings [] with a warning", {"allowed": True, "warnings": []}, WARNED, ["warnings"]),
    ("warnings [] with none", {"allowed": True, "warnings": []}, ALLOW, []),
    ("audit key and value", {"allowed": True, "audit": {"allot.dev/rule": "^w "}}, WARNED, []),
    ("audit value mismatch", {"allowed": True, "audit": {"allot.dev/rule": "^x"}}, WARNED, ["audit"]),
    ("audit key missing", {"allowed": True, "audit": {"other": "."}}, WARNED, ["audit"]),
    ("patch exact", {"allowed": True, "patch": [dict(LABEL_PATCH[0])]}, PATCHED, []),
    ("patch value mismatch", {"allowed": True, "patch": [{**LABEL_PATCH[0], "value": "cv"}]}, PATCHED, ["patch"]),
    ("patch [] but one op", {"allowed": True, "patch": []}, PATCHED, ["patch"]),
    ("patch expected, none got", {"allowed": True, "patch": [dict(LABEL_PATCH[0])]}, ALLOW, ["patch"]),
    ("patched subset", {"allowed": True, "patched": {"metadata": {"labels": {"team": "ml"}}}}, PATCHED, []),
    ("patched subset wrong value", {"allowed": True, "patched": {"metadata": {"labels": {"team": "cv"}}}}, PATCHED, ["patched"]),
    ("patched null means absent", {"allowed": True, "patched": {"metadata": {"labels": {"team": None}}}}, PATCHED, ["patched"]),
    ("patched null and absent", {"allowed": True, "patched": {"metadata": {"labels": {"team": None}}}}, ALLOW, []),
    ("patched exact misses a key", {"allowed": True, "patched_exact": True, "patched": {"metadata": {"labels": {"team": "ml"}}}}, PATCHED, ["patched"]),
    ("patched exact whole object", {"allowed": True, "patched_exact": True, "patched": {**OBJ, "metadata": {"name": "p", "labels": {"app": "x", "team": "ml"}}}}, PATCHED, []),
    ("patch that does not apply", {"allowed": True, "patched": {"kind": "Pod"}},
     Decision(True, patch=({"op": "remove", "path": "/spec/nothing"},)), ["patched"]),
    ("placement value", {"allowed": True, "placement": "r3"}, PLACED, []),
    ("placement wrong value", {"allowed": True, "placement": "r4"}, PLACED, ["placement"]),
    ("placement fields", {"allowed": True, "placement": {"value": "r3", "level": "rack"}}, PLACED, []),
    ("placement wrong level", {"allowed": True, "placement": {"value": "r3", "level": "block"}}, PLACED, ["placement"]),
    ("placement expected, none got", {"allowed": True, "placement": "r3"}, ALLOW, ["placement"]),
    ("placement null, one got", {"allowed": True, "placement": None}, PLACED, ["placement"]),
    ("placement not mentioned", {"allowed": True}, PLACED, []),
]


@pytest.mark.parametrize("name,expect,decision,want_fields", CASES, ids=[c[0] for c in CASES])
def test_compare_decision(name, expect, decision, want_fields):
    got = compare_decision(Expect.model_validate(expect), decision, OBJ)
    assert [m.field for m in got] == want_fields


def test_mismatch_diff_shows_expected_and_got():
    [m] = compare_decision(Expect.model_validate({"allowed": True, "patch": []}), PATCHED, OBJ)
    diff = m.diff()
    assert diff.startswith("--- expected\n+++ got")
    assert '+    "path": "/metadata/labels/team",' in diff


def test_allowed_mismatch_explains_the_engine_verdict():
    [m] = compare_decision(Expect.model_validate({"allowed": True}), deny(), OBJ)
    assert "rule no-big [enforce] RuleDenied: no-big: too many GPUs: 8" in m.note
