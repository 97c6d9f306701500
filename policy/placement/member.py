"""The engine's one call: place a gang member (or group object) and get the reason, the Placement and the patch."""

from __future__ import annotations

from dataclasses import dataclass

from policy.decision import Placement
from policy.placement.affinity import GangPlanner
from policy.placement.request import request_for
from policy.placement.result import GangRequest, PlacementResult
from policy.subject.model import Workload


@dataclass(frozen=True, slots=True)
class MemberPlacement:
    """What `policy/blocks/gang.py` needs: fits, a one-line reason, the Placement to record, this member's patch."""

    fits: bool
    reason: str
    placement: Placement | None
    patch: tuple[dict, ...]
    result: PlacementResult


def gang_key(w: Workload) -> str:
    """`namespace/gang` (the group's own name for a group object): members of one gang share it."""
    return f"{w.namespace or 'default'}/{w.gang or w.name or ''}"


def gang_request(w: Workload, topology: str, level: str, per_gpu: int | None = None) -> GangRequest:
    """The gang a workload stands for, by `request_for` (the one path): a group's pod sets, or a Pod's gang shaped like it."""
    return request_for(w, topology=topology, required=level, per_gpu=per_gpu)


def place_member(planner: GangPlanner, w: Workload, topology: str, level: str, now: float, per_gpu: int | None = None) -> MemberPlacement:
    """Plan (or recall) the gang's domain, reserve it unless dry-run, and patch a Pod member's node affinity."""
    key = gang_key(w)
    result = planner.plan(key, gang_request(w, topology, level, per_gpu), now, dry_run=w.dry_run)
    if not result.fits:
        return MemberPlacement(False, result.reason, None, (), result)
    patch: tuple[dict, ...] = ()
    if w.kind == "Pod" and w.obj is not None:
        patch = tuple(planner.patch(w.obj, key, result))
    reservation = None if w.dry_run else key
    return MemberPlacement(True, result.reason, result.to_placement(reservation), patch, result)
