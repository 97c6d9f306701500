"""Over real HTTPS: an admitted Deployment holds the quota; its DELETE releases the hold, so a second Deployment fits at once."""

import asyncio
import copy
import io
import uuid

import aiohttp
import orjson

from webhook.server import tls
from webhook.server.serving import ServeOptions, start

from tests.policy.engine.test_hold_release import dep

POLICY = 'quota serving { for namespace == "serving"  gpus 4 }\n'
CLUSTER = "apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: Namespace\n  metadata: {name: serving}\n"


def review(operation, obj=None, old=None):
    o = obj or old
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": str(uuid.uuid4()),
        "kind": {"group": "apps", "version": "v1", "kind": "Deployment"},
        "resource": {"group": "apps", "version": "v1", "resource": "deployments"},
        "name": o["metadata"]["name"], "namespace": "serving", "operation": operation,
        "userInfo": {"username": "alice", "groups": ["system:authenticated"]},
        "object": obj, "oldObject": old, "dryRun": False,
        "options": {"apiVersion": "meta.k8s.io/v1", "kind": f"{operation.title()}Options"},
    }}


def named(name, replicas, uid):
    d = dep(replicas, uid=uid)
    d["metadata"]["name"] = name
    return d


def test_a_delete_releases_the_hold_so_a_second_deployment_fits_at_once(tmp_path):
    (tmp_path / "pol").mkdir()
    (tmp_path / "pol" / "q.policy").write_text(POLICY)
    (tmp_path / "cluster.yaml").write_text(CLUSTER)
    opts = ServeOptions(policy=str(tmp_path / "pol"), cluster=str(tmp_path / "cluster.yaml"), host="127.0.0.1", port=0,
                        self_signed=True, certs_dir=str(tmp_path / "certs"), decision_log=io.BytesIO(), buffered_log=False,
                        reload_interval=3600, tls_interval=3600)
    first, second = named("rerank", 4, "u-1"), named("embed", 2, "u-2")

    async def main():
        running = await start(opts)
        try:
            async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=tls.client_context(running.ca_path))) as s:
                async def call(body):
                    async with s.post(running.url + "/validate", data=orjson.dumps(body)) as resp:
                        assert resp.status == 200, await resp.text()
                        return (await resp.json())["response"]

                out = [await call(review("CREATE", first)),   # 4 GPUs: the whole quota, held
                       await call(review("CREATE", second)),  # 2 more: denied while the hold stands
                       await call(review("DELETE", old=copy.deepcopy(first))),  # the DELETE releases it
                       await call(review("CREATE", second)),  # fits at once, not after the 120 s expiry
                       await call(review("CREATE", named("third", 3, "u-3")))]  # 2 + 3 > 4: the second's hold counts
                return out
        finally:
            await running.stop()

    created, denied, deleted, fits, over = asyncio.run(main())
    assert created["allowed"] is True
    assert denied["allowed"] is False and "4 in use + 2 requested" in denied["status"]["message"]
    assert deleted["allowed"] is True
    assert fits["allowed"] is True
    assert over["allowed"] is False and "2 in use + 3 requested" in over["status"]["message"]
