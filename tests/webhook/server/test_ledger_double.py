"""The API double speaks the protocol the ledger relies on, through the real `kubernetes` client.

A watch with a label selector sees only matching objects (the ledger watches its
shards so); merge patches with `metadata.resourceVersion` are compare-and-swaps (409
when stale) and `null` deletes a key, as the API server does them.
"""

from __future__ import annotations

import asyncio
import threading

import orjson
import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from webhook.bench.apidouble import ApiDouble, api_client
from webhook.ledger.cluster import newer

NS = "allot-system"
MERGE_PATCH = "application/merge-patch+json"


def _with_double(body):
    """Run blocking `body(core, double)` in a thread while the double serves on this loop."""

    async def scenario():
        double = ApiDouble()
        url = await double.start()
        try:
            core = client.CoreV1Api(api_client(url))
            await asyncio.to_thread(body, core, double)
        finally:
            await double.stop()

    asyncio.run(scenario())


def test_merge_patch_with_a_resource_version_is_a_compare_and_swap():
    def body(core, double):
        cm = core.create_namespaced_config_map(NS, {"metadata": {"name": "s"}, "data": {"a": "1", "b": "2"}})
        rv = cm.metadata.resource_version
        patched = core.patch_namespaced_config_map("s", NS, {"metadata": {"resourceVersion": rv}, "data": {"a": None, "c": "3"}},
                                                   _content_type=MERGE_PATCH)
        assert patched.data == {"b": "2", "c": "3"} and newer(patched.metadata.resource_version, rv)
        with pytest.raises(ApiException) as exc:  # the version it was read at is gone: refused, unchanged
            core.patch_namespaced_config_map("s", NS, {"metadata": {"resourceVersion": rv}, "data": {"d": "4"}},
                                             _content_type=MERGE_PATCH)
        assert exc.value.status == 409 and double.conflicts == 1
        assert core.read_namespaced_config_map("s", NS).data == {"b": "2", "c": "3"}
        unconditional = core.patch_namespaced_config_map("s", NS, {"data": {"d": "4"}}, _content_type=MERGE_PATCH)
        assert unconditional.data == {"b": "2", "c": "3", "d": "4"}

    _with_double(body)


def test_a_watch_with_a_label_selector_sees_only_matching_objects():
    def body(core, double):
        listed = core.list_namespaced_config_map(NS, label_selector="allot.dev/ledger=reservations")
        seen: list[tuple[str, str]] = []
        done = threading.Event()

        def watch():
            resp = core.list_namespaced_config_map(NS, label_selector="allot.dev/ledger=reservations", watch=True,
                                                   resource_version=listed.metadata.resource_version, timeout_seconds=5,
                                                   _preload_content=False)
            for line in resp:
                for part in line.splitlines():
                    if part.strip():
                        event = orjson.loads(part)
                        seen.append((event["type"], event["object"]["metadata"]["name"]))
                        if event["object"]["metadata"]["name"] == "last":
                            done.set()
                            return

        t = threading.Thread(target=watch, daemon=True)
        t.start()
        labels = {"allot.dev/ledger": "reservations"}
        core.create_namespaced_config_map(NS, {"metadata": {"name": "other"}, "data": {}})
        core.create_namespaced_config_map(NS, {"metadata": {"name": "shard", "labels": labels}, "data": {}})
        core.patch_namespaced_config_map("shard", NS, {"data": {"k": "v"}}, _content_type=MERGE_PATCH)
        core.create_namespaced_config_map(NS, {"metadata": {"name": "last", "labels": labels}, "data": {}})
        assert done.wait(5)
        assert seen == [("ADDED", "shard"), ("MODIFIED", "shard"), ("ADDED", "last")]

    _with_double(body)


@pytest.mark.parametrize("rv, than, want", [("5", "4", True), ("4", "5", False), ("5", "5", False), ("1", None, True),
                                            (None, "1", False), ("b", "a", True)])
def test_newer_resource_versions(rv, than, want):
    assert newer(rv, than) is want
