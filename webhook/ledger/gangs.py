"""Gang holds in the cluster ledger: a gang's chosen domain and held slots as one entry of the `allot-ledger-gangs` shard.

Entry `gang:<namespace>/<gang>`: `[expires_at, [], replica, None, {"gang": {...}}]` (no quota
holds: the gang's quota is held per pod, in the quota shards). `gang` carries the plan
(topology, level, label, domain, path, nodes, assignments, demands, per_gpu, reasons) and
the held slots `[[slot, node, whole, milli, memory, cpu, ram], ...]`, so another replica
holds the same slots on the same nodes and pins later members to the same domain.
"""

from __future__ import annotations

from typing import Any

from policy.placement.devices import Demand
from policy.placement.reservations import Reservation
from policy.placement.result import PlacementReason, PlacementResult

PREFIX = "gang:"
SHARD = "allot-ledger-gangs"


def entry_key(gang_key: str) -> str:
    """The shard key of gang `namespace/gang`."""
    return f"{PREFIX}{gang_key}"


def _demand(d: Demand) -> list:
    return [d.whole, d.milli, d.memory, d.model, d.cpu, d.ram]


def encode(change: Any, replica: str) -> list:
    """The shard entry of a `GangChange`."""
    r: PlacementResult = change.result
    plan = {"topology": r.topology, "level": r.level, "label": r.label, "domain": r.domain, "path": [list(p) for p in r.path],
            "nodes": dict(r.nodes), "assignments": [list(a) for a in r.assignments], "demands": [_demand(d) for d in r.demands],
            "per_gpu": r.per_gpu, "reasons": [[x.code, x.message] for x in r.reasons[:1]], "next": change.next_slot,
            "slots": [[key[2], node, d.whole, d.milli, d.memory, d.cpu, d.ram] for key, (node, d) in change.slots]}
    return [change.expires_at, [], replica, None, {"gang": plan}]


def same_domain(entry: list, change: Any) -> bool:
    """Whether a shard entry places its gang where `change` does."""
    plan = (entry[4] if len(entry) > 4 else {}).get("gang") or {}
    r = change.result
    return plan.get("domain") == r.domain and plan.get("label") == r.label and plan.get("topology") == r.topology


def decode(key: str, entry: list) -> tuple[Reservation, PlacementResult] | None:
    """The reservation and plan another replica wrote under `key` (`gang:ns/gang`); None if not as `encode` writes it."""
    try:
        plan = entry[4]["gang"]
        gang_key = key[len(PREFIX):]
        demands = tuple(Demand(int(w), int(m), int(mem), model, cpu=int(c), ram=int(ram))
                        for w, m, mem, model, c, ram in plan["demands"])
        result = PlacementResult(
            fits=True, topology=plan["topology"], level=plan["level"], label=plan["label"], domain=plan["domain"],
            nodes={str(n): int(c) for n, c in plan["nodes"].items()},
            reasons=tuple(PlacementReason(str(c), str(m)) for c, m in plan["reasons"]),
            assignments=tuple((str(n), int(i), int(c)) for n, i, c in plan["assignments"]), demands=demands,
            per_gpu=plan["per_gpu"] if plan["per_gpu"] is None else int(plan["per_gpu"]),
            path=tuple((str(a), str(b)) for a, b in plan["path"]))
        resv = Reservation(gang_key, float(entry[0]), next_slot=int(plan["next"]))
        for n, node, w, m, mem, c, ram in plan["slots"]:
            resv.slots[("resv", gang_key, int(n))] = (str(node), Demand(int(w), int(m), int(mem), cpu=int(c), ram=int(ram)))
        return resv, result
    except (KeyError, TypeError, ValueError, IndexError, AttributeError):
        return None
