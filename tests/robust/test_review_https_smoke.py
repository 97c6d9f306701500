"""Real HTTPS with the real engine: the nastiest bodies get a JSON answer and the server keeps serving."""

from __future__ import annotations

import asyncio
import io

import orjson
import pytest

from policy.cluster.snapshot import ClusterSnapshot
from tests.robust.robust_engine import real_engine
from tests.robust.test_review_fuzz import NASTY, REVIEWS, SMALL
from tests.webhook.wh_harness import make_pki, running
from webhook.server.decisionlog import DecisionLog
from webhook.server.state import State


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki-robust"))


def test_nasty_bodies_over_https_then_a_good_review_still_decides(pki):
    state = State(engine=real_engine(), snapshot=ClusterSnapshot.from_text(SMALL.read_text()),
                  log=DecisionLog(io.BytesIO()), max_body=1 << 20)
    state.cluster.synced = True
    bodies = [NASTY[name] for name in sorted(NASTY)] + [b"\x00\xff" * 50, b"{}", b"null", b"[" * 2000]
    good = orjson.dumps(REVIEWS[0])

    async def scenario():
        async with running(state, pki) as (base, session, _):
            for endpoint in ("/validate", "/mutate"):
                for body in bodies:
                    async with session.post(base + endpoint, data=body, headers={"Content-Type": "application/json"}) as resp:
                        raw = await resp.read()
                        assert resp.status in (200, 400, 413), (resp.status, raw[:200])
                        doc = orjson.loads(raw)
                        assert "response" in doc if resp.status == 200 else set(doc) == {"error", "message"}
                        assert b"Traceback" not in raw
            async with session.post(base + "/validate", data=good) as resp:
                doc = orjson.loads(await resp.read())
                assert resp.status == 200 and doc["response"]["uid"] == REVIEWS[0]["request"]["uid"]
            async with session.get(base + "/healthz") as resp:
                assert resp.status == 200

    asyncio.run(asyncio.wait_for(scenario(), 60))
    assert state.metrics.value("allot_bad_requests_total", {"reason": "NotJSON"}) >= 2
