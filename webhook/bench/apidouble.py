"""An in-process Kubernetes API double on loopback: the REST protocol the `kubernetes` client speaks, for tests and benches.

Collections by path (`/api/v1/[namespaces/NS/]PLURAL[/NAME]`, `/apis/G/V/...`), one
resourceVersion counter across all of them like etcd's, and the verbs a webhook
replica uses: list (with `labelSelector`), watch (`?watch=true` from a
resourceVersion, filtered by `labelSelector`, 410 when it is older than the kept
history), get, create (409 AlreadyExists), update and JSON merge patch (RFC 7386;
409 Conflict when a given `metadata.resourceVersion` is not the stored one, as the API
server treats it as a precondition) and delete, and `pods/NAME/eviction` (policy/v1 Eviction: 404 gone, 409
on a uid precondition, 429 when a PodDisruptionBudget matching the pod allows no disruption, `dryRun`).
Plurals outside `plurals` answer 404, as an API server does for a CRD that is not installed.
"""

from __future__ import annotations

import asyncio
import copy
import uuid

import orjson
from aiohttp import web

CORE_PLURALS = ("nodes", "pods", "namespaces", "configmaps", "priorityclasses")
HISTORY = 10000  # watch events kept for resuming
HISTORY_BYTES = 64 << 20  # and at most this much of them (a big ConfigMap written often would hold gigabytes)


def _status(code: int, reason: str, message: str) -> web.Response:
    body = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message,
            "reason": reason, "code": code}
    return web.Response(body=orjson.dumps(body), status=code, content_type="application/json")


def _matches(obj: dict, selector: str | None) -> bool:
    if not selector:
        return True
    labels = (obj.get("metadata") or {}).get("labels") or {}
    for term in selector.split(","):
        k, _, v = term.partition("=")
        if labels.get(k.strip()) != v.strip().lstrip("="):
            return False
    return True


def _merge(target, patch):
    """RFC 7386 JSON merge patch: maps merge key by key, null deletes, anything else replaces (a new object)."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = _merge(out.get(k), v)
    return out


class ApiDouble:
    """The store and the aiohttp app; `start()` listens on 127.0.0.1 and sets `url`."""

    def __init__(self, plurals: tuple[str, ...] = CORE_PLURALS) -> None:
        self.plurals = set(plurals)
        self.rv = 0
        self.objects: dict[tuple[str, str, str], dict] = {}  # (plural, namespace, name) -> object
        self.events: list[tuple[int, str, str, dict, bytes]] = []  # (rv, plural, namespace, labels, the watch line)
        self.changed = asyncio.Event()
        self._bytes = 0  # of the kept watch lines
        self.conflicts = 0  # 409s answered, for tests and benches
        self.writes = 0
        self.evictions: list[tuple[str, str, str]] = []  # (namespace, name, uid) of every eviction that removed a pod
        self.url = ""
        self._runner: web.AppRunner | None = None

    # -- the store --

    def _bump(self, plural: str, kind: str, obj: dict) -> None:
        self.rv += 1
        obj["metadata"]["resourceVersion"] = str(self.rv)
        meta = obj["metadata"]
        # serialized once here, not once per watcher: the line is what every watch sends
        line = orjson.dumps({"type": kind, "object": obj}) + b"\n"
        self.events.append((self.rv, plural, meta.get("namespace") or "", dict(meta.get("labels") or {}), line))
        self._bytes += len(line)
        while len(self.events) > 1 and (len(self.events) > HISTORY or self._bytes > HISTORY_BYTES):
            self._bytes -= len(self.events.pop(0)[4])
        self.changed.set()
        self.changed = asyncio.Event()

    def put(self, plural: str, obj: dict) -> dict:
        """Create or replace an object directly (test setup), as a write by another client would."""
        meta = obj.setdefault("metadata", {})
        key = (plural, meta.get("namespace") or "", meta["name"])
        kind = "MODIFIED" if key in self.objects else "ADDED"
        meta.setdefault("uid", str(uuid.uuid4()))
        self.objects[key] = obj
        self._bump(plural, kind, obj)
        return obj

    def remove(self, plural: str, namespace: str, name: str) -> None:
        """Delete an object directly (test setup)."""
        obj = self.objects.pop((plural, namespace, name), None)
        if obj is not None:
            self._bump(plural, "DELETED", obj)

    def items(self, plural: str, namespace: str | None = None) -> list[dict]:
        """Stored objects of `plural` (in `namespace` if given)."""
        return [o for (p, ns, _), o in self.objects.items() if p == plural and (namespace is None or ns == namespace)]

    # -- HTTP --

    def _route(self, request: web.Request) -> tuple[str, str | None, str | None] | None:
        parts = [p for p in request.path.split("/") if p]
        if parts[:2] == ["api", "v1"]:
            rest = parts[2:]
        elif len(parts) >= 3 and parts[0] == "apis":
            rest = parts[3:]
        else:
            return None
        ns = None
        if len(rest) >= 2 and rest[0] == "namespaces" and len(rest) != 2:
            ns, rest = rest[1], rest[2:]
        if len(rest) == 3 and rest[0] == "pods" and rest[2] == "eviction" and "pods" in self.plurals:
            return "pods/eviction", ns, rest[1]
        if not rest or len(rest) > 2 or rest[0] not in self.plurals:
            return None
        return rest[0], ns, rest[1] if len(rest) == 2 else None

    async def handle(self, request: web.Request) -> web.StreamResponse:
        """Dispatch one API request."""
        if request.path == "/_double/counters":  # not the Kubernetes API: what benches read back
            return web.json_response({"writes": self.writes, "conflicts": self.conflicts, "rv": self.rv})
        route = self._route(request)
        if route is None:
            return _status(404, "NotFound", f"the server could not find the requested resource ({request.path})")
        plural, ns, name = route
        if plural == "pods/eviction":
            return await self._evict(request, ns or "", name)
        if request.method == "GET" and name is None:
            if request.query.get("watch") in ("true", "1"):
                return await self._watch(request, plural, ns)
            items = [o for o in self.items(plural, ns) if _matches(o, request.query.get("labelSelector"))]
            return web.json_response({"kind": "List", "apiVersion": "v1", "metadata": {"resourceVersion": str(self.rv)},
                                      "items": items}, dumps=lambda d: orjson.dumps(d).decode())
        key = (plural, ns or "", name)
        if request.method == "GET":
            obj = self.objects.get(key)
            return self._json(obj) if obj is not None else _status(404, "NotFound", f'{plural} "{name}" not found')
        if request.method == "DELETE":
            if key not in self.objects:
                return _status(404, "NotFound", f'{plural} "{name}" not found')
            obj = self.objects[key]
            self.remove(plural, ns or "", name)
            return self._json(obj)
        try:
            body = orjson.loads(await request.read())
        except orjson.JSONDecodeError:
            return _status(400, "BadRequest", "body is not JSON")
        meta = body.setdefault("metadata", {})
        if ns:
            meta["namespace"] = ns
        if request.method == "POST" and name is None:
            key = (plural, ns or "", meta.get("name", ""))
            if key in self.objects:
                self.conflicts += 1
                return _status(409, "AlreadyExists", f'{plural} "{key[2]}" already exists')
            meta.pop("resourceVersion", None)
            self.writes += 1
            return self._json(self.put(plural, body), 201)
        if request.method == "PATCH" and name is not None:
            return self._patch(request, key, plural, name, body)
        if request.method == "PUT" and name is not None:
            current = self.objects.get(key)
            if current is None:
                return _status(404, "NotFound", f'{plural} "{name}" not found')
            if meta.get("resourceVersion") != current["metadata"]["resourceVersion"]:
                self.conflicts += 1
                return _status(409, "Conflict", f'Operation cannot be fulfilled on {plural} "{name}": '
                                                "the object has been modified; please apply your changes to the latest version and try again")
            meta["uid"] = current["metadata"].get("uid")
            self.writes += 1
            return self._json(self.put(plural, body))
        return _status(405, "MethodNotAllowed", f"{request.method} is not supported here")

    def _patch(self, request: web.Request, key: tuple, plural: str, name: str, patch: dict) -> web.Response:
        if request.content_type not in ("application/merge-patch+json", "application/strategic-merge-patch+json"):
            return _status(415, "UnsupportedMediaType", f"the double applies merge patches, not {request.content_type}")
        current = self.objects.get(key)
        if current is None:
            return _status(404, "NotFound", f'{plural} "{name}" not found')
        want = (patch.get("metadata") or {}).get("resourceVersion")
        if want is not None and want != current["metadata"]["resourceVersion"]:
            self.conflicts += 1
            return _status(409, "Conflict", f'Operation cannot be fulfilled on {plural} "{name}": '
                                            "the object has been modified; please apply your changes to the latest version and try again")
        merged = _merge(current, patch)
        merged["metadata"]["uid"] = current["metadata"].get("uid")
        self.writes += 1
        return self._json(self.put(plural, merged))

    async def _evict(self, request: web.Request, ns: str, name: str) -> web.Response:
        """POST pods/NAME/eviction as the API server answers it (a PDB allowing no disruption: 429)."""
        if request.method != "POST":
            return _status(405, "MethodNotAllowed", "eviction is create-only")
        try:
            body = orjson.loads(await request.read())
        except orjson.JSONDecodeError:
            return _status(400, "BadRequest", "body is not JSON")
        pod = self.objects.get(("pods", ns, name))
        if pod is None:
            return _status(404, "NotFound", f'pods "{name}" not found')
        want = ((body.get("deleteOptions") or {}).get("preconditions") or {}).get("uid")
        if want is not None and want != pod["metadata"].get("uid"):
            self.conflicts += 1
            return _status(409, "Conflict", f"Precondition failed: UID in precondition: {want}, UID in object meta: "
                                            f"{pod['metadata'].get('uid')}")
        labels = pod["metadata"].get("labels") or {}
        for pdb in self.items("poddisruptionbudgets", ns):
            match = ((pdb.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
            if all(labels.get(k) == v for k, v in match.items()) and ((pdb.get("status") or {}).get("disruptionsAllowed") or 0) <= 0:
                return _status(429, "TooManyRequests", "Cannot evict pod as it would violate the pod's disruption budget.")
        if request.query.get("dryRun") != "All":
            self.evictions.append((ns, name, pod["metadata"].get("uid") or ""))
            self.remove("pods", ns, name)
        return self._json({"kind": "Status", "apiVersion": "v1", "status": "Success", "code": 201}, 201)

    @staticmethod
    def _json(obj: dict, status: int = 200) -> web.Response:
        return web.Response(body=orjson.dumps(obj), status=status, content_type="application/json")

    async def _watch(self, request: web.Request, plural: str, ns: str | None) -> web.StreamResponse:
        since = int(request.query.get("resourceVersion") or self.rv)
        timeout = float(request.query.get("timeoutSeconds") or 300)
        selector = request.query.get("labelSelector")
        if self.events and since < self.events[0][0] - 1:
            return _status(410, "Expired", f"too old resource version: {since}")
        resp = web.StreamResponse(headers={"Content-Type": "application/json"})
        await resp.prepare(request)
        loop = asyncio.get_running_loop()
        end = loop.time() + timeout
        while loop.time() < end:
            first = self.events[0][0] if self.events else self.rv + 1
            for rv, p, ons, labels, line in self.events[max(0, since + 1 - first):]:  # one event per rv: index, not scan
                since = rv
                if p == plural and (ns is None or ons == ns) and _matches({"metadata": {"labels": labels}}, selector):
                    await resp.write(line)
            try:
                await asyncio.wait_for(self.changed.wait(), max(0.01, end - loop.time()))
            except asyncio.TimeoutError:
                break
        return resp

    async def start(self) -> str:
        """Listen on a free loopback port; returns the base URL."""
        app = web.Application(client_max_size=8 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self.handle)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.url = f"http://127.0.0.1:{self._runner.addresses[0][1]}"
        return self.url

    async def stop(self) -> None:
        """Close the listener and open watches."""
        if self._runner is not None:
            await self._runner.cleanup()


def api_client(url: str, *, pool: int = 16):
    """A `kubernetes` ApiClient for `url` (the double's plain-HTTP loopback address)."""
    from kubernetes import client

    cfg = client.Configuration()
    cfg.host = url
    cfg.connection_pool_maxsize = pool
    return client.ApiClient(cfg)


async def _serve_forever() -> None:
    import sys

    double = ApiDouble()
    app_url = await double.start()
    print(f"api double listening on: {app_url.rsplit(':', 1)[1]}", file=sys.stderr, flush=True)
    await asyncio.Event().wait()


def main() -> None:
    """`python -m webhook.bench.apidouble`: serve the double until killed (benches start it as a process)."""
    asyncio.run(_serve_forever())


if __name__ == "__main__":
    main()
