"""The gang query and its answer: `GangRequest`, `PlacementResult`, `PlacementReason`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from lang.quantity import format_bytes_short, format_milli
from policy.decision import Placement
from policy.placement.devices import Demand
from policy.subject.model import PodSet


@dataclass(frozen=True, slots=True)
class GangRequest:
    """A gang: pod sets, the minimum members that must fit now, and the topology request (level names)."""

    pod_sets: tuple[PodSet, ...]
    min_count: int | None = None
    topology: str | None = None  # None: the first declared topology (or the flat cluster when none)
    required: str | None = None  # level name: one domain of this level must hold the gang
    preferred: str | None = None  # level name: try here first, then climb one level at a time
    per_gpu: int | None = None  # most pods sharing one physical GPU (a `fraction` block's per_gpu)
    tolerations: tuple[Mapping, ...] = ()  # the members' tolerations (Kubernetes shape): tainted nodes they may use
    models: tuple[str, ...] = ()  # model keys the gang may use (a gang block's `models`); () = any
    model_unknown: str | None = None  # why the members' model is not known yet: then not placeable where models differ


@dataclass(frozen=True, slots=True)
class PlacementReason:
    """One finding, with its numbers in `data`; results list the most useful first."""

    code: str  # Fits, NoDomainFits, InsufficientCapacity, UnknownTopology, UnknownLevel, NothingToPlace
    message: str
    data: Mapping[str, object] = field(default_factory=dict)

    def to_json(self) -> dict:
        """A JSON-ready dict."""
        return {"code": self.code, "message": self.message, "data": dict(self.data)}


@dataclass(frozen=True, slots=True)
class PlacementResult:
    """Where the gang goes (fits) or why it cannot (reasons), with pods per node."""

    fits: bool
    topology: str | None = None
    level: str | None = None  # level name of the chosen domain; None for the whole topology
    label: str | None = None  # node label key of that level
    domain: str | None = None  # label value
    nodes: Mapping[str, int] = field(default_factory=dict)  # node -> pods placed there
    reasons: tuple[PlacementReason, ...] = ()
    assignments: tuple[tuple[str, int, int], ...] = ()  # (node, demand index, pods)
    demands: tuple[Demand, ...] = ()
    per_gpu: int | None = None
    path: tuple[tuple[str, str], ...] = ()  # (label, value) of the chosen domain and its ancestors, widest first

    @property
    def reason(self) -> str:
        """The first (most useful) reason's message."""
        return self.reasons[0].message if self.reasons else ""

    def to_placement(self, reservation: str | None = None) -> Placement | None:
        """The `policy.decision.Placement` of a fitting result (None when it does not fit)."""
        if not self.fits:
            return None
        return Placement(
            topology=self.topology or "",
            level=self.level or "",
            label=self.label or "",
            value=self.domain or "",
            nodes=dict(self.nodes),
            reservation=reservation,
        )

    def to_json(self) -> dict:
        """A JSON-ready dict: fits, topology, level, label, domain, nodes, reason, reasons."""
        return {
            "fits": self.fits,
            "topology": self.topology,
            "level": self.level,
            "label": self.label,
            "domain": self.domain,
            "path": {label: value for label, value in self.path},
            "nodes": dict(sorted(self.nodes.items())),
            "reason": self.reason,
            "reasons": [r.to_json() for r in self.reasons],
        }


def format_cpu(milli: int) -> str:
    """Millicores for people: 96000 -> '96', 500 -> '500m'."""
    return str(milli // 1000) if milli % 1000 == 0 else f"{milli}m"


def describe_demand(demand: Demand) -> str:
    """`1 GPU`, `4 GPUs of h100`, `0.25 GPU with 10Gi of l4` for messages."""
    if demand.whole:
        text = f"{demand.whole} GPU" + ("s" if demand.whole > 1 else "")
    else:
        text = f"{format_milli(demand.milli)} GPU"
    if demand.memory:
        text += f" with {format_bytes_short(demand.memory)}"
    if demand.model:
        text += f" of {demand.model}"
    if demand.cpu or demand.ram:
        text += " and " + " and ".join(p for p in ((f"{format_cpu(demand.cpu)} cpu" if demand.cpu else ""),
                                                     (f"{format_bytes_short(demand.ram)} memory" if demand.ram else "")) if p)
    return text
