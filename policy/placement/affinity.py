"""What the engine calls to pin gang members to their domain: RFC 6902 affinity patches and `GangPlanner`."""

from __future__ import annotations

import heapq
from typing import Mapping, Sequence

from policy.placement.capacity import is_map
from policy.placement.members import Members
from policy.placement.reservations import RESERVATION_ANNOTATION
from policy.placement.result import GangRequest, PlacementResult

_REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
WORKLOAD_PREFIX = "wl:"  # gang keys of workload objects (`wl:namespace/Kind/name`, as their quota holds): their pods are pinned by owner
ENDED_LIMIT = 4096  # workload domains released here, remembered so a cluster ledger's stale copy is not held again


def _escape(token: str) -> str:
    return token.replace("~", "~0").replace("/", "~1")


def _at(obj: Mapping, pointer: str):
    """The value at a JSON pointer of `obj`, or None when any step is missing."""
    cur: object = obj
    for raw in pointer.split("/")[1:]:
        token = raw.replace("~1", "/").replace("~0", "~")
        if is_map(cur):
            cur = cur.get(token)
        elif isinstance(cur, list) and token.isdigit() and int(token) < len(cur):
            cur = cur[int(token)]
        else:
            return None
        if cur is None:
            return None
    return cur


def affinity_patch(pod: Mapping, label: str, value: str, prefix: str = "/spec", *, ancestors: Sequence[tuple[str, str]] = ()) -> list[dict]:
    """Ops adding required node affinity `label In [value]` (after `ancestors`' pairs) to the pod spec at `prefix`, ANDed into every existing term.

    Pass the wider levels as `ancestors` when a level's values repeat across parents
    (rack `r1` in two blocks): the expressions then name the one domain.
    """
    wanted = [{"key": k, "operator": "In", "values": [v]} for k, v in (*ancestors, (label, value))]
    spec = _at(pod, prefix) if prefix else pod
    if not is_map(spec):
        return [{"op": "add", "path": prefix, "value": {"affinity": _fresh_affinity(wanted)}}]
    affinity = spec.get("affinity")
    base = f"{prefix}/affinity"
    if not is_map(affinity):
        return [{"op": "add", "path": base, "value": _fresh_affinity(wanted)}]
    node_affinity = affinity.get("nodeAffinity")
    if not is_map(node_affinity):
        return [{"op": "add", "path": f"{base}/nodeAffinity", "value": _fresh_affinity(wanted)["nodeAffinity"]}]
    required = node_affinity.get(_REQUIRED)
    req_path = f"{base}/nodeAffinity/{_REQUIRED}"
    if not is_map(required):
        return [{"op": "add", "path": req_path, "value": {"nodeSelectorTerms": [{"matchExpressions": _copy(wanted)}]}}]
    terms = required.get("nodeSelectorTerms")
    if not isinstance(terms, list) or not terms:
        return [{"op": "add", "path": f"{req_path}/nodeSelectorTerms", "value": [{"matchExpressions": _copy(wanted)}]}]
    ops = []
    for i, term in enumerate(terms):
        # Terms are ORed: the domain must hold in each, so each gets the expressions (ANDed inside it).
        exprs = term.get("matchExpressions") if is_map(term) else None
        term_path = f"{req_path}/nodeSelectorTerms/{i}"
        if not is_map(term):
            ops.append({"op": "replace", "path": term_path, "value": {"matchExpressions": _copy(wanted)}})
        elif isinstance(exprs, list):
            ops.extend({"op": "add", "path": f"{term_path}/matchExpressions/-", "value": dict(e, values=list(e["values"]))}
                       for e in wanted if e not in exprs)
        else:
            ops.append({"op": "add", "path": f"{term_path}/matchExpressions", "value": _copy(wanted)})
    return ops


_PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"


def preferred_patch(pod: Mapping, nodes: Sequence[tuple[str, int]], prefix: str = "/spec") -> list[dict]:
    """Ops adding one preferred node affinity term per (node name, weight), after any the pod has; nothing required, nothing replaced.

    A term matches the node by `metadata.name` (matchFields), not by a hostname label a node may not carry.
    """
    terms = [{"weight": weight, "preference": {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}}
             for node, weight in nodes]
    if not terms:
        return []
    spec = _at(pod, prefix) if prefix else pod
    if not is_map(spec):
        return [{"op": "add", "path": prefix, "value": {"affinity": {"nodeAffinity": {_PREFERRED: terms}}}}]
    base = f"{prefix}/affinity"
    affinity = spec.get("affinity")
    if not is_map(affinity):
        return [{"op": "add", "path": base, "value": {"nodeAffinity": {_PREFERRED: terms}}}]
    node_affinity = affinity.get("nodeAffinity")
    if not is_map(node_affinity):
        return [{"op": "add", "path": f"{base}/nodeAffinity", "value": {_PREFERRED: terms}}]
    have = node_affinity.get(_PREFERRED)
    path = f"{base}/nodeAffinity/{_PREFERRED}"
    if not isinstance(have, list):
        return [{"op": "add" if have is None and _PREFERRED not in node_affinity else "replace", "path": path, "value": terms}]
    return [{"op": "add", "path": f"{path}/-", "value": t} for t in terms]  # the pod's own preferences stay, with their weights


def _copy(exprs: list[dict]) -> list[dict]:
    return [dict(e, values=list(e["values"])) for e in exprs]


def _fresh_affinity(exprs: list[dict]) -> dict:
    return {"nodeAffinity": {_REQUIRED: {"nodeSelectorTerms": [{"matchExpressions": _copy(exprs)}]}}}


def _levels(index, topology: str):
    """The (level, label) pairs `index` knows for `topology`, or None."""
    return next((levels for name, levels in index.topologies if name == topology), None)


def reservation_patch(pod: Mapping, reservation_id: str) -> list[dict]:
    """Ops setting the `allot.dev/reservation` annotation, so the bound pod releases its held slot."""
    meta = pod.get("metadata") if is_map(pod) else None
    annotations = meta.get("annotations") if is_map(meta) else None
    if not is_map(meta):
        return [{"op": "add", "path": "/metadata", "value": {"annotations": {RESERVATION_ANNOTATION: reservation_id}}}]
    if not is_map(annotations):
        return [{"op": "add", "path": "/metadata/annotations", "value": {RESERVATION_ANNOTATION: reservation_id}}]
    return [{"op": "add", "path": f"/metadata/annotations/{_escape(RESERVATION_ANNOTATION)}", "value": reservation_id}]


class GangPlanner:
    """Remembers each gang's chosen domain (key `namespace/gang`) so every member gets the same one."""

    def __init__(self, index, ttl: float = 300.0):
        self.index = index
        self.ttl = ttl
        self._chosen: dict[str, tuple[PlacementResult, float]] = {}  # key -> (result, forget after)
        self._forget: list[tuple[float, str]] = []  # heap of (forget after, key); stale entries skipped
        self.members = Members()  # each gang's members seen so far (set, shape): policy/placement/request.py plans with them
        self.workloads: set[str] = set()  # remembered keys of workload objects' domains (their member pods look them up)
        self.uids: dict[str, str | None] = {}  # workload key -> uid of the object its domain was held for
        self._ended: dict[str, float] = {}  # workload key -> expiry of the domain released here (deleted, suspended, scaled to 0)

    def plan(self, key: str, gang: GangRequest, now: float, *, dry_run: bool = False) -> PlacementResult:
        """The gang's placement: the remembered one, or a new query (held under `key` unless dry-run)."""
        result = self.propose(key, gang, now)
        if result.fits and not dry_run:
            self.hold(key, result, now)
        return result

    def propose(self, key: str, gang: GangRequest, now: float) -> PlacementResult:
        """The remembered placement of gang `key`, else a fresh query; holds nothing (the engine holds once admitted)."""
        hit = self.recall(key, now)
        return hit if hit is not None else self.index.query(gang)  # the index re-uses answers while unchanged

    def hold(self, key: str, result: PlacementResult, now: float) -> None:
        """Hold a fitting `result` for gang `key`: a remembered one is held a while longer, a new one is reserved."""
        if not result.fits:
            return
        known = self._chosen.get(key)
        if known is not None and known[0] is result:  # members still arriving: the gang is alive
            self.index.reservations.extend(key, now + self.ttl)
        else:
            self.index.reserve(key, result, now + self.ttl)
        self._remember(key, result, now)

    def recall(self, key: str, now: float) -> PlacementResult | None:
        """The domain chosen for gang `key` if it is still remembered at `now` (expired ones are forgotten first)."""
        self.expire(now)
        hit = self._chosen.get(key)
        return hit[0] if hit is not None else None

    def expire(self, now: float) -> None:
        """Release held slots and forget chosen domains whose time has passed at `now`."""
        self.index.expire(now)
        while self._forget and self._forget[0][0] <= now:
            until, old = heapq.heappop(self._forget)
            hit = self._chosen.get(old)
            if hit is not None and hit[1] == until:
                del self._chosen[old]
                if old in self.workloads:
                    self.workloads.discard(old)
                    self.uids.pop(old, None)

    def _remember(self, key: str, result: PlacementResult, now: float, until: float | None = None) -> None:
        until = now + self.ttl if until is None else until
        self._chosen[key] = (result, until)
        heapq.heappush(self._forget, (until, key))
        if key.startswith(WORKLOAD_PREFIX):
            self.workloads.add(key)
            self._ended.pop(key, None)  # held again (a new object of that name, or resumed)

    def adopt(self, old: "GangPlanner", now: float) -> list[str]:
        """Take over `old`'s live gangs (a policy reload over the same nodes): same domain, same held slots.

        A gang whose topology the new policy defines differently (or not at all) is not
        adopted: its domain no longer means the same thing, so it re-plans. Returns the keys taken.
        """
        old.expire(now)
        self.members.adopt(old.members)
        self.uids.update(old.uids)
        self._ended.update(old._ended)
        adopted = []
        for key, (result, until) in old._chosen.items():
            if result.topology is not None and _levels(old.index, result.topology) != _levels(self.index, result.topology):
                continue
            held = old.index.reservations.get(key)
            if held is not None:
                self.index.restore(held, result.per_gpu)
            self._remember(key, result, now, until)
            adopted.append(key)
        return adopted

    def mirror(self, held, result: PlacementResult, now: float) -> bool:
        """Hold gang `held.id` as another replica placed it (a cluster ledger): its domain and slots, until `held.expires_at`; False if known here."""
        if held.expires_at <= now or self.recall(held.id, now) is not None:
            return False
        if held.id in self._ended and held.expires_at <= self._ended[held.id]:
            return False  # a workload domain released here (deleted, suspended): the ledger's copy is stale
        self.index.restore(held, result.per_gpu)
        self._remember(held.id, result, now, held.expires_at)
        return True

    def patch(self, pod: Mapping, key: str, result: PlacementResult, prefix: str = "/spec") -> list[dict]:
        """Affinity to the chosen domain plus the reservation annotation (empty for a whole-topology placement)."""
        if not result.fits or result.label is None or result.domain is None:
            return []
        ancestors = tuple(result.path[:-1])  # wider levels too: rack names may repeat across blocks
        return affinity_patch(pod, result.label, result.domain, prefix, ancestors=ancestors) + reservation_patch(pod, key)

    def forget(self, key: str) -> None:
        """Drop the remembered domain and release what is still held."""
        self._chosen.pop(key, None)
        self.index.release(key)
        if key in self.workloads:
            self.workloads.discard(key)
            self.uids.pop(key, None)

    def release(self, key: str, uid: str | None = None) -> bool:
        """Release workload `key`'s domain for good (deleted, suspended, scaled to zero) unless it was held for another object (`uid`); once.

        Remembered as ended, so another replica's copy of it in a cluster ledger is not held again here.
        """
        hit = self._chosen.get(key)
        if hit is None:
            return False
        held = self.uids.get(key)
        if held is not None and uid is not None and held != uid:
            return False  # a late event of an older object of that name: not this domain's
        resv = self.index.reservations.get(key)
        self._ended[key] = max(hit[1], resv.expires_at if resv is not None else 0.0)
        if len(self._ended) > ENDED_LIMIT:
            del self._ended[next(iter(self._ended))]
        self.forget(key)
        return True

    def owner_domain(self, keys, now: float) -> tuple[str, PlacementResult] | None:
        """(key, domain) of the first of `keys` (a pod's owner chain) whose workload holds a domain here at `now`, else None."""
        self.expire(now)
        chosen, workloads = self._chosen, self.workloads
        for key in keys:
            if key in workloads and key in chosen:
                return key, chosen[key][0]
        return None
