"""Real HTTPS around a State: the server on 127.0.0.1 with a generated certificate, an aiohttp client."""

from __future__ import annotations

import contextlib
import pathlib
import uuid

import aiohttp
from aiohttp import web

from webhook import certs
from webhook.server import app as server, tls


def make_pki(directory: pathlib.Path) -> dict:
    """CA + serving cert for localhost/127.0.0.1 written under `directory`."""
    ca_key, ca_cert = certs.generate_ca("allot-test-ca")
    key, cert = certs.issue_serving_cert(ca_key, ca_cert, ["localhost"], ["127.0.0.1"])
    _, ca_path = certs.write_pem(directory, "ca", ca_key, ca_cert)
    key_path, cert_path = certs.write_pem(directory, "tls", key, cert)
    return {"ca_key": ca_key, "ca_cert": ca_cert, "ca": ca_path, "key": key_path, "cert": cert_path, "dir": directory}


@contextlib.asynccontextmanager
async def running(state, pki: dict, *, tasks=(), tls_obj=None):
    """Serve `state` over HTTPS on a free loopback port; yields (base_url, session, tls)."""
    reloading = tls_obj or tls.ReloadingTLS(pki["cert"], pki["key"], metrics=state.metrics, status=state.tls)
    app = server.make_app(state, tasks=tasks)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=reloading.base)
    await site.start()
    port = runner.addresses[0][1]
    conn = aiohttp.TCPConnector(ssl=tls.client_context(pki["ca"]))
    try:
        async with aiohttp.ClientSession(connector=conn) as session:
            yield f"https://127.0.0.1:{port}", session, reloading
    finally:
        await runner.cleanup()


def review(obj: dict | None = None, **request) -> dict:
    """An AdmissionReview v1 for a Pod CREATE; keyword args override `request` fields."""
    obj = obj or pod()
    req = {
        "uid": str(uuid.uuid4()),
        "kind": {"group": "", "version": "v1", "kind": obj.get("kind", "Pod")},
        "resource": {"group": "", "version": "v1", "resource": "pods"},
        "requestKind": {"group": "", "version": "v1", "kind": obj.get("kind", "Pod")},
        "requestResource": {"group": "", "version": "v1", "resource": "pods"},
        "name": obj["metadata"].get("name"),
        "namespace": obj["metadata"].get("namespace"),
        "operation": "CREATE",
        "userInfo": {"username": "alice", "groups": ["system:authenticated"]},
        "object": obj,
        "oldObject": None,
        "dryRun": False,
        "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
    }
    req.update(request)
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": req}


def pod(name="p", namespace="team-a", gpus=None, labels=None, annotations=None, priority_class=None, extra_limits=None, privileged=False) -> dict:
    """A Pod manifest with one container asking `gpus` whole GPUs (or none)."""
    limits = dict(extra_limits or {})
    if gpus is not None:
        limits["nvidia.com/gpu"] = str(gpus)
    container = {"name": "main", "image": "nvcr.io/nvidia/pytorch:24.05-py3", "resources": {"limits": limits}}
    if privileged:
        container["securityContext"] = {"privileged": True}
    spec = {"containers": [container]}
    if priority_class:
        spec["priorityClassName"] = priority_class
    meta = {"name": name, "namespace": namespace, "labels": dict(labels or {}), "annotations": dict(annotations or {})}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}
