"""Over real HTTPS: the malformed cases of issue 12 are answered 400 or denied, on both endpoints, and the server keeps deciding."""

from __future__ import annotations

import asyncio
import io

import orjson
import pytest

from policy.cluster.snapshot import ClusterSnapshot
from tests.robust.malformed_cases import BASES, CLUSTER, ISSUE_CASES
from tests.robust.robust_engine import real_engine
from tests.webhook.wh_harness import make_pki, running
from webhook.server.decisionlog import DecisionLog
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
