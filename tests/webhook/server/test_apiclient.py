"""The ledger's aiohttp path (webhook/ledger/apiclient.py) against the API double and real HTTPS servers.

Every server here is real: the double's protocol (webhook/bench/apidouble.py) served
plain or over TLS with certificates from webhook/certs.py, a client certificate the
server requires, a bearer token it checks. Where the threaded `kubernetes` client can
be asked the same, it is, and both must agree.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import ssl
import threading

import aiohttp
import pytest
import urllib3
from aiohttp import web
from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from kubernetes import client

from webhook import certs
from webhook.bench.apidouble import ApiDouble, api_client
from webhook.ledger import apiclient
from webhook.ledger.apiclient import ApiError
from webhook.ledger.cluster import CALL_TIMEOUT, ClusterLedger

NS = "allot-system"


def _cm(name: str, rv: str | None = None, **data) -> dict:
    meta = {"name": name, "namespace": NS, "labels": {"allot.dev/ledger": "reservations"}}
    if rv is not None:
        meta["resourceVersion"] = rv
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data}


def _client_cert(ca_key, ca_cert, cn: str):
    """A TLS client certificate (clientAuth) for `cn`, signed by the CA."""
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)]))
            .issuer_name(ca_cert.subject).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
            .sign(ca_key, hashes.SHA256()))
    return key, cert


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    d = tmp_path_factory.mktemp("apipki")
    ca_key, ca_cert = certs.generate_ca("api-test-ca")
    _, ca = certs.write_pem(d, "ca", ca_key, ca_cert)
    key, cert = certs.issue_serving_cert(ca_key, ca_cert, ["localhost"], ["127.0.0.1"])
    server_key, server_cert = certs.write_pem(d, "server", key, cert)
    key, cert = certs.issue_serving_cert(ca_key, ca_cert, ["api.internal"], [])  # a name 127.0.0.1 does not carry
    named_key, named_cert = certs.write_pem(d, "named", key, cert)
    key, cert = _client_cert(ca_key, ca_cert, "allot-replica")
    client_key, client_cert = certs.write_pem(d, "client", key, cert)
    other_key, other_cert = certs.generate_ca("another-ca")
    _, other_ca = certs.write_pem(d, "other", other_key, other_cert)
    return {"ca": str(ca), "server": (str(server_cert), str(server_key)), "named": (str(named_cert), str(named_key)),
            "client": (str(client_cert), str(client_key)), "other_ca": str(other_ca)}


async def _serve(double: ApiDouble, *, tls: ssl.SSLContext | None = None, middlewares=()) -> tuple[web.AppRunner, int]:
    """The double's handler behind `middlewares`, on a free loopback port, over TLS when given a context."""
    app = web.Application(middlewares=list(middlewares))
    app.router.add_route("*", "/{tail:.*}", double.handle)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.2)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=tls)
    await site.start()
    return runner, runner.addresses[0][1]


def _server_tls(pki, which: str = "server", *, client_ca: str | None = None) -> ssl.SSLContext:
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(*pki[which])
    if client_ca:
        ctx.load_verify_locations(client_ca)
        ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


def _config(host: str, **fields) -> client.Configuration:
    cfg = client.Configuration()
    cfg.host = host
    for k, v in fields.items():
        setattr(cfg, k, v)
    return cfg


def _threaded_get(cfg: client.Configuration, name: str):
    """The same read through the threaded kubernetes client (what the fallback uses)."""
    return client.CoreV1Api(client.ApiClient(cfg)).read_namespaced_config_map(name, NS, _request_timeout=CALL_TIMEOUT)


def test_create_get_conditional_replace_and_the_conflicts_against_the_double():
    async def scenario():
        double = ApiDouble()
        url = await double.start()
        api = apiclient.for_client(api_client(url))
        api.keep()  # one session for every request, as while the ledger runs
        try:
            assert api is not None
            assert await api.get_config_map(NS, "s", CALL_TIMEOUT) is None  # 404 on GET: not there
            made = await api.create_config_map(NS, _cm("s", holds="{}"), CALL_TIMEOUT)
            rv = made["metadata"]["resourceVersion"]
            with pytest.raises(ApiError) as exists:  # another replica created it first
                await api.create_config_map(NS, _cm("s", holds="{}"), CALL_TIMEOUT)
            assert exists.value.status == 409 and b"AlreadyExists" in exists.value.body
            put = await api.replace_config_map(NS, "s", _cm("s", rv, holds='{"a":1}'), CALL_TIMEOUT)
            assert int(put["metadata"]["resourceVersion"]) > int(rv)
            with pytest.raises(ApiError) as stale:  # the version it was read at is gone: refused, unchanged
                await api.replace_config_map(NS, "s", _cm("s", rv, holds='{"b":2}'), CALL_TIMEOUT)
            assert stale.value.status == 409 and "409" in str(stale.value)
            got = await api.get_config_map(NS, "s", CALL_TIMEOUT)
            assert got["data"] == {"holds": '{"a":1}'} and got["metadata"]["resourceVersion"] == put["metadata"]["resourceVersion"]
            with pytest.raises(ApiError) as gone:  # a replace of a shard deleted meanwhile: a 4xx, not a conflict
                await api.replace_config_map(NS, "t", _cm("t", "1", holds="{}"), CALL_TIMEOUT)
            assert gone.value.status == 404
            assert double.conflicts == 2 and double.writes == 2
        finally:
            await api.close()
            await double.stop()

    asyncio.run(scenario())


def test_a_stalled_server_times_out_with_no_status():
    async def stall(request):
        await asyncio.sleep(5)
        return web.Response()

    async def scenario():
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", stall)
        runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.1)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        api = apiclient.for_client(client.ApiClient(_config(f"http://127.0.0.1:{runner.addresses[0][1]}")))
        try:
            with pytest.raises(asyncio.TimeoutError) as exc:  # the ledger gives it the --on-error decision
                await api.replace_config_map(NS, "s", _cm("s", "1"), (1.0, 0.2))
            assert not isinstance(getattr(exc.value, "status", None), int)  # not taken for a 4xx by _landed
        finally:
            await api.close()
            await runner.cleanup()

    asyncio.run(scenario())


def test_a_refreshed_token_is_read_through_the_hook_in_a_thread_and_a_401_asks_it_again(tmp_path):
    token_file = tmp_path / "token"
    token_file.write_text("first")
    seen, accepted = [], {"first"}
    hook_threads = []

    def refresh(cfg):  # as incluster_config's hook does: re-read the mounted token file
        hook_threads.append(threading.current_thread().name)
        cfg.api_key["authorization"] = token_file.read_text()

    @web.middleware
    async def bearer(request, handler):
        token = request.headers.get("Authorization", "")
        seen.append(token)
        if token.removeprefix("Bearer ") not in accepted:
            return web.json_response({"kind": "Status", "code": 401, "reason": "Unauthorized"}, status=401)
        return await handler(request)

    async def scenario():
        double = ApiDouble()
        runner, port = await _serve(double, middlewares=[bearer])
        cfg = _config(f"http://127.0.0.1:{port}", api_key={"authorization": "stale"},
                      api_key_prefix={"authorization": "Bearer"}, refresh_api_key_hook=refresh)
        api = apiclient.for_client(client.ApiClient(cfg))
        api.keep()
        try:
            await api.create_config_map(NS, _cm("s"), CALL_TIMEOUT)
            assert seen == ["Bearer first"]  # the hook ran before the first request, not the token given at load
            token_file.write_text("second")  # rotated; the server stops taking the old one
            accepted.clear()
            accepted.add("second")
            got = await api.get_config_map(NS, "s", CALL_TIMEOUT)
            assert got["metadata"]["name"] == "s"
            assert seen == ["Bearer first", "Bearer first", "Bearer second"]  # refused, asked the hook, sent again
            accepted.clear()  # a token the hook cannot renew: the 401 is the answer
            with pytest.raises(ApiError) as exc:
                await api.get_config_map(NS, "s", CALL_TIMEOUT)
            assert exc.value.status == 401
            assert hook_threads and threading.main_thread().name not in hook_threads  # never on the loop's thread
        finally:
            await api.close()
            await runner.cleanup()

    asyncio.run(scenario())


def test_a_static_token_without_a_hook_is_sent_with_its_prefix():
    seen = []

    @web.middleware
    async def record(request, handler):
        seen.append(request.headers.get("Authorization"))
        return await handler(request)

    async def scenario():
        double = ApiDouble()
        runner, port = await _serve(double, middlewares=[record])
        cfg = _config(f"http://127.0.0.1:{port}", api_key={"BearerToken": "abc"}, api_key_prefix={"BearerToken": "Bearer"})
        api = apiclient.for_client(client.ApiClient(cfg))
        try:
            await api.get_config_map(NS, "s", CALL_TIMEOUT)
            assert seen == ["Bearer abc"]
        finally:
            await api.close()
            await runner.cleanup()

    asyncio.run(scenario())


def test_tls_with_a_ca_and_a_client_certificate_as_the_threaded_client_does(pki):
    peers = []

    @web.middleware
    async def peer(request, handler):
        cert = request.transport.get_extra_info("peercert") or {}
        peers.append(dict(x[0] for x in cert.get("subject", ())).get("commonName"))
        return await handler(request)

    async def scenario():
        double = ApiDouble()
        double.put("configmaps", _cm("s", holds="{}"))
        runner, port = await _serve(double, tls=_server_tls(pki, client_ca=pki["ca"]), middlewares=[peer])
        host = f"https://127.0.0.1:{port}"
        cert, key = pki["client"]
        good = _config(host, ssl_ca_cert=pki["ca"], cert_file=cert, key_file=key)
        api = apiclient.for_client(client.ApiClient(good))
        no_cert = apiclient.for_client(client.ApiClient(_config(host, ssl_ca_cert=pki["ca"])))
        wrong_ca = apiclient.for_client(client.ApiClient(_config(host, ssl_ca_cert=pki["other_ca"], cert_file=cert, key_file=key)))
        try:
            assert (await api.get_config_map(NS, "s", CALL_TIMEOUT))["metadata"]["name"] == "s"
            assert peers == ["allot-replica"]  # the server saw the replica's client certificate
            threaded = await asyncio.to_thread(_threaded_get, good, "s")
            assert threaded.metadata.name == "s" and peers == ["allot-replica"] * 2
            with pytest.raises(aiohttp.ClientError) as refused:  # the server requires a client certificate
                await no_cert.get_config_map(NS, "s", CALL_TIMEOUT)
            assert not isinstance(getattr(refused.value, "status", None), int)
            with pytest.raises(aiohttp.ClientError) as untrusted:  # the server's certificate is not from this CA
                await wrong_ca.get_config_map(NS, "s", CALL_TIMEOUT)
            assert "certificate" in str(untrusted.value).lower()
            with pytest.raises(urllib3.exceptions.MaxRetryError, match="CERTIFICATE_VERIFY_FAILED"):  # the threaded client too
                await asyncio.to_thread(_threaded_get, _config(host, ssl_ca_cert=pki["other_ca"], cert_file=cert, key_file=key), "s")
            assert len(peers) == 2
        finally:
            for a in (api, no_cert, wrong_ca):
                await a.close()
            await runner.cleanup()

    asyncio.run(scenario())


def test_tls_server_name_is_the_name_verified_and_verify_ssl_false_skips_it(pki):
    async def scenario():
        double = ApiDouble()
        double.put("configmaps", _cm("s", holds="{}"))
        runner, port = await _serve(double, tls=_server_tls(pki, "named"))  # a certificate for api.internal only
        host = f"https://127.0.0.1:{port}"
        named = _config(host, ssl_ca_cert=pki["ca"], tls_server_name="api.internal")
        plain = apiclient.for_client(client.ApiClient(_config(host, ssl_ca_cert=pki["ca"])))
        apis = [apiclient.for_client(client.ApiClient(named)), plain,
                apiclient.for_client(client.ApiClient(_config(host, verify_ssl=False)))]
        try:
            assert (await apis[0].get_config_map(NS, "s", CALL_TIMEOUT))["metadata"]["name"] == "s"
            assert (await asyncio.to_thread(_threaded_get, named, "s")).metadata.name == "s"  # the threaded client agrees
            with pytest.raises(aiohttp.ClientError) as mismatch:  # 127.0.0.1 is not a name the certificate carries
                await plain.get_config_map(NS, "s", CALL_TIMEOUT)
            assert "certificate" in str(mismatch.value).lower()
            assert (await apis[2].get_config_map(NS, "s", CALL_TIMEOUT))["metadata"]["name"] == "s"
        finally:
            for a in apis:
                await a.close()
            await runner.cleanup()

    asyncio.run(scenario())


@pytest.mark.parametrize("fields, want_reason", [
    ({"proxy": "http://proxy.internal:3128"}, "proxy"),
    ({"assert_hostname": "other.internal"}, "assert_hostname"),
    ({"api_key": {"x-api-key": "k"}}, "x-api-key"),
    ({"socket_options": []}, "socket options"),
])
def test_what_it_cannot_reproduce_keeps_the_threaded_client_and_says_so(fields, want_reason, caplog):
    cfg = _config("https://127.0.0.1:6443", **fields)
    with caplog.at_level(logging.INFO, logger="allot.ledger"):
        assert apiclient.for_client(client.ApiClient(cfg)) is None
    said = [r.getMessage() for r in caplog.records if "threaded kubernetes client" in r.getMessage()]
    assert len(said) == 1 and want_reason in said[0]


def test_a_proxy_the_host_bypasses_is_no_reason_to_fall_back():
    cfg = _config("https://127.0.0.1:6443", proxy="http://proxy.internal:3128", no_proxy="127.0.0.1")
    assert apiclient.for_client(client.ApiClient(cfg)) is not None


def test_the_ledger_takes_the_async_path_unless_told_threads(monkeypatch):
    state = type("S", (), {})()
    assert ClusterLedger(api_client("http://127.0.0.1:1"), NS, state=state, escrow=False).api is not None
    monkeypatch.setenv("ALLOT_LEDGER_HTTP", "threads")
    assert ClusterLedger(api_client("http://127.0.0.1:1"), NS, state=state, escrow=False).api is None
