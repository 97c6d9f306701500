"""Over real HTTPS: the malformed cases of issue 12, and a bounded sample of fuzzed corruptions, are answered 400 or denied on both endpoints."""

from __future__ import annotations

import asyncio
import http.client
import io
import threading

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from policy.cluster.snapshot import ClusterSnapshot
from tests.robust.malformed_cases import BASES, CLUSTER, ISSUE_CASES, corrupted
from tests.robust.test_malformed_never_allowed import EXAMPLES
from tests.robust.robust_engine import real_engine
from tests.webhook.wh_harness import make_pki, running
from webhook.server.decisionlog import DecisionLog
from webhook.server import tls
from webhook.server.state import State


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki-malformed"))


def test_malformed_reviews_over_https_are_never_allowed(pki):
    state = State(engine=real_engine(), snapshot=ClusterSnapshot.from_text(CLUSTER.read_text()),
                  log=DecisionLog(io.BytesIO()), max_body=1 << 20)
    state.cluster.synced = True
    seen = []

    async def scenario():
        async with running(state, pki) as (base, session, _):
            for endpoint in ("/validate", "/mutate"):
                for case in ISSUE_CASES:
                    async with session.post(base + endpoint, data=case["body"], headers={"Content-Type": "application/json"}) as resp:
                        doc = orjson.loads(await resp.read())
                        seen.append((endpoint, case["name"], resp.status, doc))
            # still deciding well-formed reviews afterwards: the base of the quota cases is denied with its arithmetic
            async with session.post(base + "/validate", data=orjson.dumps(BASES["quota: 64 GPUs in team-a"])) as resp:
                seen.append(("/validate", "base", resp.status, orjson.loads(await resp.read())))

    asyncio.run(asyncio.wait_for(scenario(), 60))
    assert len(seen) == 2 * len(ISSUE_CASES) + 1
    for endpoint, name, status, doc in seen[:-1]:
        want = next(c for c in ISSUE_CASES if c["name"] == name)
        assert status == want["want_status"], (endpoint, name, status, doc)
        if status == 400:
            assert doc["error"] == "InvalidRequest" and want["want_text"] in doc["message"], (endpoint, name, doc)
        else:
            resp = doc["response"]
            assert resp["allowed"] is False and "patch" not in resp, (endpoint, name, resp)
            assert want["want_text"] in resp["status"]["message"], (endpoint, name, resp)
    *_, last = seen
    assert last[2] == 200 and "28 in use + 64 requested > 32 nominal + 8 borrowable" in last[3]["response"]["status"]["message"]
    assert state.metrics.value("allot_bad_requests_total", {"reason": "InvalidRequest"}) == 2 * sum(c["want_status"] == 400 for c in ISSUE_CASES)


@pytest.fixture(scope="module")
def server(pki):
    """The real server on a thread of its own (its own event loop), so a hypothesis test can post to it synchronously."""
    state = State(engine=real_engine(), snapshot=ClusterSnapshot.from_text(CLUSTER.read_text()),
                  log=DecisionLog(io.BytesIO()), max_body=1 << 20)
    state.cluster.synced = True
    loop = asyncio.new_event_loop()
    ready, box = threading.Event(), {}

    async def main():
        box["stop"] = asyncio.Event()
        async with running(state, pki) as (base, _, _tls):
            box["port"] = int(base.rsplit(":", 1)[1])
            ready.set()
            await box["stop"].wait()

    thread = threading.Thread(target=loop.run_until_complete, args=(main(),), daemon=True)
    thread.start()
    assert ready.wait(30), "server did not start"
    yield box["port"], tls.client_context(pki["ca"])
    loop.call_soon_threadsafe(box["stop"].set)
    thread.join(10)


def post(server, path: str, body: bytes) -> tuple[int, dict]:
    port, ctx = server
    conn = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=30)
    try:
        conn.request("POST", path, body=body, headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        return resp.status, orjson.loads(resp.read())
    finally:
        conn.close()


@settings(max_examples=min(EXAMPLES, 25), deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(corrupted(), st.sampled_from(["/validate", "/mutate"]))
def test_fuzzed_corruptions_over_https_are_never_allowed(server, case, path):
    name, how, body = case
    status, doc = post(server, path, body)
    assert status == 400 or (status == 200 and doc["response"]["allowed"] is False), (name, how, status, doc)
