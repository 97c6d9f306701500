"""`VictimBook`: the running GPU workloads of each quota, grouped into whole workloads, kept from pod events.

A victim is never a lone pod of a gang or a Job: every pod is filed under the workload that
runs it (its JobSet, LeaderWorkerSet, PyTorchJob or Workspace label; else its controlling owner,
a Deployment for a ReplicaSet; else its pod group; else itself), so a plan evicts or suspends
whole workloads. The quota ledger feeds it (one call per pod event), so a plan never scans pods.
"""

from __future__ import annotations

from collections.abc import Mapping

SUSPENDABLE = frozenset({"Job", "JobSet", "PyTorchJob", "MPIJob", "TrainJob", "RayJob", "RayCluster"})  # `spec.suspend` (Kueue)
# Pod labels naming the workload a controller made the pod for, top-most first (policy/subject/workloads.py OWNER_LABELS).
UNIT_LABELS = (
    ("jobset.sigs.k8s.io/jobset-name", "JobSet"),
    ("leaderworkerset.sigs.k8s.io/name", "LeaderWorkerSet"),
    ("training.kubeflow.org/job-name", "PyTorchJob"),
    ("kaito.sh/workspace", "Workspace"),
)


class Unit:
    """One running workload: its pods (index key -> (namespace, name, uid, node, milli)) and its charges per quota."""

    __slots__ = ("key", "kind", "namespace", "name", "uid", "pods", "milli", "priority", "admitted", "_facts", "_nodes")

    def __init__(self, key: tuple, kind: str, namespace: str, name: str, uid: str | None):
        self.key, self.kind, self.namespace, self.name, self.uid = key, kind, namespace, name, uid
        self.pods: dict[str, tuple] = {}
        self.milli: dict[int, int] = {}  # quota index -> milli-GPU charged
        self.priority: dict[str, int] = {}  # pod key -> its priority
        self.admitted: dict[str, str] = {}  # pod key -> creationTimestamp
        self._facts: tuple | None = None  # (lowest priority, -admitted as an integer, GPUs), until a pod changes
        self._nodes: frozenset | None = None  # the nodes its bound pods run on, until a pod changes

    def nodes(self) -> frozenset:
        """The nodes its bound pods hold GPUs on (cached)."""
        nodes = self._nodes
        if nodes is None:
            nodes = self._nodes = frozenset(p[3] for p in self.pods.values() if p[3] is not None)
        return nodes

    def facts(self) -> tuple[int, int, int]:
        """(lowest priority, minus the first admission as digits, milli-GPU): what the victim order reads, cached."""
        facts = self._facts
        if facts is None:
            stamp = self.first_admitted()
            digits = "".join(ch for ch in stamp if ch.isdigit())
            facts = self._facts = (self.lowest_priority(), -int(digits) if digits else 0, self.gpus())
        return facts

    @property
    def action(self) -> str:
        """`suspend` for a kind with `spec.suspend` (it comes back, re-queued), else `evict` (the Eviction API, pod by pod)."""
        return "suspend" if self.kind in SUSPENDABLE else "evict"

    def lowest_priority(self) -> int:
        """The workload's priority: its pods' lowest."""
        return min(self.priority.values(), default=0)

    def first_admitted(self) -> str:
        """Its earliest pod's creationTimestamp (RFC 3339 strings in UTC order as text)."""
        return min(self.admitted.values(), default="")

    def gpus(self) -> int:
        """Milli-GPU its pods hold (the largest of its quota charges: a pod charged to two quotas holds its GPUs once)."""
        return max(self.milli.values(), default=0)


def unit_of(pod: Mapping, gang: str | None) -> tuple[str, str, str | None]:
    """(kind, name, uid or None) of the workload a pod belongs to: labels, controlling owner, pod group, else the pod."""
    meta = pod.get("metadata") or {}
    labels = meta.get("labels") or {}
    if isinstance(labels, Mapping):
        for label, kind in UNIT_LABELS:
            name = labels.get(label)
            if type(name) is str and name:
                return kind, name, None
    refs = meta.get("ownerReferences")
    for ref in refs if type(refs) is list else ():
        if type(ref) is not dict or ref.get("controller") is not True or type(ref.get("name")) is not str:
            continue
        kind, name = ref.get("kind"), ref["name"]
        if kind == "ReplicaSet":
            h = labels.get("pod-template-hash") if isinstance(labels, Mapping) else None
            if type(h) is str and h and name.endswith("-" + h):
                return "Deployment", name[: -len(h) - 1], None
        if type(kind) is str:
            return kind, name, ref.get("uid") if type(ref.get("uid")) is str else None
    if gang:
        return "PodGroup", gang, None
    uid = meta.get("uid")
    return "Pod", str(meta.get("name") or ""), uid if type(uid) is str else None


def index_key(pod: Mapping) -> str:
    """The key the placement index files a pod under (its uid, else namespace/name)."""
    meta = pod.get("metadata") or {}
    uid = meta.get("uid")
    return uid if type(uid) is str and uid else f"{meta.get('namespace') or 'default'}/{meta.get('name')}"


class VictimBook:
    """Running workloads by quota index, kept from the quota ledger's pod events."""

    def __init__(self) -> None:
        self.units: dict[tuple, Unit] = {}
        self.by_quota: dict[int, dict[tuple, Unit]] = {}
        self._pods: dict[str, tuple[tuple, str, tuple]] = {}  # ledger pod key -> (unit key, index key, charges)
        self.pledged: dict[tuple, float] = {}  # unit key -> until when an admitted plan's victim counts as going
        self.by_node: dict[str, dict[tuple, Unit]] = {}  # node -> the units with a bound pod there (a domain's candidates)
        self._ordered: dict[int, list[Unit]] = {}  # quota index -> its units in victim order, until one of them changes
        self.search = "ordered"  # or "plain": every candidate built and ordered per request (the baseline bench reclaim times)

    def ordered(self, qi: int) -> list[Unit]:
        """Quota `qi`'s units by (lowest priority, newest first, key): the victim order within a quota but for GPUs wasted."""
        units = self._ordered.get(qi)
        if units is None:
            units = self._ordered[qi] = sorted(self.by_quota.get(qi, {}).values(), key=lambda u: (*u.facts()[:2], u.key))
        return units

    def _changed(self, unit: Unit, charges: tuple) -> None:
        unit._facts = unit._nodes = None
        for qi in (*unit.milli, *(c[0] for c in charges)):  # its facts moved in every quota's order it is in
            self._ordered.pop(qi, None)
        self.excluded: set[tuple] = set()  # unit keys never chosen: a controller's replan after a PDB forbade them (webhook/reclaim)

    def add(self, key: str, pod: Mapping, w, charges: tuple) -> None:
        """File a live pod charged `charges` (the ledger's tuples) under its workload."""
        self.remove(key)
        if not charges:
            return
        meta = pod.get("metadata") or {}
        ns = str(meta.get("namespace") or "default")
        kind, name, uid = unit_of(pod, getattr(w, "gang", None))
        ukey = (ns, kind, name)
        unit = self.units.get(ukey)
        if unit is None:
            unit = self.units[ukey] = Unit(ukey, kind, ns, name, uid)
        elif unit.uid is None and uid is not None:
            unit.uid = uid
        ikey = index_key(pod)
        node = (pod.get("spec") or {}).get("nodeName")
        milli = max(c[1] for c in charges)
        pod_uid = meta.get("uid")
        unit.pods[ikey] = (ns, str(meta.get("name") or ""), pod_uid if type(pod_uid) is str else None,
                           node if type(node) is str and node else None, milli)
        priority = (pod.get("spec") or {}).get("priority")
        unit.priority[ikey] = priority if type(priority) is int else 0
        created = meta.get("creationTimestamp")
        unit.admitted[ikey] = created if type(created) is str else ""
        for qi, m, *_ in charges:
            unit.milli[qi] = unit.milli.get(qi, 0) + m
            self.by_quota.setdefault(qi, {})[ukey] = unit
        self._changed(unit, charges)
        if type(node) is str and node:
            self.by_node.setdefault(node, {})[ukey] = unit
        self._pods[key] = (ukey, ikey, charges)

    def remove(self, key: str) -> None:
        """Forget a pod (gone, finished, re-charged)."""
        known = self._pods.pop(key, None)
        if known is None:
            return
        ukey, ikey, charges = known
        unit = self.units.get(ukey)
        if unit is None:
            return
        pod = unit.pods.pop(ikey, None)
        self._changed(unit, charges)
        node = pod[3] if pod is not None else None
        if node is not None and not any(p[3] == node for p in unit.pods.values()):
            on = self.by_node.get(node, {})
            on.pop(ukey, None)
            if not on:
                self.by_node.pop(node, None)
        unit.priority.pop(ikey, None)
        unit.admitted.pop(ikey, None)
        for qi, m, *_ in charges:
            left = unit.milli.get(qi, 0) - m
            if left > 0:
                unit.milli[qi] = left
            else:
                unit.milli.pop(qi, None)
                self.by_quota.get(qi, {}).pop(ukey, None)
        if not unit.pods:
            del self.units[ukey]


def needs_book(policy) -> bool:
    """Whether a plan may ever be made: some quota joins a cohort (reclaim, fair share), or a class preempts."""
    return bool(policy.quotas) and (any(q.cohort for q in policy.quotas) or any(p.preempts for p in policy.priorities))
