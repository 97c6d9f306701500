"""The gang and topology placement evaluator: incremental per-domain aggregates, BestFit gang queries, reservations.

Pure (no I/O, no clock). Entry point: `PlacementIndex`; see docs/placement.md.
"""

from policy.placement.affinity import GangPlanner, affinity_patch, reservation_patch
from policy.placement.devices import Demand
from policy.placement.index import PlacementIndex
from policy.placement.member import MemberPlacement, gang_key, gang_request, place_member
from policy.placement.result import GangRequest, PlacementReason, PlacementResult

__all__ = [
    "Demand",
    "GangPlanner",
    "GangRequest",
    "MemberPlacement",
    "PlacementIndex",
    "PlacementReason",
    "PlacementResult",
    "affinity_patch",
    "gang_key",
    "gang_request",
    "place_member",
    "reservation_patch",
]
