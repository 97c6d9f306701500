"""Workload holds in a ledger shard: a change (`WorkloadChange`) applied to a shard entry, at write time or replayed locally.

A workload hold (`wl:ns/Kind/name`) is shared: the replica that admitted the workload
writes it, and any replica answering one of its pods takes that pod's share from it.
So a change is a DELTA applied to the entry as the shard holds it when the write is
built, never an amount computed earlier (that would overwrite another replica's take).
A take the entry no longer covers fails the request's write (it is decided again).

Entry: `[expires_at, holds, replica, None, {"uid", "demand", "seq"}]`, `holds` as a pod
hold's; `seq` maps a replica to the last of its changes applied, so a replica adds to the
shard's entry exactly its own changes not yet written (`replay`).
"""

from __future__ import annotations

from typing import Any

FAIL = object()  # apply(): the entry does not cover a take


def meta_of(entry: list | None) -> dict:
    """The workload fields of an entry ({} for an entry written without them)."""
    return entry[4] if entry is not None and len(entry) > 4 else {}


def _amounts(holds: list, qid: str, model) -> tuple[int, int, int]:
    milli = memory = model_milli = 0
    for h in holds:
        if h[0] == qid and h[3] == model:
            milli, memory, model_milli = milli + h[1], memory + h[2], model_milli + h[4]
    return milli, memory, model_milli


def subtract(holds: list, parts, strict: bool) -> list | object:
    """`holds` less `parts` (across entries of one quota and model), capped at zero; FAIL if `strict` and not covered."""
    left = [list(h) for h in holds]
    for qid, milli, memory, model, model_milli in parts:
        if strict:
            have = _amounts(left, qid, model)
            if have[0] < milli or have[1] < memory or have[2] < model_milli:
                return FAIL
        for h in left:
            if h[0] != qid or h[3] != model:
                continue
            t = (min(milli, h[1]), min(memory, h[2]), min(model_milli, h[4]))
            h[1], h[2], h[4] = h[1] - t[0], h[2] - t[1], h[4] - t[2]
            milli, memory, model_milli = milli - t[0], memory - t[1], model_milli - t[2]
    return [h for h in left if h[1] > 0 or h[2] > 0]


def apply(entry: list | None, change: Any, replica: str, seq: int, strict: bool) -> list | None | object:
    """The entry after `change` (a WorkloadChange, holds split to this shard): a new list, None (no entry), or FAIL."""
    op = change.op
    meta = meta_of(entry)
    if op == "hold":
        uid = change.uid
        fresh = entry is None or (uid is not None and meta.get("uid") not in (None, uid))  # a new object of that name
        holds = [list(h) for h in change.holds] if fresh else [*entry[1], *(list(h) for h in change.holds)]
        expires_at = change.expires_at if fresh else max(entry[0], change.expires_at)
        meta = {"uid": uid if uid is not None or fresh else meta.get("uid"),
                "demand": list(change.demand) if change.demand is not None else meta.get("demand"),
                "seq": {} if fresh else dict(meta.get("seq") or {})}
        return _stamped([expires_at, holds, entry[2] if not fresh else replica, None, meta], replica, seq)
    if entry is None:
        return FAIL if strict and op == "take" else None
    if op == "take":
        holds = subtract(entry[1], change.holds, strict)
        if holds is FAIL:
            return FAIL
    elif op == "give":
        holds = [*entry[1], *(list(h) for h in change.holds)]
    elif op == "drop":
        if change.uid is not None and meta.get("uid") not in (None, change.uid):
            return entry  # the hold of a newer object of that name: not this deletion's
        return None
    elif op == "shrink":
        demand = meta.get("demand")
        if demand is not None and change.demand is not None:
            milli, memory = max(0, demand[0] - change.demand[0]), max(0, demand[1] - change.demand[1])
            seen, parts = set(), []
            for qid, _, _, model, _ in entry[1]:
                if (qid, model) not in seen:
                    seen.add((qid, model))
                    parts.append((qid, milli, memory, model, milli if model is not None else 0))
        else:  # written without a demand: what this replica released
            parts = change.holds
        holds = subtract(entry[1], parts, False)
        meta = {**meta, "demand": list(change.demand) if change.demand is not None else meta.get("demand")}
    else:
        return entry
    return _stamped([entry[0], holds, entry[2], None, {**meta, "seq": dict(meta.get("seq") or {})}], replica, seq)


def _stamped(entry: list, replica: str, seq: int) -> list:
    entry[4]["seq"][replica] = seq
    return entry


def replay(entry: list | None, pending: list, replica: str) -> list | None:
    """The entry as this replica must count it: the shard's plus its own changes (seq, change, ...) the shard does not show yet."""
    done = (meta_of(entry).get("seq") or {}).get(replica, 0)
    for seq, change, *_ in pending:
        if seq > done:
            out = apply(entry, change, replica, seq, False)
            entry = None if out is FAIL else out
    return entry


def well_formed_meta(meta: Any) -> bool:
    """The fifth field of a workload entry as `apply` writes it."""
    if not isinstance(meta, dict):
        return False
    uid, demand, seq = meta.get("uid"), meta.get("demand"), meta.get("seq", {})
    return ((uid is None or isinstance(uid, str))
            and (demand is None or (isinstance(demand, list) and len(demand) == 2 and all(type(x) is int for x in demand)))
            and isinstance(seq, dict) and all(isinstance(k, str) and type(v) is int for k, v in seq.items()))
