"""The ledger's ConfigMap reads and writes over aiohttp on the replica's own event loop, configured as the `kubernetes` client is.

Why not the threaded client: measured in `allot bench ledger` (API double, 2 replicas),
a shard write spent 12-26 ms awaited but 0.7 ms in the server's handler: 1-5 ms before
the worker thread ran it, 5-13 ms after it finished before the loop took the result,
and of the 6-9 ms the thread spent, 1-2 ms was the client building the request and
decoding the answer and the rest socket waits, each of which gives up the GIL and
waits to get it back from the busy loop (docs/history/webhook-ledger.md, "The write path").

`for_client` reproduces these parts of a `kubernetes.client.Configuration`: `host`
(with any path prefix), `verify_ssl`, `ssl_ca_cert` / `ca_cert_data`, `cert_file` +
`key_file`, `tls_server_name` (the name sent and verified), `assert_hostname=False`,
the bearer token (`api_key` "BearerToken"/"authorization" with its prefix) and its
`refresh_api_key_hook` (exec plugins, service-account token files), and the
ApiClient's default headers (User-Agent). Anything else (a proxy, `assert_hostname`
as a name, custom `retries` or `socket_options`, an api_key under another name) is
not reproduced: `for_client` returns None with the reason and the caller keeps the
threaded client.
"""

from __future__ import annotations

import asyncio
import logging
import os
import ssl
import time
from typing import Any
from urllib.parse import quote

import orjson

log = logging.getLogger("allot.ledger")
AUTH_REFRESH = 5.0  # seconds a token read through the refresh hook is used before the hook is asked again (in a thread)
KEYS = ("BearerToken", "authorization")  # where kube_config / incluster_config put the token


class ApiError(Exception):
    """An answer outside 2xx: `status`, `reason` and `body`, as `kubernetes.client.ApiException` carries them."""

    def __init__(self, status: int, reason: str, body: bytes) -> None:
        super().__init__(status, reason)
        self.status, self.reason, self.body = status, reason, body

    def __str__(self) -> str:
        return f"({self.status})\nReason: {self.reason}\nHTTP response body: {self.body[:300].decode(errors='replace')}"


def unsupported(cfg: Any) -> str | None:
    """Why `cfg` cannot be reproduced here (the threaded client is kept), or None."""
    from kubernetes.client.rest import should_bypass_proxies

    if os.environ.get("ALLOT_LEDGER_HTTP", "") == "threads":
        return "ALLOT_LEDGER_HTTP=threads"
    if not str(cfg.host or "").startswith(("http://", "https://")):
        return f"host {cfg.host!r} is not an http(s) URL"
    if cfg.proxy and not should_bypass_proxies(cfg.host, cfg.no_proxy or ""):
        return "a proxy is configured"
    if isinstance(cfg.assert_hostname, str):
        return "assert_hostname names another host"
    if cfg.retries is not None:
        return "custom retries are configured"
    if cfg.socket_options is not None:
        return "custom socket options are configured"
    other = set(cfg.api_key or {}) - set(KEYS)
    if other:
        return f"an api_key this client does not send ({', '.join(sorted(other))})"
    return None


def _context(cfg: Any) -> ssl.SSLContext:
    """The TLS context urllib3 builds from `cfg` (verify_ssl, CA file or data, client cert and key)."""
    if not cfg.verify_ssl:
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    else:
        ctx = ssl.create_default_context(cafile=cfg.ssl_ca_cert, cadata=cfg.ca_cert_data)
        if cfg.assert_hostname is False:
            ctx.check_hostname = False
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    if cfg.cert_file:
        ctx.load_cert_chain(cfg.cert_file, cfg.key_file)
    return ctx


def for_client(api_client: Any) -> AsyncApi | None:
    """An AsyncApi speaking as `api_client` does, or None (the reason logged once) when its configuration is not reproduced."""
    cfg = api_client.configuration
    reason = unsupported(cfg)
    if reason is not None:
        log.info("ledger reads and writes go through the threaded kubernetes client: %s", reason)
        return None
    try:
        return AsyncApi(cfg, dict(getattr(api_client, "default_headers", None) or {}))
    except (OSError, ssl.SSLError, ValueError) as exc:  # a CA or key file the client loads per connection: its error shows there
        log.info("ledger reads and writes go through the threaded kubernetes client: TLS setup: %s", exc)
        return None


def _retrieved(task: asyncio.Task) -> None:
    """A background refresh's failure is logged in it; fetched so asyncio does not report it as never retrieved."""
    if not task.cancelled():
        task.exception()


class AsyncApi:
    """GET / POST / PUT of ConfigMaps with one aiohttp session (opened on first use, on the running loop)."""

    def __init__(self, cfg: Any, headers: dict[str, str]) -> None:
        self.cfg = cfg
        self.base = str(cfg.host).rstrip("/")
        self.ssl = _context(cfg) if self.base.startswith("https://") else None
        self.server_hostname = cfg.tls_server_name or None
        self.headers = {**headers, "Accept": "application/json"}
        self.session = None
        self.loop: asyncio.AbstractEventLoop | None = None  # the session's (a session serves one loop)
        self.keeping = False  # connections are kept between `keep()` and `close()` (while the ledger runs)
        self.auth: str | None = None
        self.auth_at: float | None = None  # monotonic time the hook was last asked (None: never)
        self.refreshing: asyncio.Task | None = None
        self.requests = 0

    # -- the token --

    def _read_token(self) -> str | None:
        return self.cfg.get_api_key_with_prefix(KEYS[0], alias=KEYS[1])  # (runs refresh_api_key_hook, as every client call does)

    async def _refresh(self) -> None:
        try:
            self.auth = await asyncio.to_thread(self._read_token)  # the hook may run an exec plugin: never on the loop
        except Exception as exc:  # a request waiting for it gets the error; else the last token stays
            log.warning("refreshing the API token for the ledger: %s: %s", type(exc).__name__, str(exc)[:200])
            raise
        finally:
            self.auth_at, self.refreshing = time.monotonic(), None

    async def _authorization(self, stale: bool = False) -> str | None:
        """The Authorization value: read per request without a hook; with one, re-read in a thread every AUTH_REFRESH s or after a 401."""
        if self.cfg.refresh_api_key_hook is None:
            return self._read_token()
        if stale or self.auth_at is None or time.monotonic() - self.auth_at >= AUTH_REFRESH:
            if self.refreshing is None:
                self.refreshing = asyncio.get_running_loop().create_task(self._refresh())
                self.refreshing.add_done_callback(_retrieved)
            if stale or self.auth_at is None:  # (else this request goes with the token read last; the next one gets the new)
                await asyncio.shield(self.refreshing)
        return self.auth

    # -- requests --

    def _new_session(self):
        import aiohttp

        # No limit: a request never queues for a connection (urllib3's pool opens one more, too); as many are
        # kept as were ever in flight at once (one write per shard and a re-read).
        connector = aiohttp.TCPConnector(limit=0, ssl=self.ssl if self.ssl is not None else False)
        return aiohttp.ClientSession(connector=connector)

    def _session(self):
        """(session, whether this request closes it): the kept one, or outside `keep()`..`close()` one of its own."""
        loop = asyncio.get_running_loop()
        if not self.keeping:
            return self._new_session(), True
        if self.session is None or self.session.closed or self.loop is not loop:
            self.session, self.loop = self._new_session(), loop
        return self.session, False

    async def request(self, method: str, path: str, body: dict | None, timeout: tuple[float, float],
                      content_type: str = "application/json") -> dict:
        """The decoded JSON answer of `method path`; ApiError outside 2xx, aiohttp / timeout errors (status-less) as raised."""
        import aiohttp

        data = orjson.dumps(body) if body is not None else None
        limits = aiohttp.ClientTimeout(total=None, sock_connect=timeout[0], sock_read=timeout[1])
        headers = dict(self.headers)
        if data is not None:
            headers["Content-Type"] = content_type  # (a merge patch names its own: webhook/reclaim)
        for attempt in range(2):
            auth = await self._authorization(stale=attempt > 0)
            if auth:
                headers["Authorization"] = auth
            else:
                headers.pop("Authorization", None)
            session, own = self._session()
            try:
                self.requests += 1
                async with session.request(method, self.base + path, data=data, headers=headers, timeout=limits,
                                           server_hostname=self.server_hostname) as resp:
                    status, reason, raw = resp.status, resp.reason or "", await resp.read()
            except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError) as exc:
                # A kept-alive connection the server had closed (urllib3 retries these too). Safe to send
                # again: a create or a replace conditional on its resourceVersion applies at most once.
                # (Not a refused connect or a certificate: asking again would only fail again.)
                if attempt == 0 and not isinstance(exc, aiohttp.ClientConnectorError):
                    continue
                raise
            finally:
                if own:
                    await session.close()
            if status == 401 and attempt == 0 and self.cfg.refresh_api_key_hook is not None:
                continue  # the token read last has expired: ask the hook now and send once more
            if not 200 <= status <= 299:
                raise ApiError(status, reason, raw)
            return orjson.loads(raw)
        raise AssertionError("unreachable")  # (the second attempt returns or raises)

    def _path(self, namespace: str, name: str | None = None) -> str:
        path = f"/api/v1/namespaces/{quote(namespace, safe='')}/configmaps"
        return path if name is None else f"{path}/{quote(name, safe='')}"

    async def get_config_map(self, namespace: str, name: str, timeout: tuple[float, float]) -> dict | None:
        """The ConfigMap, or None when the API answers 404."""
        try:
            return await self.request("GET", self._path(namespace, name), None, timeout)
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise

    async def create_config_map(self, namespace: str, body: dict, timeout: tuple[float, float]) -> dict:
        """POST `body` (409 AlreadyExists when another replica created it first)."""
        return await self.request("POST", self._path(namespace), body, timeout)

    async def replace_config_map(self, namespace: str, name: str, body: dict, timeout: tuple[float, float]) -> dict:
        """PUT `body` (409 Conflict when its metadata.resourceVersion is not the stored one)."""
        return await self.request("PUT", self._path(namespace, name), body, timeout)

    def keep(self) -> None:
        """Keep connections open from now until `close()`."""
        self.keeping = True

    async def close(self) -> None:
        """Close the kept connections (a request after this opens and closes its own)."""
        self.keeping = False
        if self.session is not None and not self.session.closed:
            await self.session.close()
