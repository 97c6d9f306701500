"""Reclaim and preemption in a simulation: an admitted plan is carried out, its victims re-queued, the work they lose counted.

When the validating decision of an arrival carries a plan (`Decision.plan`, docs/reclaim.md),
every pod of every victim is taken off its node before the arrival is bound, as the controller
would do (suspend or evict: either way the pods go). Bound pods get the creationTimestamp the
API server would write (trace time after the starting cluster's newest pod), so "most recently
admitted" orders them as it would in the cluster. A victim's trace object arrives again at
once — a suspended Job is re-queued, an evicted pod's controller makes it anew — and is decided
and bound like any arrival (`--retry` applies when it does not land); its run starts over, so
the time it had run is lost: milli-GPU × seconds, per quota it was charged to. Pods the
starting cluster ran are evicted too but not re-queued (no trace object); their work is counted
from the start of the simulation. Pure: times are the trace's.
"""

from __future__ import annotations

from policy.budget.calendar import civil_from_days, days_from_civil, parse_time

ORIGIN = days_from_civil(2000, 1, 1) * 86400  # trace time 0 (UTC seconds) when the starting cluster's pods carry no creationTimestamp
GPU_HOUR = 1000 * 3600  # milli-GPU-seconds in one GPU-hour


class Preemption:
    """Carries out plans for a `Simulation` and keeps the tally the report shows."""

    def __init__(self, quota_specs=(), pods=()):
        self.names = {s.id: s.name for s in quota_specs}
        stamps = (parse_time((p.get("metadata") or {}).get("creationTimestamp")) for p in pods)
        self.origin = max((ms // 1000 for ms in stamps if ms is not None), default=ORIGIN)  # UTC seconds
        self.start = 0.0  # the trace time `origin` stands for (the run's first event)
        self.bound_at: dict[str, float] = {}  # pod key -> when its current run was bound
        self.plans: dict[str, int] = {}  # plan kind -> plans carried out
        self.by_quota: dict[str, list[int]] = {}  # quota id -> [workloads, pods, milli-GPU-seconds lost]
        self.requeued = self.rebound = self.not_requeued = 0
        self._waiting: set[int] = set()  # trace objects re-queued and not bound again yet
        self._drained: list[tuple[int, int]] = []  # (object id, milli-GPU its run held) evicted since the last drain

    def stamp(self, now: float) -> str:
        """The creationTimestamp the API server gives a pod bound at trace time `now`: what "most recently admitted" reads.

        After the starting cluster's newest pod, in whole seconds as Kubernetes writes it.
        """
        days, secs = divmod(self.origin + int(now - self.start), 86400)
        y, m, d = civil_from_days(days)
        return f"{y:04d}-{m:02d}-{d:02d}T{secs // 3600:02d}:{secs // 60 % 60:02d}:{secs % 60:02d}Z"

    def bound(self, key: str, oid: int, now: float) -> None:
        """A pod was bound at `now` (its run starts; a re-queued victim that lands again is counted)."""
        self.bound_at[key] = now
        if oid in self._waiting:
            self._waiting.discard(oid)
            self.rebound += 1

    def carry_out(self, plan, now: float, start: float, running: dict, remove, book=None) -> None:
        """Evict every pod of the plan's victims (`remove(key)`), count the work they lose, keep them for `drain`."""
        self.plans[plan.kind] = self.plans.get(plan.kind, 0) + 1
        for victim in plan.victims:
            if book is not None:  # gone now, so no longer pledged: its object re-queued under the same name is a workload anew
                book.pledged.pop((victim.namespace, victim.kind, victim.name), None)
            quotas = victim.quotas or ("(no quota)",)
            for q in quotas:
                self.by_quota.setdefault(q, [0, 0, 0])[0] += 1
            for vp in victim.pods:
                key = f"{vp.namespace}/{vp.name}"
                entry = running.get(key)
                if entry is None:
                    continue  # gone already (a trace departure at the same time)
                oid, milli = entry[3], entry[4]
                lost = round(milli * (now - self.bound_at.pop(key, start)))
                for q in quotas:
                    tally = self.by_quota[q]
                    tally[1] += 1
                    tally[2] += lost
                remove(key)
                self._drained.append((oid, milli))
                if oid >= 0:
                    self._waiting.add(oid)
                    self.requeued += 1
                else:
                    self.not_requeued += 1

    def drain(self) -> list[tuple[int, int]]:
        """(object id, milli-GPU its run held) of the pods evicted since the last call; id -1: the starting cluster's, not re-queued."""
        out, self._drained = self._drained, []
        return out

    def report(self) -> dict:
        """The report's `preemption` object: plans by kind, victims re-queued and bound again, work lost per quota."""
        quotas = [{"id": q, "name": self.names.get(q, q), "workloads": w, "pods": p, "lost_gpu_milli_s": lost,
                   "lost_gpu_hours": round(lost / GPU_HOUR, 4)}
                  for q, (w, p, lost) in sorted(self.by_quota.items(), key=lambda kv: (-kv[1][2], kv[0]))]
        lost = sum(q["lost_gpu_milli_s"] for q in quotas)
        return {"plans": dict(sorted(self.plans.items())), "requeued": self.requeued, "rebound": self.rebound,
                "not_requeued": self.not_requeued, "lost_gpu_milli_s": lost, "lost_gpu_hours": round(lost / GPU_HOUR, 4),
                "by_quota": quotas}


def render(rep: dict | None) -> list[str]:
    """The summary lines of a report's `preemption` object (none when no plan was carried out)."""
    if not rep or not rep["plans"]:
        return []
    plans = ", ".join(f"{k} {n}" for k, n in rep["plans"].items())
    lines = [f"preempted  plans carried out: {plans}; victim pods re-queued {rep['requeued']}, bound again {rep['rebound']}"
             + (f", not re-queued (the starting cluster's) {rep['not_requeued']}" if rep["not_requeued"] else "")
             + f"; work lost {_hours(rep['lost_gpu_milli_s'])} GPU-hours"]
    for q in rep["by_quota"]:
        lines.append(f"           {q['name']:<15} {_hours(q['lost_gpu_milli_s']):>8} GPU-hours lost, "
                     f"{q['workloads']} workload(s), {q['pods']} pod(s) evicted")
    return lines


def _hours(milli_s: int) -> str:
    whole, rest = divmod(milli_s, GPU_HOUR)
    return str(whole) if not rest else f"{milli_s / GPU_HOUR:.2f}"

