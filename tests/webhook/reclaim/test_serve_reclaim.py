"""`allot serve --reclaim on` over real HTTPS: a validating answer with a plan is sent only once its record is in the API (the double).

Also: the mutating answer, a dryRun request and `--reclaim audit` record nothing; the flags'
contradictions are usage errors.
"""

from __future__ import annotations

import argparse
import asyncio

import orjson
import pytest

from policy.cluster.snapshot import ClusterSnapshot
from tests.webhook.reclaim.reclaim_world import (
    NS,
    POLICY,
    ask,
    double_api,
    gpu_node,
    running,
    store,
)
from tests.webhook.wh_harness import make_pki
from tests.webhook.wh_harness import running as serving
from webhook.errors import UsageError
from webhook.reclaim import ReclaimController
from webhook.server.reload import PolicyReloader, PolicySource
from webhook.server.state import State, warm_engine

OBJS = [gpu_node("n1"), gpu_node("n2"), running("b1", "team-b", "n1", minute=1), running("b2", "team-b", "n2", minute=2)]


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"))


def server_state(tmp_path, api, mode: str) -> State:
    (tmp_path / "t.policy").write_text(POLICY)
    state = State(on_error="deny")
    assert PolicyReloader(state, PolicySource(str(tmp_path))).load_now()
    state.swap_snapshot(ClusterSnapshot.from_objects(OBJS), source="file", synced=True)
    state.reclaim = ReclaimController(api, NS, mode=mode, name="r0")
    warm_engine(state.engine, state.snapshot)
    return state


async def post(session, url: str, req: dict) -> dict:
    body = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": req}
    async with session.post(url, data=orjson.dumps(body), headers={"Content-Type": "application/json"}) as resp:
        assert resp.status == 200
        return orjson.loads(await resp.read())["response"]


def test_a_validating_answer_with_a_plan_leaves_after_its_record_and_the_leader_then_evicts(tmp_path, pki):
    async def scenario():
        async with double_api() as (double, api):
            store(double, OBJS)
            state = server_state(tmp_path, api, "on")
            async with serving(state, pki, tasks=(state.reclaim.run,)) as (url, session, _):
                mutated = await post(session, url + "/mutate", {**ask(), "uid": "m-1"})
                dry = await post(session, url + "/validate", {**ask(), "uid": "d-1", "dryRun": True})
                assert mutated["allowed"] and dry["allowed"]
                assert double.items("configmaps", NS) == []  # neither records a plan
                answer = await post(session, url + "/validate", {**ask(), "uid": "v-1"})
                assert answer["allowed"] and any("reclaims 8 GPUs" in w for w in answer["warnings"]), answer
                (cm,) = double.items("configmaps", NS)  # stored before the answer left
                assert cm["metadata"]["name"] == "allot-plan-v-1"
                assert orjson.loads(cm["data"]["plan"])["victims"][0]["name"] == "b2"
                assert orjson.loads(cm["data"]["request"])["uid"] == "v-1"
                double.put("pods", {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "new", "namespace": "team-a"}})
                for _ in range(100):
                    if double.evictions:
                        break
                    await asyncio.sleep(0.05)
                assert [(ns, n) for ns, n, _ in double.evictions] == [("team-b", "b2")]
                assert state.ready()[1]["reclaim"]["leading"] is True

    asyncio.run(scenario())


def test_audit_mode_answers_the_same_and_writes_nothing(tmp_path, pki):
    async def scenario():
        async with double_api() as (double, api):
            store(double, OBJS)
            state = server_state(tmp_path, api, "audit")
            async with serving(state, pki, tasks=(state.reclaim.run,)) as (url, session, _):
                answer = await post(session, url + "/validate", {**ask(), "uid": "v-2"})
                assert answer["allowed"] and any("reclaims 8 GPUs" in w for w in answer["warnings"])
                await asyncio.sleep(0.3)
                assert double.items("configmaps", NS) == [] and double.items("leases") == [] and double.evictions == []

    asyncio.run(scenario())


@pytest.mark.parametrize(("argv", "message"), [
    (["--cluster", "c.yaml", "--reclaim", "on"], "--reclaim on: plans are carried out through the Kubernetes API"),
    (["--kubeconfig", "k", "--reclaim", "on", "--reclaim-lease", "0"], "--reclaim-lease 0.0: give 1 to 3600 seconds"),
    (["--kubeconfig", "k", "--reclaim", "on", "--reclaim-namespace", "Bad_NS"], "--reclaim-namespace Bad_NS"),
])
def test_contradicting_reclaim_flags_are_usage_errors(argv, message):
    from webhook.cli.serve import add_arguments, options_from

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    with pytest.raises(UsageError, match=message.replace(".", r"\.")):
        options_from(parser.parse_args(["--policy", "p", "--self-signed", *argv]), None)
