"""Plans recorded where every replica reads them: one ConfigMap per admitted plan, its steps written by compare-and-swap.

`allot-plan-<id>` in the reclaim namespace (the `--ledger` namespace by default), labelled
`allot.dev/plan=reclaim`, `allot.dev/plan-phase=<phase>` and, while open, `allot.dev/plan-open=true`; its data:

- `plan`: the plan as admitted (`Plan.to_json()`, docs/reclaim.md), victims appended by a replan;
- `request`: the AdmissionReview request it was admitted for (`oldObject` left out), for a replan;
- `status`: `{phase, message, recorded, steps: [{state, by, epoch, at, note}], replans}`.

A step goes `pending` → `acting` (written before the victim is touched, naming the leader and
its Lease epoch) → `done` | `gone` | `unavailable`. Each transition is a replace conditional on
the ConfigMap's `resourceVersion`, so two leaders never both move one step; a leader that finds
a step `acting` (its predecessor died mid-way) does it again, which is safe because every
action is idempotent (kube.py).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

import orjson

from webhook.reclaim.kube import Kube, path

LABEL = "allot.dev/plan"
PHASE = "allot.dev/plan-phase"
OPEN_LABEL = "allot.dev/plan-open"  # "true" while pending or running: what a leader lists (equality selectors only)
OPEN = ("pending", "running")  # phases a leader carries on with
FINAL = ("done", "failed", "abandoned", "expired")
MAX_REQUEST = 256 * 1024  # bytes of the request kept for a replan (a ConfigMap holds at most 1 MiB)


def plan_name(uid: str) -> str:
    """The ConfigMap name of the plan admitted with AdmissionReview `uid`."""
    safe = "".join(ch for ch in uid.lower() if ch.isalnum() or ch == "-").strip("-")
    return f"allot-plan-{safe[:50]}"


@dataclass
class PlanRecord:
    """One plan's ConfigMap, decoded: the plan, the request, the status; `raw` keeps its metadata for the next replace."""

    name: str
    plan: dict
    request: dict | None
    status: dict
    raw: dict = field(default_factory=dict)

    @property
    def phase(self) -> str:
        """pending | running | done | failed | abandoned | expired."""
        return self.status.get("phase", "pending")

    @property
    def steps(self) -> list[dict]:
        """One entry per victim of `plan` (same order)."""
        return self.status.setdefault("steps", [])

    def body(self) -> dict:
        """The ConfigMap to write (with the resourceVersion read: a replace is a compare-and-swap)."""
        out = copy.deepcopy(self.raw)
        meta = out.setdefault("metadata", {})
        labels = meta.setdefault("labels", {})
        labels.update({LABEL: "reclaim", PHASE: self.phase})
        if self.phase in OPEN:
            labels[OPEN_LABEL] = "true"
        else:
            labels.pop(OPEN_LABEL, None)
        data = {"plan": orjson.dumps(self.plan).decode(), "status": orjson.dumps(self.status).decode()}
        if self.request is not None:
            data["request"] = orjson.dumps(self.request).decode()
        out.update(apiVersion="v1", kind="ConfigMap", data=data)
        return out


def new_record(namespace: str, uid: str, plan: dict, request: dict | None, replica: str, now: float) -> PlanRecord:
    """The record of a plan just admitted: every step pending."""
    if request is not None:
        request = {k: v for k, v in request.items() if k != "oldObject"}
        if len(orjson.dumps(request)) > MAX_REQUEST:
            request = None  # too large to keep: a PDB-forbidden victim is then reported, not replaced
    status = {"phase": "pending", "message": "", "recorded": now, "admitted_by": replica, "replans": 0,
              "steps": [{"state": "pending"} for _ in plan.get("victims") or ()]}
    raw = {"metadata": {"name": plan_name(uid), "namespace": namespace}}
    return PlanRecord(raw["metadata"]["name"], plan, request, status, raw)


def decode(cm: dict) -> PlanRecord:
    """A record from its ConfigMap (ValueError when its data is not ours)."""
    data = cm.get("data") or {}
    try:
        plan = orjson.loads(data["plan"])
        status = orjson.loads(data.get("status") or "{}")
        request = orjson.loads(data["request"]) if data.get("request") else None
    except (KeyError, orjson.JSONDecodeError) as exc:
        raise ValueError(f"plan record {cm.get('metadata', {}).get('name')}: {exc}") from None
    return PlanRecord(cm["metadata"]["name"], plan, request, status, cm)


class PlanStore:
    """Create, list and compare-and-swap plan records in one namespace."""

    def __init__(self, kube: Kube, namespace: str) -> None:
        self.kube, self.namespace = kube, namespace

    @property
    def collection(self) -> str:
        """The ConfigMaps collection path."""
        return path("v1", "configmaps", self.namespace)

    async def create(self, record: PlanRecord) -> PlanRecord:
        """Write a new record (409 AlreadyExists raised: recorded already)."""
        return decode(await self.kube.create(self.collection, record.body()))

    async def open(self) -> list[PlanRecord]:
        """Records a leader still has to carry out, oldest first."""
        out = []
        for cm in await self.kube.list(self.collection, f"{LABEL}=reclaim,{OPEN_LABEL}=true"):
            try:
                out.append(decode(cm))
            except ValueError:
                continue  # not a record this version can read: left alone
        return sorted(out, key=lambda r: (r.status.get("recorded") or 0, r.name))

    async def all(self) -> list[PlanRecord]:
        """Every record (tests, `/readyz`-like views)."""
        return [decode(cm) for cm in await self.kube.list(self.collection, f"{LABEL}=reclaim")]

    async def swap(self, record: PlanRecord) -> PlanRecord:
        """Replace the record on the resourceVersion it was read at; the new record (ApiError 409 when someone wrote first)."""
        return decode(await self.kube.replace(path("v1", "configmaps", self.namespace, record.name), record.body()))

    async def read(self, name: str) -> PlanRecord | None:
        """The record now, or None when it was deleted."""
        cm = await self.kube.get(path("v1", "configmaps", self.namespace, name))
        return decode(cm) if cm is not None else None
