"""`allot demo`'s per-step check: exact codes, the reason text, the affinity domain, the placement — each can fail."""

from __future__ import annotations

import base64

import orjson
import pytest

from webhook.cli.demo import _reason, check, reasons
from webhook.demo.script import Expect, Step, steps

DENIED = {"allowed": False, "status": {"message": "allot denied: agents x: no allow matches CREATE pods (p.policy:1:1); "
                                                  "rule r: a sleeping agent holds 1 GPUs; release them (p.policy:9:3)"}}


def _patched(rack: str) -> dict:
    ops = [{"op": "add", "path": "/spec/affinity", "value": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "topology.acme.io/block", "operator": "In", "values": ["b2"]},
                                                    {"key": "topology.acme.io/rack", "operator": "In", "values": [rack]}]}]}}}}]
    return {"allowed": True, "patch": base64.b64encode(orjson.dumps(ops)).decode()}


@pytest.mark.parametrize(
    "expect, resp, logged, want_problems",
    [
        (Expect(False, codes=("AgentNotAllowed", "RuleDenied"), reason="a sleeping agent holds 1 GPUs"), DENIED,
         {"codes": ["RuleDenied", "AgentNotAllowed"]}, []),
        (Expect(False, codes=("RuleDenied",)), DENIED, {"codes": ["RuleDenied", "AgentNotAllowed"]}, ["reason codes"]),
        (Expect(False, codes=("RuleDenied", "AgentNotAllowed"), reason="holds 2 GPUs"), DENIED,
         {"codes": ["RuleDenied", "AgentNotAllowed"]}, ["reason saying"]),
        (Expect(True, affinity="r13", placement="r13"), _patched("r13"), {"codes": [], "placement": {"value": "r13"}}, []),
        (Expect(True, affinity="r1", placement="r1"), _patched("r13"), {"codes": [], "placement": {"value": "r13"}},
         ["node affinity to r1", "placement in r1"]),
        (Expect(True), DENIED, {"codes": []}, ["expected allowed"]),
    ],
    ids=["all-hold", "codes-exact", "reason-text", "affinity", "affinity-exact", "verdict"],
)
def test_check_reports_each_expectation_that_does_not_hold(expect, resp, logged, want_problems):
    problems = check(Step("t", "validate", {}, expect), 200, resp, logged)
    assert len(problems) == len(want_problems)
    for got, want in zip(problems, want_problems):
        assert want in got


def test_the_table_shows_the_reason_the_step_is_about():
    assert reasons(DENIED)[1].startswith("rule r: a sleeping agent")
    step = Step("t", "validate", {}, Expect(False, reason="a sleeping agent holds"))
    assert _reason(DENIED, step).startswith("rule r: a sleeping agent") and _reason(DENIED, step).endswith("(+1 more)")


def test_every_step_states_its_expectation():
    script = steps()
    assert len(script) >= 18
    for s in script:
        assert s.expect.describe().startswith("ALLOWED" if s.expect.allowed else "DENIED")
        if not s.expect.allowed:
            assert s.expect.codes and s.expect.reason, s.title  # a denial says which codes and which words
