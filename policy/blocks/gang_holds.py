"""A gang workload's held domain: its key, who joins it (its pods, its controllers' children) and what releases it.

An admitted JobSet, LeaderWorkerSet, PyTorchJob, TrainJob, RayCluster or RayJob under a
`require topology` holds its domain in the gang planner under the key of its quota hold,
`wl:namespace/Kind/name` (policy/subject/workloads.py `hold_key`). Its pods find it
through the same owner chain the quota hold is found by (`owner_keys`: controller
reference, a Deployment's ReplicaSet, a RayJob's RayCluster, the controllers' labels)
and are pinned there; an object its controller makes (a TrainJob's JobSet, a RayJob's
RayCluster) joins its owner's domain instead of planning one of its own. The domain is
released when the workload is deleted, suspended or scaled to zero (seen by the webhook
or by the cluster watch), else by the planner's expiry.
"""

from __future__ import annotations

from typing import Callable

from policy.blocks.quota import same_generation
from policy.placement import gang_key
from policy.subject.workloads import GANG_KINDS, controlled_child, ends_hold, hold_key, object_uid, owner_keys


def domain_key(w) -> str:
    """The planner key of `w`'s gang: `wl:ns/Kind/name` for a workload object, else its group's `namespace/gang`."""
    if w.template_paths and w.name:
        return hold_key(w.namespace, w.kind, w.name)
    return gang_key(w)


def _parent_keys(w) -> list[str]:
    """The domain keys of the gang workloads that control workload object `w` (a TrainJob for its JobSet, a RayJob for its RayCluster)."""
    refs = (w.obj or {}).get("metadata", {}).get("ownerReferences") if type(w.obj) is dict else None
    if type(refs) is not list:
        return []
    return [hold_key(w.namespace, r["kind"], r["name"]) for r in refs
            if type(r) is dict and r.get("controller") is True and r.get("kind") in GANG_KINDS and type(r.get("name")) is str]


def owned_domain(planner, w, now: float):
    """(key, domain) of the held workload domain request `w` belongs to: a GPU pod's workload, a child object's owner; else None."""
    if planner is None or not planner.workloads:
        return None
    if w.kind == "Pod":
        if w.operation != "CREATE" or w.total_gpus <= 0:  # a CPU-only launcher is no gang member
            return None
        return planner.owner_domain(owner_keys(w), now)
    if w.template_paths and controlled_child(w):
        return planner.owner_domain(_parent_keys(w), now)
    return None


def may_hold(ctx) -> bool:
    """Whether this admitted request holds (or extends) its proposed domain: a Pod on either side; a gang workload object on the validating side.

    A workload's quota is held on the validating side, after every mutation (docs/workloads.md):
    its domain too. An object another gang workload's controller made holds no domain of its own.
    """
    w = ctx.w
    if not w.template_paths:
        return True
    if ctx.mutate or not w.name or w.kind not in GANG_KINDS:
        return False
    if w.kind == "LeaderWorkerSet" and w.min_members is not None and w.pods > w.min_members:
        return False  # groups start on their own (one PodGroup each): one group's domain must not pin them all
    return ctx.gang.gang is None or not controlled_child(w)  # recalled (its own, or its owner's): extended


def release_domain(ctx) -> bool:
    """An admitted UPDATE or DELETE of a workload holding a domain: a DELETE, a suspension or a scale to zero releases it."""
    w = ctx.w
    planner = ctx.state.planner() if ctx.state is not None else None
    if planner is None or not w.name:
        return False
    key = domain_key(w)
    if key not in planner.workloads:
        return False
    if w.operation == "DELETE" or w.suspended or w.total_gpus <= 0:
        return planner.release(key, object_uid(w.obj))
    return False


class DomainWatch:
    """Snapshot subscriber: a held workload gone, finished, suspended or scaled to zero in the cluster releases its domain here."""

    __slots__ = ("planner", "to_workload", "__weakref__")

    def __init__(self, planner, to_workload: Callable[[dict], object]):
        self.planner = planner
        self.to_workload = to_workload

    def on_event(self, event: str, old, new) -> None:
        """A `ClusterSnapshot` callback (every replica sees the watch, so each releases its own copy)."""
        planner = self.planner
        if not planner.workloads:
            return
        obj = new if new is not None else old
        if type(obj) is not dict or obj.get("kind") not in GANG_KINDS:
            return
        meta = obj.get("metadata") if type(obj.get("metadata")) is dict else {}
        name = meta.get("name")
        if type(name) is not str:
            return
        key = hold_key(meta.get("namespace"), obj["kind"], name)
        if key not in planner.workloads:
            return
        if event == "DELETED" or new is None or ends_hold(new):
            planner.release(key, object_uid(obj))
        elif not same_generation(old, new):
            w = self.to_workload(new)
            if w.suspended or w.total_gpus <= 0:
                planner.release(key, object_uid(new))
