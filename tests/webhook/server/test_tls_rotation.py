"""Certificate rotation on disk: a request in flight finishes, the open connection keeps working, new ones see the new cert."""

import asyncio
import io
import ssl
import threading

import aiohttp
import orjson
from cryptography import x509

from webhook import certs
from webhook.server import tls
from webhook.server.serving import ServeOptions, start

from tests.webhook.wh_harness import pod, review
from tests.webhook.wh_policy import write


class Delayed:
    """The real engine, held back until released, so a request is provably in flight during the rotation."""

    def __init__(self, engine):
        self.engine = engine
        self.entered = threading.Event()
        self.release = threading.Event()

    def __getattr__(self, name):
        return getattr(self.engine, name)

    def decide(self, *a, **kw):
        self.entered.set()
        self.release.wait(10)
        return self.engine.decide(*a, **kw)


async def peer_serial(port: int, ca) -> int:
    _, writer = await asyncio.open_connection("127.0.0.1", port, ssl=tls.client_context(ca))
    der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
    writer.close()
    return x509.load_der_x509_certificate(der).serial_number


def test_rotation_with_a_request_in_flight(tmp_path):
    pdir, cluster = write(tmp_path)
    opts = ServeOptions(policy=str(pdir), cluster=str(cluster), host="127.0.0.1", port=0, self_signed=True,
                        certs_dir=str(tmp_path / "certs"), decision_log=io.BytesIO(), buffered_log=False,
                        reload_interval=3600, tls_interval=3600)
    out = {}

    async def main():
        running = await start(opts)
        state = running.state
        delayed = Delayed(state.engine)
        state.engine = delayed
        old_serial = await peer_serial(running.port, running.ca_path)
        conn = aiohttp.TCPConnector(ssl=tls.client_context(running.ca_path), limit=1)  # one keep-alive connection
        try:
            async with aiohttp.ClientSession(connector=conn) as s:
                body = review(pod(name="inflight", gpus=1, labels={"acme.io/owner": "a", "team": "team-a"}, priority_class="batch"))
                inflight = asyncio.create_task(s.post(running.url + "/validate", data=orjson.dumps(body)))
                loop = asyncio.get_running_loop()
                assert await loop.run_in_executor(None, delayed.entered.wait, 5)
                # rotate: a new serving cert from the same CA, written over the mounted files
                ca_key, ca_cert = certs.read_pem(tmp_path / "certs", "ca")
                key, cert = certs.issue_serving_cert(ca_key, ca_cert, ["localhost"], ["127.0.0.1"])
                certs.write_pem(tmp_path / "certs", "tls", key, cert)
                out["reloaded"] = running.tls.reload_if_changed()
                delayed.release.set()
                resp = await inflight
                out["inflight"] = (resp.status, (await resp.json())["response"]["uid"] == body["request"]["uid"])
                async with s.post(running.url + "/validate", data=orjson.dumps(review(pod(name="next")))) as r2:
                    out["same_connection"] = r2.status
                out["new_serial"] = await peer_serial(running.port, running.ca_path)
                out["want_serial"] = cert.serial_number
                out["old_serial"] = old_serial
                out["tls_status"] = dict(state.tls)
        finally:
            await running.stop()

    asyncio.run(main())
    assert out["reloaded"] is True
    assert out["inflight"] == (200, True)
    assert out["same_connection"] == 200
    assert out["new_serial"] == out["want_serial"] != out["old_serial"]
    assert out["tls_status"]["generation"] == 2 and out["tls_status"]["last_error"] is None


def test_half_rotated_files_keep_the_old_certificate(tmp_path):
    pki_dir = tmp_path / "c"
    ca_key, ca_cert = certs.generate_ca("ca")
    key, cert = certs.issue_serving_cert(ca_key, ca_cert, ["localhost"], ["127.0.0.1"])
    key_path, cert_path = certs.write_pem(pki_dir, "tls", key, cert)
    reloading = tls.ReloadingTLS(cert_path, key_path)
    first = reloading.current
    _, other_cert = certs.issue_serving_cert(ca_key, ca_cert, ["localhost"], [])
    cert_path.write_bytes(certs.cert_pem(other_cert))  # new cert, old key: a mismatched pair mid-rotation
    assert reloading.reload_if_changed() is False
    assert reloading.current is first and reloading.status["last_error"]
    assert reloading.base.minimum_version == ssl.TLSVersion.TLSv1_2
