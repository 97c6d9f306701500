"""The HTTP contract over real HTTPS: bad input classes, failure decisions, timeouts, health endpoints.

These use controllable engines because an engine that raises or stalls cannot be
written as a policy; the real engine with real policies is in test_contract.py.
"""

import asyncio
import base64
import io

import orjson
import pytest

from policy.decision import Decision
from webhook.server.decisionlog import DecisionLog
from webhook.server.state import PROBATION, State

from tests.webhook.wh_harness import make_pki, review, running
from tests.webhook.wh_standin import DENY_QUOTA, WARN_LONG, FixedEngine, RaisingEngine, StallingEngine, admission_module


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"))


def make_state(engine, **kw):
    log = io.BytesIO()
    state = State(engine=engine, snapshot=object(), admission=admission_module(), log=DecisionLog(log), **kw)
    state.cluster.synced = True
    return state, log


async def post(session, url, body, *, raw=False):
    data = body if raw else orjson.dumps(body)
    async with session.post(url, data=data, headers={"Content-Type": "application/json"}) as resp:
        return resp.status, await resp.read()


BAD_INPUTS = [
    # (name, body bytes, want_status, want_error)
    ("not json", b"{nope", 400, "NotJSON"),
    ("json array", b"[1, 2]", 400, "NotAdmissionReview"),
    ("wrong apiVersion", orjson.dumps({**review(), "apiVersion": "admission.k8s.io/v1beta1"}), 400, "NotAdmissionReview"),
    ("wrong kind", orjson.dumps({**review(), "kind": "TokenReview"}), 400, "NotAdmissionReview"),
    ("no request", orjson.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}), 400, "MissingRequest"),
    ("no uid", orjson.dumps(review(uid="")), 400, "MissingUID"),
    ("too large", b"{" + b" " * (2 * 1024 * 1024) + b"}", 413, "TooLarge"),
]


@pytest.mark.parametrize("name,body,want_status,want_error", BAD_INPUTS, ids=[b[0] for b in BAD_INPUTS])
def test_bad_input_is_a_json_4xx_and_the_server_keeps_serving(pki, name, body, want_status, want_error):
    async def scenario():
        state, log = make_state(FixedEngine(Decision(allowed=True)), max_body=1024 * 1024)
        async with running(state, pki) as (base, session, _):
            status, raw = await post(session, base + "/validate", body, raw=True)
            assert (status, orjson.loads(raw)["error"]) == (want_status, want_error)
            assert b"Traceback" not in raw
            ok_status, ok = await post(session, base + "/validate", review())
            assert ok_status == 200 and orjson.loads(ok)["response"]["allowed"] is True
        assert state.metrics.value("allot_bad_requests_total", {"reason": want_error}) == 1

    asyncio.run(scenario())


def test_denial_carries_status_and_patch_only_on_mutate(pki):
    async def scenario():
        state, _ = make_state(FixedEngine(DENY_QUOTA))
        async with running(state, pki) as (base, session, _):
            body = review()
            _, raw = await post(session, base + "/validate", body)
            resp = orjson.loads(raw)
            assert resp["apiVersion"] == "admission.k8s.io/v1" and resp["kind"] == "AdmissionReview"
            r = resp["response"]
            assert r["uid"] == body["request"]["uid"] and r["allowed"] is False
            assert r["status"]["code"] == 403 and "30 in use + 4 requested" in r["status"]["message"]

        state, _ = make_state(FixedEngine(WARN_LONG))
        async with running(state, pki) as (base, session, _):
            _, raw = await post(session, base + "/validate", review())
            validated = orjson.loads(raw)["response"]
            _, raw = await post(session, base + "/mutate", review())
            mutated = orjson.loads(raw)["response"]
        assert "patch" not in validated and "patchType" not in validated
        assert mutated["patchType"] == "JSONPatch"
        assert orjson.loads(base64.b64decode(mutated["patch"]))[0]["path"] == "/spec/priorityClassName"
        assert all(len(w) <= 120 for w in validated["warnings"]) and len(validated["warnings"][0]) >= 100
        assert validated["auditAnnotations"] == {"rule-r": "fired"}

    asyncio.run(scenario())


@pytest.mark.parametrize("on_error,want_allowed", [("deny", False), ("allow", True)])
def test_engine_exception_becomes_the_failure_decision(pki, on_error, want_allowed):
    async def scenario():
        state, log = make_state(RaisingEngine(), on_error=on_error)
        async with running(state, pki) as (base, session, _):
            body = review()
            status, raw = await post(session, base + "/validate", body)
            again, _ = await post(session, base + "/validate", review())
        r = orjson.loads(raw)["response"]
        assert (status, again) == (200, 200)
        assert r["allowed"] is want_allowed and r["uid"] == body["request"]["uid"]
        assert r["auditAnnotations"]["on-error"] == f"{on_error}: exception"
        lines = [orjson.loads(x) for x in log.getvalue().splitlines()]
        assert any(x.get("error") == "decide" and x["uid"] == body["request"]["uid"] for x in lines)
        assert state.metrics.value("allot_failure_decisions_total", {"cause": "exception", "outcome": on_error}) == 2

    asyncio.run(scenario())


def test_timeout_is_answered_before_the_deadline_with_on_error(pki):
    async def scenario():
        engine = StallingEngine(limit=5.0)
        state, _ = make_state(engine, on_error="allow")
        async with running(state, pki) as (base, session, _):
            loop = asyncio.get_running_loop()
            t0 = loop.time()
            status, raw = await post(session, base + "/validate?timeout=1s", review())
            took = loop.time() - t0
            engine.release.set()
        r = orjson.loads(raw)["response"]
        assert status == 200 and took < 1.0
        assert r["allowed"] is True and r["auditAnnotations"]["on-error"] == "allow: timeout"
        assert state.metrics.value("allot_failure_decisions_total", {"cause": "timeout", "outcome": "allow"}) == 1

    asyncio.run(scenario())


def test_fast_engine_moves_inline_after_probation(pki):
    async def scenario():
        state, _ = make_state(FixedEngine(Decision(allowed=True)))
        async with running(state, pki) as (base, session, _):
            for _ in range(PROBATION):
                await post(session, base + "/validate", review())
        assert state.timer.inline_ok(9.0) and not state.timer.inline_ok(0.0)

    asyncio.run(scenario())


def test_readyz_reflects_engine_and_cluster_sync(pki):
    async def scenario():
        state, _ = make_state(None)
        state.cluster.synced = False
        async with running(state, pki) as (base, session, _):
            async with session.get(base + "/readyz") as resp:
                not_ready = (resp.status, await resp.json())
            async with session.get(base + "/healthz") as resp:
                healthy = resp.status
            status, raw = await post(session, base + "/validate", review())
            state.swap_engine(FixedEngine(Decision(allowed=True)), state.policy)
            state.cluster.synced = True
            async with session.get(base + "/readyz") as resp:
                ready = resp.status
        assert not_ready[0] == 503 and not not_ready[1]["ready"]
        assert "cluster state not synced yet" in not_ready[1]["problems"]
        assert healthy == 200 and ready == 200
        assert orjson.loads(raw)["response"]["allowed"] is False  # no engine: the default deny, never silent allow

    asyncio.run(scenario())


def test_metrics_and_decision_log_line(pki):
    async def scenario():
        state, log = make_state(FixedEngine(DENY_QUOTA))
        async with running(state, pki) as (base, session, _):
            body = review()
            await post(session, base + "/validate", body)
            async with session.get(base + "/metrics") as resp:
                text = await resp.text()
        assert 'allot_decisions_total{endpoint="validate",result="denied"} 1.0' in text
        assert 'allot_block_findings_total{block="quota team-a",code="QuotaExceeded",mode="enforce"} 1.0' in text
        assert "allot_decision_duration_seconds_bucket" in text
        line = orjson.loads(log.getvalue().splitlines()[-1])
        assert line["uid"] == body["request"]["uid"] and line["result"] == "denied"
        assert (line["kind"], line["namespace"], line["blocks"]) == ("Pod", "team-a", ["quota team-a"])
        assert line["duration_ms"] >= 0

    asyncio.run(scenario())


TIMEOUTS = [
    # (query value, want_seconds)
    ("10s", 10.0),
    ("1m30s", 90.0),
    ("500ms", 0.5),
    ("1.5s", 1.5),
    ("10", None),
    ("soon", None),
    ("", None),
]


@pytest.mark.parametrize("text,want_seconds", TIMEOUTS)
def test_parse_timeout_reads_go_durations(text, want_seconds):
    from webhook.server.review import parse_timeout

    assert parse_timeout(text) == want_seconds


def test_a_parser_bug_becomes_the_failure_decision_not_a_500(pki):
    class BuggyAdmission:
        ReviewError = admission_module().ReviewError
        respond = staticmethod(admission_module().respond)

        @staticmethod
        def parse_review(body):
            raise KeyError("surprise")

    async def scenario():
        state, log = make_state(FixedEngine(Decision(allowed=True)))
        state.admission = BuggyAdmission
        async with running(state, pki) as (base, session, _):
            body = review()
            status, raw = await post(session, base + "/validate", body)
        r = orjson.loads(raw)["response"]
        assert status == 200 and r["uid"] == body["request"]["uid"] and r["allowed"] is False
        assert r["auditAnnotations"]["on-error"] == "deny: exception"
        assert any(orjson.loads(x).get("error") == "decide" for x in log.getvalue().splitlines())

    asyncio.run(scenario())
