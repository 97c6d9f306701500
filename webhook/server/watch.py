"""Live cluster state: list + watch through the `kubernetes` client into the snapshot, off the event loop.

One thread per resource does the blocking I/O (list, then watch from the list's
resourceVersion, reconnecting from the last seen one; a 410 Gone relists). Events
are handed to the loop with `call_soon_threadsafe`, so the snapshot is only ever
changed on the loop thread, between admission decisions: through the state's gate,
so an event that arrives while a decision thread runs waits, in order, for it. Raw JSON is parsed with
orjson instead of the client's model classes: the snapshot wants plain dicts and
model deserialization costs more than the rest of an event's handling.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import threading
import time
from dataclasses import dataclass

import orjson

from policy.cluster.snapshot import SnapshotError
from policy.subject.dialects.workloads import RESOURCES as WORKLOAD_RESOURCES
from policy.subject.workloads import HELD_KINDS, SCALABLE
from webhook.ledger import fresh

log = logging.getLogger("allot.watch")
GONE = 410
WATCH_SECONDS = 300  # server-side watch timeout; we reconnect from the last resourceVersion
# Kinds whose watches run in short windows, each clean close recording when the API server last proved the
# view current (`kinds[id]["confirmed"]`, monotonic): the shared ledger admits only from a view within
# webhook/ledger/fresh.py's bound, and pods are what its quotas count.
FRESH_KINDS = frozenset({"Pod"})
ABSENT_RETRY = 60.0  # an optional CRD not installed: look again this often


@dataclass(frozen=True, slots=True)
class Resource:
    """One watched collection: the kind stamped onto items, and how to list it."""

    kind: str
    api_version: str
    plural: str
    optional: bool = False  # a CRD that may not be installed: 404 means "none", not an error

    @property
    def group_version(self) -> tuple[str, str]:
        """(group, version); group is "" for the core API."""
        g, _, v = self.api_version.rpartition("/")
        return g, v


RESOURCES: tuple[Resource, ...] = (
    Resource("Node", "v1", "nodes"),
    Resource("Pod", "v1", "pods"),
    Resource("Namespace", "v1", "namespaces"),
    Resource("PriorityClass", "scheduling.k8s.io/v1", "priorityclasses"),
    # gang objects of each dialect the engine reads (policy/dialects/gangs.py)
    Resource("PodGroup", "scheduling.x-k8s.io/v1alpha1", "podgroups", optional=True),
    Resource("PodGroup", "scheduling.volcano.sh/v1beta1", "podgroups", optional=True),
    Resource("PodGroup", "scheduling.run.ai/v2alpha2", "podgroups", optional=True),
    Resource("Workload", "kueue.x-k8s.io/v1beta1", "workloads", optional=True),
    # upstream gang APIs: v1beta1 in 1.37, v1alpha2 in 1.36 (PodGroup + Workload), v1alpha1 (Workload only) in 1.35.
    # One object served at two versions lands on one snapshot key (its gang family, not its version).
    Resource("PodGroup", "scheduling.k8s.io/v1beta1", "podgroups", optional=True),
    Resource("Workload", "scheduling.k8s.io/v1beta1", "workloads", optional=True),
    Resource("PodGroup", "scheduling.k8s.io/v1alpha2", "podgroups", optional=True),
    Resource("Workload", "scheduling.k8s.io/v1alpha2", "workloads", optional=True),
    Resource("Workload", "scheduling.k8s.io/v1alpha1", "workloads", optional=True),
    # 1.37 development: CompositePodGroup (v1alpha3 only), the parents of v1beta1 PodGroups in a Workload's tree.
    Resource("CompositePodGroup", "scheduling.k8s.io/v1alpha3", "compositepodgroups", optional=True),
)
# A kind and group watched at two versions: the older one's id names its version.
VERSIONED_IDS = frozenset({"scheduling.k8s.io/v1alpha1", "scheduling.k8s.io/v1beta1"})

def workload_resources() -> tuple[Resource, ...]:
    """The workload kinds whose holds the snapshot must see end (deleted, finished) and whose `scale` reads the live template.

    The kinds Allot holds quota for (policy/subject/workloads.py HELD_KINDS, which include
    every kind with a `scale` sub-resource), at the version Allot reads. All optional: a
    CRD may not be installed, and an API that serves no `apps` (a test double, a
    minimal control plane) only loses early release and `scale` judgment, which then warn.
    """
    out = []
    for kind, (plural, group, versions) in WORKLOAD_RESOURCES.items():
        if kind in HELD_KINDS or kind in SCALABLE.values():
            out.append(Resource(kind, f"{group}/{versions[0]}", plural, optional=True))
    return tuple(out)


RESOURCES = RESOURCES + workload_resources()
WORKLOAD_KINDS = frozenset(r.kind for r in workload_resources())


CORE_KINDS = frozenset({"Node", "Pod", "Namespace", "PriorityClass"})


def _rv_int(obj: dict) -> int | None:
    """An object's resourceVersion as an etcd revision; None when it is not one."""
    rv = (obj.get("metadata") or {}).get("resourceVersion")
    return int(rv) if isinstance(rv, str) and rv.isdigit() else None


def resource_id(res: Resource) -> str:
    """A stable name for status and metrics: `Kind.group` or `Kind`."""
    g, v = res.group_version
    if res.kind in CORE_KINDS:
        return res.kind
    return f"{res.kind}.{g}/{v}" if res.api_version in VERSIONED_IDS else f"{res.kind}.{g}"


def _call(api_client, res: Resource, **kwargs):
    """The client's list call for `res` (raw response, not deserialized)."""
    from kubernetes import client

    g, v = res.group_version
    kwargs["_preload_content"] = False
    if res.kind not in CORE_KINDS:
        return client.CustomObjectsApi(api_client).list_cluster_custom_object(g, v, res.plural, **kwargs)
    if res.kind == "PriorityClass":
        return client.SchedulingV1Api(api_client).list_priority_class(**kwargs)
    core = client.CoreV1Api(api_client)
    fn = {"Node": core.list_node, "Pod": core.list_pod_for_all_namespaces, "Namespace": core.list_namespace}[res.kind]
    return fn(**kwargs)


def _key(obj: dict) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return meta.get("namespace") or "", meta.get("name") or ""


def _lines(resp):
    """Non-empty watch lines, split by the client's own line iterator."""
    from kubernetes.watch.watch import iter_resp_lines

    return (line for line in iter_resp_lines(resp) if line.strip())


class ClusterWatcher:
    """Keeps `state.snapshot` in step with the cluster; `/readyz` stays false until every kind has listed."""

    def __init__(self, state, api_client, *, resources: tuple[Resource, ...] = RESOURCES, watch_seconds: int = WATCH_SECONDS) -> None:
        self.state = state
        self.api = api_client
        self.resources = resources
        self.watch_seconds = watch_seconds
        self.stopped = threading.Event()
        self.known: dict[str, dict[tuple[str, str], dict]] = {resource_id(r): {} for r in resources}
        self.loop: asyncio.AbstractEventLoop | None = None
        self._threads: list[threading.Thread] = []
        self._absent_logged: set[str] = set()
        for r in resources:
            state.cluster.kinds[resource_id(r)] = {"synced": False, "resource_version": None, "restarts": 0, "error": None}
            if resource_id(r) in FRESH_KINDS:
                state.cluster.kinds[resource_id(r)]["confirmed"] = None
        state.cluster.synced = False

    # ---- loop side: the only code that touches the snapshot ----

    def _stamp(self, res: Resource, obj: dict) -> dict:
        # list items omit kind/apiVersion; the snapshot needs both to file group objects
        if obj.get("kind") != res.kind or obj.get("apiVersion") != res.api_version:
            obj = {**obj, "kind": res.kind, "apiVersion": res.api_version}
        if res.kind in WORKLOAD_KINDS:  # kept for their templates: managedFields are often the larger half, and never read
            meta = obj.get("metadata")
            if type(meta) is dict and "managedFields" in meta:
                obj = {**obj, "metadata": {k: v for k, v in meta.items() if k != "managedFields"}}
        return obj

    def _apply_list(self, res: Resource, items: list[dict], rv: str | None) -> None:
        rid, snap = resource_id(res), self.state.snapshot
        known = self.known[rid]
        fresh = {_key(o): self._stamp(res, o) for o in items}
        for key, old in list(known.items()):
            if key not in fresh:  # gone while we were not watching
                snap.apply("DELETED", old)
                del known[key]
        for key, obj in fresh.items():
            try:
                snap.apply("MODIFIED" if key in known else "ADDED", obj)
            except SnapshotError as exc:  # one malformed object must not leave the kind unsynced (skipped, counted)
                log.warning("%s list item %s/%s not applied: %s", rid, *key, exc)
                continue
            known[key] = obj
        self._mark(rid, synced=True, resource_version=rv, error=None,
                   added_rv=max((r for o in items if (r := _rv_int(o)) is not None), default=None))  # (listed objects: created at or before)

    def _apply_event(self, res: Resource, kind: str, obj: dict, received: float) -> None:
        rid = resource_id(res)
        obj = self._stamp(res, obj)
        try:
            self.state.snapshot.apply(kind, obj)
        except Exception as exc:  # noqa: BLE001 - one odd object must not stop the stream
            log.warning("%s event for %s/%s not applied: %s", kind, rid, _key(obj), exc)
            return
        if kind == "DELETED":
            self.known[rid].pop(_key(obj), None)
        else:
            self.known[rid][_key(obj)] = obj
        m = self.state.metrics
        m.watch_events.labels(rid, kind).inc()
        m.watch_lag.labels(rid).observe(time.perf_counter() - received)
        entry = self.state.cluster.kinds[rid]
        entry["resource_version"] = (obj.get("metadata") or {}).get("resourceVersion")
        if kind == "ADDED":  # the latest creation shown: the ledger's escrow tells from it what another replica may not show yet
            entry["added_rv"] = _rv_int(obj)

    def _mark(self, rid: str, **fields) -> None:
        self.state.cluster.kinds[rid].update(fields)
        synced = all(k["synced"] for k in self.state.cluster.kinds.values())
        self.state.cluster.synced = synced
        self.state.metrics.cluster_synced.set(1 if synced else 0)

    def _confirm(self, rid: str, at: float) -> None:
        """The API server proved this kind's view current as of `at` (monotonic; posted after what it proves)."""
        entry = self.state.cluster.kinds[rid]
        if entry.get("confirmed") is None or at > entry["confirmed"]:
            entry["confirmed"] = at

    def _restart(self, rid: str, reason: str, error: str | None = None) -> None:
        self.state.metrics.watch_restarts.labels(rid, reason).inc()
        entry = self.state.cluster.kinds[rid]
        entry["restarts"] += 1
        if error is not None:
            entry["error"] = error

    def _post(self, fn, *args, **kwargs) -> None:
        if self.loop is not None and not self.loop.is_closed():
            try:
                gate = getattr(self.state, "gate", None)  # applied in arrival order, never under a deciding thread
                call = functools.partial(fn, *args, **kwargs)
                self.loop.call_soon_threadsafe(call if gate is None else functools.partial(gate.run, call))
            except RuntimeError:  # the loop closed between the check and the call: shutting down
                pass

    # ---- thread side: blocking I/O only ----

    def _list(self, res: Resource) -> str | None:
        sent = time.monotonic()
        resp = _call(self.api, res, _request_timeout=(10, 120))
        doc = orjson.loads(resp.data)
        rv = (doc.get("metadata") or {}).get("resourceVersion")
        self._post(self._apply_list, res, doc.get("items") or [], rv)
        if resource_id(res) in FRESH_KINDS:  # a list is a consistent read: current as of when it was sent
            self._post(self._confirm, resource_id(res), sent)
        return rv

    def _watch(self, res: Resource, rv: str) -> str | None:
        """Stream events from `rv`; returns the last resourceVersion, or None when a relist is needed.

        A kind of FRESH_KINDS watches for `fresh.WINDOW` seconds, gives up a connection silent
        for `fresh.SILENCE` (half-open), and records the confirmation a clean close brings.
        """
        rid = resource_id(res)
        short = rid in FRESH_KINDS
        window = min(self.watch_seconds, fresh.WINDOW) if short else self.watch_seconds
        sent = time.monotonic()
        resp = _call(
            self.api, res, watch=True, resource_version=rv, allow_watch_bookmarks=True, timeout_seconds=window,
            _request_timeout=(10, fresh.SILENCE) if short else (10, self.watch_seconds + 30),
        )
        try:
            for line in _lines(resp):
                if self.stopped.is_set():
                    return rv
                event = orjson.loads(line)
                kind, obj = event.get("type"), event.get("object") or {}
                if kind == "ERROR":
                    if obj.get("code") == GONE:
                        self._post(self._restart, rid, "expired")
                        return None
                    raise RuntimeError(f"watch error {obj.get('code')}: {obj.get('message')}")
                rv = (obj.get("metadata") or {}).get("resourceVersion") or rv
                if kind in ("ADDED", "MODIFIED", "DELETED"):
                    self._post(self._apply_event, res, kind, obj, time.perf_counter())
        finally:
            resp.release_conn()
        if short:
            at = fresh.confirmed_by_window(sent, time.monotonic(), window)
            if at is not None:
                self._post(self._confirm, rid, at)
        else:
            self._post(self._restart, rid, "closed")
        return rv

    def _run(self, res: Resource) -> None:
        from kubernetes.client.rest import ApiException

        rid, rv, backoff = resource_id(res), None, 1.0
        cap = fresh.BACKOFF_MAX if rid in FRESH_KINDS else 30.0  # (a fresh kind must recover by itself within the bound)
        while not self.stopped.is_set():
            try:
                if rv is None:
                    rv = self._list(res)
                rv = self._watch(res, rv)
                backoff = 1.0
            except ApiException as exc:
                if exc.status == GONE:
                    rv = None
                    self._post(self._restart, rid, "expired")
                    continue
                if exc.status == 404 and res.optional:  # the CRD is not installed: nothing to wait for
                    if rid not in self._absent_logged:  # said once; looked for again every ABSENT_RETRY, quietly
                        self._absent_logged.add(rid)
                        log.info("%s is not served by this cluster (404): counted as empty, looked for again every %.0f s", rid, ABSENT_RETRY)
                    self._post(self._mark, rid, synced=True, absent=True)
                    self.stopped.wait(ABSENT_RETRY)
                    continue
                self._post(self._restart, rid, "error", f"HTTP {exc.status}: {exc.reason}")
                self.stopped.wait(backoff)
                backoff = min(backoff * 2, cap)
            except Exception as exc:  # noqa: BLE001 - network trouble (a silent connection too): back off and reconnect
                self._post(self._restart, rid, "error", f"{type(exc).__name__}: {exc}"[:300])
                self.stopped.wait(backoff)
                backoff = min(backoff * 2, cap)

    async def run(self) -> None:
        """Start one watcher thread per resource and wait until cancelled."""
        self.loop = asyncio.get_running_loop()
        for res in self.resources:
            t = threading.Thread(target=self._run, args=(res,), name=f"allot-watch-{resource_id(res)}", daemon=True)
            t.start()
            self._threads.append(t)
        try:
            await asyncio.Event().wait()
        finally:
            self.stopped.set()


# Connections `allot serve` keeps to the API server: one per watch thread, and a few for the ledger,
# the meter and reclaim. urllib3's default (5 per core) is smaller than the watches alone, so
# connections coming back to a full pool were discarded: a new handshake, and a warning, each time.
POOL = len(RESOURCES) + 8


def api_client_from(kubeconfig: str | None, pool: int = POOL):
    """A kubernetes ApiClient from a kubeconfig file, or in-cluster config when None, keeping up to `pool` connections."""
    from kubernetes import client, config

    cfg = client.Configuration()
    if kubeconfig:
        config.load_kube_config(config_file=kubeconfig, client_configuration=cfg)
    else:
        config.load_incluster_config(client_configuration=cfg)
    cfg.connection_pool_maxsize = max(cfg.connection_pool_maxsize or 0, pool)
    return client.ApiClient(cfg)
