"""`ClusterSnapshot`: an incrementally updated cache of the Kubernetes objects Allot decides against."""

from __future__ import annotations

import gc
from contextlib import contextmanager
from typing import Callable, Iterable, Iterator, Mapping

from policy.subject.dialects.common import BAD_OBJECT, EMPTY
from policy.subject.dialects.gangs import GroupInfo, group_family, read_group
from policy.cluster.memory import GpuMemoryIndex
from policy.cluster.shape import shape_problem
from policy.cluster.errors import SnapshotError
from policy.cluster.ledger import ReservationLedger

Callback = Callable[[str, "dict | None", "dict | None"], None]
EVENTS = frozenset({"ADDED", "MODIFIED", "DELETED"})
# Kinds without a namespace; everything else is keyed by (namespace, name).
CLUSTER_SCOPED = frozenset({"Node", "Namespace", "PriorityClass", "DeviceClass"})


def is_live(pod: Mapping) -> bool:
    """A pod that holds its resources: not Succeeded/Failed and not being deleted."""
    if (pod.get("metadata") or EMPTY).get("deletionTimestamp"):
        return False
    return (pod.get("status") or EMPTY).get("phase") not in ("Succeeded", "Failed")


@contextmanager
def _collector_paused():
    """Pause the cyclic GC during a bulk load: it would rescan millions of fresh, acyclic dicts (~1/3 of load time)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


class ClusterSnapshot:
    """Nodes, pods, namespaces, priority classes, gang objects and DRA objects, with change callbacks."""

    is_live = staticmethod(is_live)

    def __init__(self) -> None:
        self._nodes: dict[str, dict] = {}
        self._pods: dict[tuple[str, str], dict] = {}
        self._pods_by_node: dict[str, dict[tuple[str, str], dict]] = {}
        self._namespaces: dict[str, dict] = {}
        self._priority_classes: dict[str, dict] = {}
        self._device_classes: dict[str, dict] = {}
        self._claims: dict[tuple[str, str], dict] = {}
        self._claim_templates: dict[tuple[str, str], dict] = {}
        self._groups: dict[tuple[str, str], dict[str, GroupInfo]] = {}
        self._group_objs: dict[tuple[str, str, str], dict] = {}
        self._other: dict[tuple[str, str, str, str], dict] = {}
        self._gpu_memory = GpuMemoryIndex()
        self._subscribers: list[Callback] = []
        self.resource_version = 0
        self.rejected = 0  # objects `apply` refused as malformed: a watcher skips them, this counts them
        self.reservations = ReservationLedger()  # quota holds of admitted pods: here so they outlive a policy reload

    # ---- loading -------------------------------------------------------------------------
    @classmethod
    def from_objects(cls, objs: Iterable[Mapping]) -> "ClusterSnapshot":
        """A snapshot holding `objs` (Lists are flattened); raises SnapshotError on unusable objects."""
        from policy.cluster.text import flatten

        snap = cls()
        with _collector_paused():
            for i, obj in enumerate(objs):
                for where, _, item, kind in flatten(obj, f"objects[{i}]", None, ()):
                    snap._add(item, kind, lambda w=where: f"{w}: ")
        return snap

    @classmethod
    def from_text(cls, text: str) -> "ClusterSnapshot":
        """A snapshot from `kubectl get … -o yaml|json` text (a List, nested Lists or multi-doc YAML)."""
        from policy.cluster.text import load_documents  # parsing lives apart: YAML/JSON and locations

        snap = cls()
        with _collector_paused():
            for where, obj, kind, locate in load_documents(text):
                snap._add(obj, kind, lambda w=where, at=locate: f"{at()}{w}: ")
        return snap

    def _add(self, obj, kind: str | None, where: Callable[[], str]) -> None:
        try:
            self.apply("ADDED", obj, kind=kind)
        except SnapshotError as exc:
            raise SnapshotError(f"{where()}{exc}") from None

    # ---- incremental updates -------------------------------------------------------------
    def subscribe(self, callback: Callback) -> None:
        """Call `callback(event, old, new)` after every applied change (event ADDED|MODIFIED|DELETED)."""
        self._subscribers.append(callback)

    def apply(self, event: str, obj: Mapping, kind: str | None = None) -> bool:
        """Apply one watch event; returns False when it changed nothing (e.g. deleting an unknown object).

        A malformed object raises SnapshotError before any index changes, and is counted in `rejected`.
        """
        try:
            k, obj, ns, name = self._checked(event, obj, kind)
            store, key = self._store_for(k, obj.get("apiVersion") or "", ns, name)
            group = self._read_group(key, obj, ns) if event != "DELETED" and store is self._group_objs else None
        except SnapshotError:
            self.rejected += 1
            raise
        old = store.get(key)
        if event == "DELETED":
            if old is None:
                return False
            del store[key]
            self._unindex(k, key, old, ns)
            new = None
        else:
            if old is not None:
                self._unindex(k, key, old, ns)
                event = "MODIFIED"
            else:
                event = "ADDED"
            store[key] = obj
            self._index(k, key, obj, ns, group)
            new = obj
            if k == "Pod" and self.reservations.holds and is_live(obj):
                self.reservations.release(f"{ns}/{name}")  # the pod now carries its own charge
        self.resource_version += 1
        for cb in self._subscribers:
            cb(event, old, new)
        return True

    @staticmethod
    def _checked(event: str, obj, kind: str | None) -> tuple[str, dict, str | None, str]:
        """(kind, object, namespace, name) of a usable object; SnapshotError (one line) otherwise."""
        if event not in EVENTS:
            raise SnapshotError(f"event {event!r} is not ADDED, MODIFIED or DELETED")
        if type(obj) is not dict:
            if not isinstance(obj, Mapping):
                raise SnapshotError(f"expected an object, got {type(obj).__name__}")
            obj = dict(obj)
        k = obj.get("kind") or kind
        meta = obj.get("metadata")
        if type(k) is not str or not k:
            raise SnapshotError("object has no kind" if not k else "kind must be a string")
        name = meta.get("name") if type(meta) is dict else None
        if type(name) is not str or not name:
            raise SnapshotError(f"{k} has no metadata.name")
        if obj.get("kind") != k:
            obj = {**obj, "kind": k}  # items of typed lists omit kind; keep it for subscribers
        ns = None if k in CLUSTER_SCOPED else (meta.get("namespace") or "default")
        if ns is not None and type(ns) is not str:
            raise SnapshotError(f"{k} {name}: metadata.namespace must be a string")
        if type(obj.get("apiVersion") or "") is not str:  # part of a group object's key, so checked for deletes too
            raise SnapshotError(f"{k} {f'{ns}/' if ns else ''}{name}: apiVersion must be a string")
        if event != "DELETED":  # a delete needs only the key; the stored object was checked when added
            problem = shape_problem(k, obj)
            if problem is not None:
                raise SnapshotError(f"{k} {f'{ns}/' if ns else ''}{name}: {problem}")
        return k, obj, ns, name

    def _read_group(self, key, obj: dict, ns: str | None) -> GroupInfo | None:
        """The gang object's reading, taken before any index changes so a failure leaves them whole."""
        from policy.subject.demand import pod_demand  # cycle-free: demand imports dialects only

        try:
            info = read_group(obj, key[0], lambda p: pod_demand(p, self))
        except (TypeError, AttributeError, ValueError) as exc:  # the reader's contract is "problems, not exceptions"
            raise SnapshotError(f"{obj['kind']} {ns}/{key[2]}: unreadable group object ({type(exc).__name__}: {exc})") from None
        for p in info.problems:  # a field of the wrong type: refused like any other mis-typed object
            if p.code == BAD_OBJECT:
                raise SnapshotError(f"{obj['kind']} {ns}/{key[2]}: unreadable group object ({p.message})")
        return info

    def _store_for(self, kind: str, api_version: str, ns: str | None, name: str) -> tuple[dict, object]:
        if kind == "Pod":
            return self._pods, (ns, name)
        if kind == "Node":
            return self._nodes, name
        if kind == "Namespace":
            return self._namespaces, name
        if kind == "PriorityClass":
            return self._priority_classes, name
        if kind == "ResourceClaim":
            return self._claims, (ns, name)
        if kind == "ResourceClaimTemplate":
            return self._claim_templates, (ns, name)
        if kind == "DeviceClass":
            return self._device_classes, name
        family = group_family(api_version, kind)
        if family is not None:
            return self._group_objs, (family, ns, name)
        return self._other, (api_version, kind, ns or "", name)

    def _index(self, kind: str, key, obj: dict, ns: str | None, group: GroupInfo | None = None) -> None:
        if kind == "Pod":
            node = (obj.get("spec") or EMPTY).get("nodeName")
            if node:
                self._pods_by_node.setdefault(node, {})[key] = obj
        elif kind == "Node":
            self._gpu_memory.add(key, obj)
        elif group is not None:
            self._groups.setdefault((ns, group.name), {})[key[0]] = group

    def _unindex(self, kind: str, key, obj: dict, ns: str | None) -> None:
        if kind == "Pod":
            node = (obj.get("spec") or EMPTY).get("nodeName")
            on = self._pods_by_node.get(node) if node else None
            if on is not None:
                on.pop(key, None)
                if not on:
                    del self._pods_by_node[node]
        elif kind == "Node":
            self._gpu_memory.remove(key, obj)
        elif type(key) is tuple and len(key) == 3 and key[0] in _FAMILIES:
            byname = self._groups.get((ns, key[2]))
            if byname is not None:
                byname.pop(key[0], None)
                if not byname:
                    del self._groups[(ns, key[2])]

    # ---- look-ups -------------------------------------------------------------------------
    def namespace(self, name: str) -> dict | None:
        """The Namespace object, or None."""
        return self._namespaces.get(name)

    def namespace_labels(self, name: str | None) -> Mapping[str, str]:
        """Labels of the namespace (empty when unknown)."""
        ns = self._namespaces.get(name) if name else None
        return ((ns.get("metadata") or EMPTY).get("labels") or EMPTY) if ns is not None else EMPTY

    def nodes(self) -> Iterable[dict]:
        """Every Node."""
        return self._nodes.values()

    def node(self, name: str) -> dict | None:
        """The Node, or None."""
        return self._nodes.get(name)

    def pods(self) -> Iterable[dict]:
        """Every Pod, live or not (filter with `is_live`)."""
        return self._pods.values()

    def pods_on(self, node_name: str) -> Iterable[dict]:
        """Pods bound to a node (`spec.nodeName`)."""
        return (self._pods_by_node.get(node_name) or EMPTY).values()

    def pod(self, ns: str, name: str) -> dict | None:
        """The Pod, or None."""
        return self._pods.get((ns, name))

    def priority_class(self, name: str) -> dict | None:
        """The PriorityClass, or None."""
        return self._priority_classes.get(name)

    def priority_classes(self) -> Iterable[dict]:
        """Every PriorityClass."""
        return self._priority_classes.values()

    def default_priority_class(self) -> dict | None:
        """The `globalDefault: true` PriorityClass (lowest value if several, as the 1.36 Priority plugin picks), or None."""
        best = None
        for pc in self._priority_classes.values():
            if pc.get("globalDefault") is True and type(pc.get("value")) is int:
                if best is None or pc["value"] < best["value"]:
                    best = pc
        return best

    def group(self, ns: str, name: str, family: str | None = None) -> GroupInfo | None:
        """The gang object `ns/name` of `family` (or of any dialect when None)."""
        byname = self._groups.get((ns, name))
        if not byname:
            return None
        if family is not None:
            return byname.get(family)
        return next(iter(byname.values()))

    def groups(self) -> Iterator[GroupInfo]:
        """Every gang object, read."""
        for byname in self._groups.values():
            yield from byname.values()

    def resource_claim(self, ns: str, name: str) -> dict | None:
        """The ResourceClaim, or None."""
        return self._claims.get((ns, name))

    def resource_claim_template(self, ns: str, name: str) -> dict | None:
        """The ResourceClaimTemplate, or None."""
        return self._claim_templates.get((ns, name))

    def device_class(self, name: str) -> dict | None:
        """The DeviceClass, or None."""
        return self._device_classes.get(name)

    def all_objects(self) -> list[dict]:
        """Every object held, of every kind (a scratch copy for a what-if decision: webhook/reclaim/replan.py)."""
        out: list[dict] = []
        for store in (self._namespaces, self._priority_classes, self._device_classes, self._nodes, self._claims,
                      self._claim_templates, self._group_objs, self._other, self._pods):
            out += store.values()
        return out

    def objects(self, kind: str) -> list[dict]:
        """Objects of a kind Allot does not index (e.g. Kueue ClusterQueues), for tools."""
        return [o for (_, k, _, _), o in self._other.items() if k == kind]

    def other(self, api_version: str, kind: str, ns: str, name: str) -> dict | None:
        """One object of a kind Allot does not index (a Deployment, a Job ...) by its key, or None (a dict hit, not a scan)."""
        return self._other.get((api_version, kind, ns, name))

    def node_gpu_memory(self, node_name: str) -> int | None:
        """Bytes per GPU of a node (GFD `nvidia.com/gpu.memory`), or None."""
        return self._gpu_memory.by_node.get(node_name)

    def gpu_memory(self, product: str | None, node_name: str | None = None) -> int | None:
        """Bytes per device: of the pod's node, else of the product, else the cluster's only size."""
        return self._gpu_memory.lookup(product, node_name)

    def __len__(self) -> int:
        return (
            len(self._nodes) + len(self._pods) + len(self._namespaces) + len(self._priority_classes)
            + len(self._device_classes) + len(self._claims) + len(self._claim_templates)
            + len(self._group_objs) + len(self._other)
        )


_FAMILIES = frozenset({"coscheduling", "volcano", "kai", "podgroup", "workload", "kueue", "composite"})
