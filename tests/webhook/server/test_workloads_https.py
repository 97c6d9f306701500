"""Workload objects over real HTTPS: the real server with the policy library, a JobSet and a Job as the API server sends them."""

import asyncio
import base64
import copy
import io
import pathlib
import uuid

import aiohttp
import orjson
import yaml

from webhook.server import tls
from webhook.server.serving import ServeOptions, start

REPO = pathlib.Path(__file__).resolve().parents[3]
CASES = yaml.safe_load((REPO / "policies/whole-workloads/workloads.test.yaml").read_text())["cases"]


def manifest(case_name: str) -> dict:
    return copy.deepcopy(next(c["request"] for c in CASES if c["name"].startswith(case_name)))


def review(obj: dict, group: str, resource: str, user: str = "alice") -> dict:
    api = obj["apiVersion"]
    version = api.split("/")[-1]
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": str(uuid.uuid4()),
        "kind": {"group": group, "version": version, "kind": obj["kind"]},
        "resource": {"group": group, "version": version, "resource": resource},
        "name": obj["metadata"]["name"], "namespace": obj["metadata"]["namespace"], "operation": "CREATE",
        "userInfo": {"username": user, "groups": ["system:authenticated"]},
        "object": obj, "oldObject": None, "dryRun": False,
        "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
    }}


def test_jobsets_and_agent_jobs_are_decided_at_submission(tmp_path):
    opts = ServeOptions(policy=str(REPO / "policies"), cluster=str(REPO / "policies/fixtures/cluster.yaml"), host="127.0.0.1",
                        port=0, self_signed=True, certs_dir=str(tmp_path / "certs"), decision_log=io.BytesIO(),
                        buffered_log=False, reload_interval=3600, tls_interval=3600)

    async def main():
        running = await start(opts)
        try:
            conn = aiohttp.TCPConnector(ssl=tls.client_context(running.ca_path))
            async with aiohttp.ClientSession(connector=conn) as s:
                async def call(path, body):
                    async with s.post(running.url + path, data=orjson.dumps(body)) as resp:
                        assert resp.status == 200
                        return (await resp.json())["response"]

                too_big = await call("/validate", review(manifest("a 24-GPU JobSet"), "jobset.x-k8s.io", "jobsets"))
                defaulted = await call("/mutate", review(manifest("the default priority"), "jobset.x-k8s.io", "jobsets"))
                privileged = await call("/validate", review(manifest("the CI agent may not create a Job whose"), "batch", "jobs",
                                                            user="system:serviceaccount:ci:runner"))
                return too_big, defaulted, privileged
        finally:
            await running.stop()

    too_big, defaulted, privileged = asyncio.run(main())
    assert too_big["allowed"] is False and too_big["status"]["code"] == 403
    assert "rack" in too_big["status"]["message"]
    patch = orjson.loads(base64.b64decode(defaulted["patch"]))
    assert defaulted["allowed"] is True and defaulted["patchType"] == "JSONPatch"
    # (the library's `set` rules also label the JobSet itself: rules see the workload's own metadata)
    assert {f"/spec/replicatedJobs/{i}/template/spec/template/spec/priorityClassName" for i in (0, 1)} <= {op["path"] for op in patch}
    assert privileged["allowed"] is False and "runs unprivileged Jobs only" in privileged["status"]["message"]
