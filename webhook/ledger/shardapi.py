"""The ledger's calls to the Kubernetes API: shard gets and writes (on the loop through `apiclient`, else in threads), the list and the watch.

A mixin of `ClusterLedger` (webhook/ledger/cluster.py): it reads `core` (the kubernetes
CoreV1Api), `api` (an `apiclient.AsyncApi` or None), `namespace`, `list_rv` and
`_stopped` (a shard is ledger.py's `Shard`: this module cannot import it back), and hands what the watch brings to `_relisted` and `_event` on the loop.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import orjson

from webhook.ledger import fresh

log = logging.getLogger("allot.ledger")
LABEL = "allot.dev/ledger"
SELECTOR = f"{LABEL}=reservations"
# (connect, read) seconds of one get or write: a stalled API server must not hold a shard's one write in
# flight for ever (every later commit to it would time out behind it); its outcome is then unknown.
CALL_TIMEOUT = (3.0, 5.0)  # (a write that hangs is a write that failed: its outcome is unknown, docs/ledger.md)
WATCH_SECONDS = fresh.WINDOW  # server-side timeout of one shard watch: its close proves the view current; resumed from the last resourceVersion


class ShardApi:
    """Gets, writes, the list and the watch of the shard ConfigMaps."""

    def _get(self, name: str) -> dict | None:
        from kubernetes.client.rest import ApiException

        try:
            resp = self.core.read_namespaced_config_map(name, self.namespace, _preload_content=False,
                                                        _request_timeout=CALL_TIMEOUT)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return orjson.loads(resp.data)

    def _list(self) -> tuple[list, str | None]:
        resp = self.core.list_namespaced_config_map(self.namespace, label_selector=SELECTOR, _preload_content=False,
                                                    _request_timeout=(10, 60))
        doc = orjson.loads(resp.data)
        return doc.get("items") or [], (doc.get("metadata") or {}).get("resourceVersion")

    async def _read(self, name: str) -> dict | None:
        """The shard's ConfigMap (None: not found), on this loop when `api` is set, else in a thread."""
        if self.api is None:
            return await asyncio.to_thread(self._get, name)
        return await self.api.get_config_map(self.namespace, name, CALL_TIMEOUT)

    async def _put(self, shard: Any, rv: str | None, text: str) -> dict:
        """`_write`, on this loop when `api` is set (errors carry the same `status`: 409 a conflict), else in a thread."""
        if self.api is None:
            return await asyncio.to_thread(self._write, shard, rv, text)
        body = self._body(shard, rv, text)
        if rv is None:
            return await self.api.create_config_map(self.namespace, body, CALL_TIMEOUT)
        return await self.api.replace_config_map(self.namespace, shard.name, body, CALL_TIMEOUT)

    def _body(self, shard: Any, rv: str | None, text: str) -> dict:
        """The shard's ConfigMap holding `text`, conditional on `rv` when it exists."""
        body = {"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": shard.name, "namespace": self.namespace, "labels": {LABEL: "reservations"}},
                "data": {"holds": text}}
        if rv is not None:
            body["metadata"]["resourceVersion"] = rv
        return body

    def _write(self, shard: Any, rv: str | None, text: str) -> dict:
        """Create the shard (rv None) or replace it, conditional on `rv` (the API server answers 409 when stale).

        A whole-object replace of one `data` key, not a patch of one key per hold: measured
        against kube-apiserver 1.36 with 1,000 holds, a replace of one key took 15-19 ms, a merge
        patch of one key 61 ms and a merge patch of one key per hold 111 ms (the server applies
        patches through a JSON round trip and tracks managed fields per data key).
        """
        body = self._body(shard, rv, text)
        if rv is None:
            resp = self.core.create_namespaced_config_map(self.namespace, body, _preload_content=False,
                                                          _request_timeout=CALL_TIMEOUT)
        else:
            resp = self.core.replace_namespaced_config_map(shard.name, self.namespace, body, _preload_content=False,
                                                           _request_timeout=CALL_TIMEOUT)
        return orjson.loads(resp.data)

    def _watch_thread(self, loop: asyncio.AbstractEventLoop) -> None:
        """List + watch the shards from the list's resourceVersion in short windows, each clean close confirming the view; a 410 relists.

        A watch silent past `fresh.SILENCE` (a half-open connection) is given up and dialled
        again on a new connection; failures back off to at most `fresh.BACKOFF_MAX`, so the
        view recovers by itself once the API server answers again.
        """
        from kubernetes.client.rest import ApiException
        from kubernetes.watch.watch import iter_resp_lines

        rv, backoff = self.list_rv, 0.25
        while not self._stopped.is_set():
            try:
                if rv is None:
                    sent = time.monotonic()
                    items, rv = self._list()
                    _post(loop, self._relisted, items, rv)
                    _post(loop, self._confirm, sent)
                sent = time.monotonic()
                resp = self.core.list_namespaced_config_map(
                    self.namespace, label_selector=SELECTOR, watch=True, resource_version=rv, allow_watch_bookmarks=True,
                    timeout_seconds=WATCH_SECONDS, _preload_content=False, _request_timeout=(CALL_TIMEOUT[0], fresh.SILENCE))
                expired = False
                try:
                    for line in iter_resp_lines(resp):
                        if self._stopped.is_set():
                            return
                        if not line.strip():
                            continue
                        event = orjson.loads(line)
                        kind, obj = event.get("type"), event.get("object") or {}
                        if kind == "ERROR":
                            if obj.get("code") == 410:
                                rv, expired = None, True
                                break
                            raise RuntimeError(f"watch error {obj.get('code')}: {obj.get('message')}")
                        rv = (obj.get("metadata") or {}).get("resourceVersion") or rv
                        if kind in ("ADDED", "MODIFIED", "DELETED"):
                            _post(loop, self._event, kind, obj)
                finally:
                    resp.release_conn()
                at = None if expired else fresh.confirmed_by_window(sent, time.monotonic())
                if at is not None:  # (posted after the window's events: applied after them, in order)
                    _post(loop, self._confirm, at)
                backoff = 0.25
            except ApiException as exc:
                if exc.status == 410:
                    rv = None
                    continue
                log.warning("watching the reservation ledger: HTTP %s %s", exc.status, exc.reason)
                self._stopped.wait(backoff)
                backoff = min(backoff * 2, fresh.BACKOFF_MAX)
            except Exception as exc:  # noqa: BLE001 - network trouble (a silent connection too): back off and resume
                log.warning("watching the reservation ledger: %s: %s", type(exc).__name__, str(exc)[:200])
                self._stopped.wait(backoff)
                backoff = min(backoff * 2, fresh.BACKOFF_MAX)


def _post(loop: asyncio.AbstractEventLoop, fn, *args) -> None:
    """Run `fn(*args)` on the loop thread (the only thread that touches shards and the snapshot), through the state's gate."""
    try:
        loop.call_soon_threadsafe(_gated, getattr(getattr(fn, "__self__", None), "state", None), fn, *args)
    except RuntimeError:  # the loop closed: shutting down
        pass


def _gated(state: Any, fn, *args) -> None:
    """`fn(*args)` on the loop, never while a decision thread mutates the same holds (webhook/server/gate.py)."""
    gate = getattr(state, "gate", None)  # stand-in states in tests have none
    if gate is None:
        fn(*args)
    else:
        gate.run(fn, *args)
