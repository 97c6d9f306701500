"""Carrying out one victim: suspend a suspendable workload, else evict its pods through the Eviction API; annotate; an Event.

Every action is idempotent, so a new leader may repeat a step its predecessor died in:
a pod already evicted answers 404 (or 409 on the uid precondition when a namesake replaced
it) and counts as gone; a workload already suspended is patched to the same values; the
Event has a fixed name (409 AlreadyExists is fine). An evicted victim is first asked with
`dryRun=All` for every pod, so a PodDisruptionBudget that forbids any of them makes the whole
workload unavailable before a single pod of it goes (a gang is never split by a PDB).
"""

from __future__ import annotations

import logging

from webhook.ledger.apiclient import ApiError
from webhook.reclaim.kube import RESOURCES, Kube, path
from webhook.reclaim.lease import micro_time

log = logging.getLogger("allot.reclaim")
BY = "allot.dev/reclaimed-by"
WHY = "allot.dev/reclaim-reason"
PLAN = "allot.dev/reclaim-plan"
RUN_POLICY = ("PyTorchJob", "MPIJob")  # Kubeflow's suspend is `spec.runPolicy.suspend`


class Retry(Exception):
    """The step could not finish now (an API error, a PDB that forbade a pod mid-way): the leader tries again."""


def annotations(record, victim: dict) -> dict:
    """What every victim carries: who reclaimed it (the requesting workload and its quota, the plan) and why."""
    plan = record.plan
    by = f"{plan.get('workload')} ({plan.get('quota')}, {plan.get('kind')})"  # (the quota as its id: `quota team-a`)
    return {BY: by, WHY: str(victim.get("reason") or ""), PLAN: record.name}


async def carry_out(kube: Kube, record, index: int, victim: dict, identity: str, now: float, evicted: list) -> tuple[str, str]:
    """(state, note) for the victim: done | gone | unavailable; raises Retry to be asked again. `evicted` gets each pod evicted."""
    marks = annotations(record, victim)
    if victim.get("action") == "suspend" and victim.get("kind") in RESOURCES:
        state, note = await _suspend(kube, victim, marks)
    else:
        state, note = await _evict(kube, victim, marks, evicted)
    if state == "done":
        await _event(kube, record, index, victim, identity, now)
    return state, note


async def _suspend(kube: Kube, victim: dict, marks: dict) -> tuple[str, str]:
    api_version, plural = RESOURCES[victim["kind"]]
    p = path(api_version, plural, victim["namespace"], victim["name"])
    obj = await kube.get(p)
    if obj is None:
        return "gone", f"{victim['kind']} {victim['namespace']}/{victim['name']} no longer exists"
    if victim.get("uid") and obj["metadata"].get("uid") != victim["uid"]:
        return "gone", f"{victim['kind']} {victim['namespace']}/{victim['name']} was replaced (uid {obj['metadata'].get('uid')})"
    spec = {"runPolicy": {"suspend": True}} if victim["kind"] in RUN_POLICY else {"suspend": True}
    try:
        patched = await kube.patch(p, {"metadata": {"annotations": marks}, "spec": spec})
    except ApiError as exc:
        raise Retry(f"suspend {victim['kind']} {victim['namespace']}/{victim['name']}: {exc.status} {exc.reason}") from None
    if patched is None:
        return "gone", f"{victim['kind']} {victim['namespace']}/{victim['name']} deleted meanwhile"
    log.info("reclaim: suspended %s %s/%s", victim["kind"], victim["namespace"], victim["name"])
    return "done", "suspended"


async def _evict(kube: Kube, victim: dict, marks: dict, evicted: list) -> tuple[str, str]:
    live = []
    for pod in victim.get("pods") or ():
        obj = await kube.get(path("v1", "pods", pod["namespace"], pod["name"]))
        if obj is None or (pod.get("uid") and obj["metadata"].get("uid") != pod["uid"]) or obj["metadata"].get("deletionTimestamp"):
            continue  # gone already (a predecessor's eviction, or its own end)
        live.append(pod)
    if not live:
        return "gone", "no pod of it is left"
    whole = len(live) == len(victim.get("pods") or ())
    for pod in live:  # the budget first, for every pod: a PDB never leaves a gang half evicted
        status = await kube.evict(pod["namespace"], pod["name"], pod.get("uid"), dry_run=True)
        if status == 429:
            if whole:
                return "unavailable", f"a PodDisruptionBudget forbids evicting pod {pod['namespace']}/{pod['name']}"
            raise Retry(f"a PodDisruptionBudget forbids pod {pod['namespace']}/{pod['name']} of a victim already partly evicted")
        if status not in (200, 201, 404, 409):
            raise Retry(f"eviction of {pod['namespace']}/{pod['name']} (dry run): HTTP {status}")
    for pod in live:
        await kube.patch(path("v1", "pods", pod["namespace"], pod["name"]), {"metadata": {"annotations": marks}})
    for pod in live:
        status = await kube.evict(pod["namespace"], pod["name"], pod.get("uid"))
        if status in (200, 201):
            evicted.append((pod["namespace"], pod["name"], pod.get("uid")))
            log.info("reclaim: evicted pod %s/%s uid=%s", pod["namespace"], pod["name"], pod.get("uid"))
        elif status == 429:
            raise Retry(f"a PodDisruptionBudget forbade pod {pod['namespace']}/{pod['name']} after the dry run allowed it")
        elif status not in (404, 409):
            raise Retry(f"eviction of {pod['namespace']}/{pod['name']}: HTTP {status}")
    return "done", f"evicted {len(live)} pod(s)"


async def _event(kube: Kube, record, index: int, victim: dict, identity: str, now: float) -> None:
    """A Warning Event on the victim (core/v1), under a name fixed by plan and step: a repeat is 409, ignored."""
    plan = record.plan
    verb = "Preempted" if plan.get("kind") == "preempt" else "Reclaimed"
    kind = victim.get("kind") or "Pod"
    api_version = RESOURCES.get(kind, ("v1",))[0] if kind != "PodGroup" else "scheduling.k8s.io/v1alpha2"
    stamp = micro_time(now)
    what = "suspended" if victim.get("action") == "suspend" else "evicted"
    message = (f"{what} by allot for {plan.get('workload')} ({plan.get('quota')}, {plan.get('kind')}): {victim.get('reason')}; "
               f"plan {record.name}")
    body = {
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"name": f"{victim['name'][:180]}.{record.name[-40:]}-{index}", "namespace": victim["namespace"]},
        "involvedObject": {"apiVersion": api_version, "kind": kind, "namespace": victim["namespace"], "name": victim["name"],
                           **({"uid": victim["uid"]} if victim.get("uid") else {})},
        "reason": verb, "message": message[:1000], "type": "Warning", "count": 1,
        "firstTimestamp": stamp[:19] + "Z", "lastTimestamp": stamp[:19] + "Z",
        "source": {"component": "allot-reclaim"}, "reportingComponent": "allot.dev/reclaim", "reportingInstance": identity[:128],
    }
    try:
        await kube.create(path("v1", "events", victim["namespace"]), body)
    except ApiError as exc:
        if exc.status != 409:
            log.warning("reclaim: event for %s %s/%s: %s %s", kind, victim["namespace"], victim["name"], exc.status, exc.reason)
