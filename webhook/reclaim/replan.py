"""A plan again, without the victims a PodDisruptionBudget forbade: the policy's own engine, offline, on a scratch copy of the cluster.

The requesting pod is already stored (and counted) by the time its plan runs, and the victims
already carried out are on their way out: the scratch snapshot holds the live one minus both,
so the engine decides the request as it did at admission, with the forbidden workloads in
`VictimBook.excluded` (policy/reclaim). Nothing is reserved or pledged (`reserve=False`). It
runs in a thread: building the scratch state reads every object (rare: only after a 429).
"""

from __future__ import annotations

import asyncio


def scratch_objects(snapshot, drop_pods: set[tuple[str, str]]) -> list[dict]:
    """The snapshot's objects without the pods in `drop_pods` ((namespace, name))."""
    out = []
    for obj in snapshot.all_objects():
        meta = obj.get("metadata") or {}
        if obj.get("kind") == "Pod" and (meta.get("namespace") or "default", meta.get("name")) in drop_pods:
            continue
        out.append(obj)
    return out


def decide_without(policy_set, snapshot, request: dict, excluded: set[tuple], gone: set[tuple[str, str]], now: float):
    """(plan JSON or None, why) for `request` with `excluded` workloads never chosen and pods `gone` off the cluster."""
    from policy.cluster.snapshot import ClusterSnapshot
    from policy.engine import Engine

    obj = request.get("object") or {}
    meta = obj.get("metadata") or {}
    mine = (request.get("namespace") or meta.get("namespace") or "default", request.get("name") or meta.get("name"))
    scratch = ClusterSnapshot.from_objects(scratch_objects(snapshot, gone | {mine}))
    engine = Engine(policy_set)
    state = engine.state_for(scratch)
    book = getattr(getattr(state, "quota", None), "book", None)
    if book is None:
        return None, "no quota tracks running workloads"
    book.excluded = set(excluded)
    request = {**request, "dryRun": False, "operation": "CREATE"}
    decision = engine.decide(request, scratch, now, reserve=False)
    if decision.plan is not None:
        return decision.plan.to_json(), ""
    if decision.allowed:
        return {"victims": [], "freed": 0}, "it fits without another victim"
    return None, "; ".join(r.message for r in decision.reasons)[:500] or "denied"


def replanner(state, wall):
    """The executor's `replan(record, excluded)` for a running server: its engine's policy and its live snapshot."""

    async def replan(record, excluded):
        policy_set = getattr(state.engine, "policy_set", None)
        if policy_set is None or state.snapshot is None:
            return None, "no policy loaded"
        gone = {(p["namespace"], p["name"]) for v, s in zip(record.plan.get("victims") or (), record.steps)
                if s.get("state") in ("done", "gone") for p in v.get("pods") or ()}
        return await asyncio.to_thread(decide_without, policy_set, state.snapshot, record.request, excluded, gone, wall())

    return replan
