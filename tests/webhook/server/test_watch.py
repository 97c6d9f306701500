"""The watcher against the real `kubernetes` client, talking to a local fake API server replaying list/watch JSON."""

import asyncio
import http.server
import json
import threading
import time
import urllib.parse

import pytest
from kubernetes import client

from policy.cluster.snapshot import ClusterSnapshot
from webhook.server.state import State
from webhook.server.watch import RESOURCES, ClusterWatcher

from tests.webhook.wh_standin import admission_module


def node(name, rv, rack="r1"):
    return {
        "metadata": {"name": name, "resourceVersion": str(rv), "labels": {"topology.acme.io/rack": rack,
                     "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}},
        "spec": {},
        "status": {"allocatable": {"nvidia.com/gpu": "8"}, "conditions": [{"type": "Ready", "status": "True"}]},
    }


def listing(kind, rv, items):
    return {"kind": f"{kind}List", "apiVersion": "v1", "metadata": {"resourceVersion": str(rv)}, "items": items}


def event(kind, obj):
    return {"type": kind, "object": {"kind": "Node", "apiVersion": "v1", **obj}}


GONE = {"type": "ERROR", "object": {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 410,
                                    "reason": "Expired", "message": "too old resource version: 102 (150)"}}
POD = {"metadata": {"name": "train-0", "namespace": "team-a", "resourceVersion": "50"},
       "spec": {"nodeName": "node-2", "containers": [{"name": "m", "resources": {"limits": {"nvidia.com/gpu": "4"}}}]},
       "status": {"phase": "Running"}}
PODGROUP = {"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
            "metadata": {"name": "g1", "namespace": "team-a", "resourceVersion": "7"}, "spec": {"minMember": 4}}


# Every API server serves these workload kinds (empty lists here; tests/webhook/server/test_watch_workloads.py fills them).
BUILTIN_WORKLOADS = {(f"/apis/{g}/{v}/{plural}", False): [(200, listing(kind, 1, []))]
                     for kind, g, v, plural in (("Job", "batch", "v1", "jobs"), ("Deployment", "apps", "v1", "deployments"),
                                                ("StatefulSet", "apps", "v1", "statefulsets"), ("ReplicaSet", "apps", "v1", "replicasets"))}


class FakeAPI:
    """Scripted responses per (path, watch?) served in order; an exhausted watch blocks like an idle one."""

    def __init__(self, script):
        self.script = {k: list(v) for k, v in script.items()}
        self.requests = []
        self.release_pods = threading.Event()
        self.done = threading.Event()
        api = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"

            def log_message(self, *a):
                pass

            def do_GET(self):
                url = urllib.parse.urlsplit(self.path)
                q = dict(urllib.parse.parse_qsl(url.query))
                watch = q.get("watch") in ("true", "True", "1")
                api.requests.append((url.path, watch, q.get("resourceVersion")))
                if url.path == "/api/v1/pods" and not watch:
                    api.release_pods.wait(10)
                queue = api.script.get((url.path, watch))
                if queue is None:
                    return self._send(404, {"kind": "Status", "code": 404, "reason": "NotFound"})
                if not queue:
                    api.done.wait(30)  # an idle watch
                    return self._send(200, b"")
                status, body = queue.pop(0)
                self._send(status, body, lines=watch)

            def _send(self, status, body, lines=False):
                if isinstance(body, (dict, list)):
                    body = ("\n".join(json.dumps(e) for e in body) + "\n" if lines else json.dumps(body)).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(body)

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        cfg = client.Configuration()
        cfg.host = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.api_client = client.ApiClient(cfg)

    def close(self):
        self.done.set()
        self.release_pods.set()
        self.httpd.shutdown()


@pytest.fixture
def fake_api():
    api = FakeAPI({
        ("/api/v1/nodes", False): [(200, listing("Node", 100, [node("node-1", 90), node("node-2", 91)])),
                                   (200, listing("Node", 200, [node("node-2", 91), node("node-3", 101), node("node-4", 199)]))],
        ("/api/v1/nodes", True): [(200, [event("ADDED", node("node-3", 101)), event("DELETED", node("node-1", 102))]),
                                  (200, [GONE])],
        ("/api/v1/pods", False): [(200, listing("Pod", 60, [POD]))],
        ("/api/v1/namespaces", False): [(200, listing("Namespace", 5, [{"metadata": {"name": "team-a", "labels": {"team": "a"}}}]))],
        ("/apis/scheduling.k8s.io/v1/priorityclasses", False): [(200, listing("PriorityClass", 3, [{"metadata": {"name": "batch"}, "value": 100}]))],
        ("/apis/scheduling.x-k8s.io/v1alpha1/podgroups", False): [(200, listing("PodGroup", 8, [PODGROUP]))],
        **BUILTIN_WORKLOADS,
    })
    yield api
    api.close()


def wait_for(pred, limit=10.0):
    end = time.monotonic() + limit
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(0.02)
    return False


def test_list_watch_relist_into_the_snapshot(fake_api):
    state = State(snapshot=ClusterSnapshot(), admission=admission_module())
    watcher = ClusterWatcher(state, fake_api.api_client, resources=RESOURCES, watch_seconds=5)
    seen = {}

    async def scenario():
        task = asyncio.create_task(watcher.run())
        await asyncio.sleep(0.3)
        seen["before_pods"] = (state.cluster.synced, state.ready()[0])
        fake_api.release_pods.set()
        loop = asyncio.get_running_loop()
        ok = await loop.run_in_executor(None, wait_for, lambda: state.cluster.synced and
                                        state.metrics.value("allot_watch_restarts_total", {"kind": "Node", "reason": "expired"}) >= 1
                                        and sum(1 for r in fake_api.requests if r[:2] == ("/api/v1/nodes", False)) >= 2)
        await asyncio.sleep(0.3)  # let the relist's callbacks land
        seen["ok"] = ok
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    asyncio.run(scenario())
    assert seen["before_pods"] == (False, False)  # not ready until every kind has listed
    assert seen["ok"]
    assert sorted(n["metadata"]["name"] for n in state.snapshot.nodes()) == ["node-2", "node-3", "node-4"]
    assert state.snapshot.pod("team-a", "train-0") is not None
    assert state.snapshot.namespace_labels("team-a") == {"team": "a"}
    assert state.snapshot.priority_class("batch")["value"] == 100
    assert state.snapshot.group("team-a", "g1") is not None
    node_watches = [r for r in fake_api.requests if r[:2] == ("/api/v1/nodes", True)]
    assert [r[2] for r in node_watches[:2]] == ["100", "102"]  # reconnect from the last seen resourceVersion
    assert state.metrics.value("allot_watch_events_total", {"kind": "Node", "type": "DELETED"}) == 1
    kinds = state.cluster.kinds
    assert kinds["PodGroup.scheduling.volcano.sh"].get("absent") and kinds["PodGroup.scheduling.volcano.sh"]["synced"]


def test_serve_with_a_kubeconfig_is_ready_only_after_the_first_sync(fake_api, tmp_path, caplog):
    import io

    import aiohttp

    from webhook.server import tls
    from webhook.server.serving import ServeOptions, start
    from tests.webhook.wh_policy import write

    pdir, _ = write(tmp_path)
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: fake\n"
        f"clusters: [{{name: fake, cluster: {{server: '{fake_api.api_client.configuration.host}'}}}}]\n"
        "users: [{name: me, user: {token: t}}]\n"
        "contexts: [{name: fake, context: {cluster: fake, user: me}}]\n")
    opts = ServeOptions(policy=str(pdir), kubeconfig=str(kubeconfig), host="127.0.0.1", port=0, self_signed=True,
                        certs_dir=str(tmp_path / "certs"), decision_log=io.BytesIO(), buffered_log=False,
                        reload_interval=3600, tls_interval=3600)
    seen = []

    async def main():
        running = await start(opts)
        try:
            async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=tls.client_context(running.ca_path))) as s:
                async with s.get(running.url + "/readyz") as r:
                    seen.append((r.status, (await r.json())["problems"]))
                fake_api.release_pods.set()
                for _ in range(200):
                    async with s.get(running.url + "/readyz") as r:
                        if r.status == 200:
                            seen.append((200, []))
                            break
                    await asyncio.sleep(0.05)
        finally:
            await running.stop()

    with caplog.at_level("WARNING", logger="urllib3.connectionpool"):
        asyncio.run(main())
    assert seen[0] == (503, ["cluster state not synced yet"])
    assert seen[-1] == (200, [])
    # One client serves every watch thread (and the ledger, meter, reclaim): a pool smaller than the
    # threads discards connections as they come back (a new TCP+TLS handshake each, and a warning each time).
    assert not [r for r in caplog.records if "pool is full" in r.getMessage()]


WORKLOAD_V1BETA1 = {"apiVersion": "scheduling.k8s.io/v1beta1", "kind": "Workload",
                    "metadata": {"name": "train", "namespace": "team-a", "resourceVersion": "9"},
                    "spec": {"podGroupTemplates": [{"name": "workers", "schedulingPolicy": {"gang": {"minCount": 4}}}]}}


@pytest.mark.parametrize("served", [("v1beta1",), ("v1beta1", "v1alpha2")])
def test_the_upstream_workload_is_read_at_v1beta1_once_however_many_versions_serve_it(served):
    script = {("/apis/scheduling.k8s.io/" + v + "/workloads", False): [(200, listing("Workload", 9, [{**WORKLOAD_V1BETA1, "apiVersion": "scheduling.k8s.io/" + v}]))]
              for v in served}
    api = FakeAPI(script)
    upstream = tuple(r for r in RESOURCES if r.api_version.startswith("scheduling.k8s.io/v1") and r.kind in ("Workload", "PodGroup") and r.api_version != "scheduling.k8s.io/v1")
    state = State(snapshot=ClusterSnapshot(), admission=admission_module())
    watcher = ClusterWatcher(state, api.api_client, resources=upstream, watch_seconds=5)

    async def scenario():
        task = asyncio.create_task(watcher.run())
        await asyncio.get_running_loop().run_in_executor(None, wait_for, lambda: state.cluster.synced)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    try:
        asyncio.run(scenario())
    finally:
        api.close()
    assert state.cluster.synced
    assert state.cluster.kinds["Workload.scheduling.k8s.io/v1beta1"]["synced"]
    assert state.snapshot.group("team-a", "train", "workload") is not None
    assert sum(1 for g in state.snapshot.groups()) == 1
