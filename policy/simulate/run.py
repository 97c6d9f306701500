"""The simulation loop: trace events in time order through the Engine, then the scheduler model.

Each arrival is one pod CREATE: decided by the mutating side (its patch applied), then
by the validating side (which holds quota as the webhook does), then — if admitted —
bound by the scheduler model and added to the snapshot bound (the quota ledger and the
placement index follow its events), or never created when no node takes it (its quota
hold released). Denied and unplaceable pods are dropped, or resubmitted every
`retry` seconds until `deadline` seconds after they first arrived. A bound pod leaves
after its `duration` (its run keeps its length however long it waited) or at a trace
departure. An admitted reclaim or preemption plan is carried out before the bind, its victims
re-queued (policy/simulate/preempt.py). Time is the trace's; nothing reads a clock.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Callable, Sequence

from policy.cluster.snapshot import SnapshotError, is_live
from policy.cluster.shape import shape_problem
from policy.subject.demand import pod_demand
from policy.placement import PlacementIndex
from policy.placement.devices import FULL
from policy.placement.query import demand_of
from policy.simulate.preempt import Preemption
from policy.simulate.resources import NodeSelection, ResourceError, node_allocatable, pod_requests
from policy.placement.needs import preferred_terms
from policy.simulate.default import DefaultScheduler
from policy.simulate.scheduler import Scheduler, pod_request
from policy.simulate.scored import ScoredScheduler
from policy.simulate.scores import ARTIFACT
from policy.simulate.trace import Arrival, Departure, pod_key
from policy.testing.patch import PatchError, apply_patch

_DEPART, _ARRIVE = 0, 1  # at equal times departures go first: the capacity they free is there for arrivals


@dataclass(frozen=True)
class Options:
    """How to run: the scheduler model, resubmission, and how many timeline samples to keep."""

    scheduler: str = "spread"
    retry: float | None = None  # seconds between resubmissions of a denied or unplaceable pod; None drops them
    deadline: float = 3600.0  # seconds after its first arrival a resubmitted pod is given up
    samples: int = 120
    seed: int = 0  # the artifact's models: the seeded node order ties go by, and `random`'s draws
    preempt: bool = True  # carry out admitted reclaim/preemption plans (policy/simulate/preempt.py); False: evict nothing


@dataclass
class Outcome:
    """What became of one trace object: its first decision and its end."""

    key: str
    first_allowed: bool | None = None
    first_codes: tuple[str, ...] = ()
    final: str = "pending"  # bound | denied | unplaceable | conflict | withdrawn
    codes: tuple[str, ...] = ()  # the reason codes of the last denial, or the unplaceable reason
    blocks: tuple[str, ...] = ()  # the blocks whose enforce-mode findings denied it
    attempts: int = 0
    node: str | None = None
    waited: float | None = None  # seconds from first arrival to bind, when it was resubmitted
    message: str = ""


@dataclass
class Result:
    """Everything a report is made of."""

    outcomes: list[Outcome] = field(default_factory=list)
    samples: list[tuple] = field(default_factory=list)  # see SAMPLE_FIELDS
    steps: list[tuple[int, int]] = field(default_factory=list)  # (arrived, allocated) milli-GPU after each arrival attempt
    quota_ids: list[str] = field(default_factory=list)
    quota_samples: list[tuple[int, ...]] = field(default_factory=list)  # milli-GPU used per quota, per sample
    attempts: int = 0
    admitted_attempts: int = 0
    denied_attempts: dict[str, int] = field(default_factory=dict)  # code -> attempts denied
    denied_blocks: dict[str, int] = field(default_factory=dict)  # block -> attempts denied
    unplaceable_attempts: dict[str, int] = field(default_factory=dict)
    warned: dict[str, int] = field(default_factory=dict)  # warn-mode codes -> admitted attempts carrying them
    gpu_total: int = 0
    cpu_total: int = 0
    mem_total: int = 0
    nodes: int = 0
    gpu_nodes: int = 0
    arrived_gpu: int = 0
    alloc_area: float = 0.0  # ∫ allocated milli-GPU dt
    span: float = 0.0
    start: float = 0.0
    end: float = 0.0
    preemption: dict | None = None  # policy/simulate/preempt.py Preemption.report()


SAMPLE_FIELDS = ("t", "arrived_gpu", "demand_gpu", "allocated_gpu", "frag_device", "frag_node", "frag_starved",
                 "cpu_allocated", "memory_allocated", "running", "waiting")


class Simulation:
    """One policy set over one starting snapshot; `run(events)` replays a trace once."""

    def __init__(self, engine, snapshot, options: Options = Options(), workload=()):
        self.engine = engine
        self.snapshot = snapshot
        self.options = options
        models = {g.product: (g.name, g.memory) for g in engine.policy_set.gpus}
        self.index = PlacementIndex.from_snapshot(snapshot, (), models)
        snapshot.subscribe(self.index.on_event)
        self._models = models
        self._requests: dict[int, object] = {}  # object id -> PodRequest of the unpatched object
        nodes = list(snapshot.nodes())
        if options.scheduler in ARTIFACT:
            gpus = {name: (st.gpus if st.spec is not None and st.spec.eligible else 0) for name, st in self.index.nodes.items()}
            self.scheduler = ScoredScheduler(options.scheduler, nodes, node_allocatable, lambda n: gpus.get(n, 0), options.seed)
            if options.scheduler == "fgd":  # its typical mix: the trace's pods (the workload before any saturation)
                self.scheduler.set_workload(self._readable(a.obj for a in workload))
        else:
            kind = DefaultScheduler if options.scheduler == "default" else Scheduler
            self.scheduler = kind(options.scheduler, self.index, nodes, node_allocatable)
        self._running: dict[str, tuple] = {}  # pod key -> (node, PodRequest, bound pod, object id, gpu milli)
        for pod in list(snapshot.pods()):  # pods the cluster file already runs hold their resources
            node = (pod.get("spec") or {}).get("nodeName")
            if node and is_live(pod):
                req = self._request(pod)
                self.scheduler.bind(node, req, pod_key(pod))
                self._running[pod_key(pod)] = (node, req, pod, -1, req.gpu_milli)
        engine.warm(snapshot)
        self.quota = engine.state_for(snapshot).quota
        self.preempt = Preemption(self.quota.specs, snapshot.pods())

    def _request(self, pod):
        cpu, mem = pod_requests(pod)
        demand = demand_of(pod_demand(pod, self.snapshot), self._models)
        spec = pod.get("spec")
        return pod_request(cpu, mem, demand, NodeSelection(pod), preferred_terms(spec) if isinstance(spec, dict) else ())

    def _readable(self, objs):
        """The PodRequests of the objects the API server would accept (a malformed one is counted when it arrives)."""
        for obj in objs:
            try:
                yield self._request(obj)
            except (ResourceError, TypeError, AttributeError):
                continue

    def gpu_shape_of(self, pod) -> tuple[int, int]:
        """(milli per device, milli in all) one pod asks: (1000, k × 1000) for k whole GPUs, (m, m) for a share."""
        d = demand_of(pod_demand(pod, self.snapshot), self._models)
        if d is None:
            return 0, 0
        return (FULL, d.gpu_milli) if d.whole else (d.milli, d.milli)

    def gpu_of(self, pod) -> int:
        """Milli-GPU one pod asks (whole devices × 1000, or its share)."""
        d = demand_of(pod_demand(pod, self.snapshot), self._models)
        return d.gpu_milli if d is not None else 0

    def _gpu_demand(self, oid: int, obj) -> int:
        """Milli-GPU a trace object asks; 0 for an object the API server would refuse (counted when it is)."""
        try:
            return self._arrival_request(oid, obj).gpu_milli
        except (ResourceError, TypeError, AttributeError):
            return 0

    def _arrival_request(self, oid: int, obj):
        """The PodRequest of a trace object as written (read once: every attempt and the demand gauges share it)."""
        req = self._requests.get(oid)
        if req is None:
            req = self._requests[oid] = self._request(obj)
        return req

    def run(self, events: Sequence, *, sample_at: Callable | None = None, progress: Callable[[int, int], None] | None = None,
            saturate_target: int | None = None) -> Result:
        """Replay `events` (Arrival/Departure, any order; ties keep their order) and return the Result.

        `saturate_target` (milli-GPU of arrived demand) samples by demand instead of by time.
        """
        opts, sched = self.options, self.scheduler
        res = Result(gpu_total=sched.gpu_total, cpu_total=sched.cpu_total, mem_total=sched.mem_total,
                     nodes=len(sched.nodes), gpu_nodes=sum(1 for n in sched.nodes.values() if n.gpus))
        specs = self.quota.specs
        res.quota_ids = [s.id for s in specs]
        heap: list = []
        seq = 0
        objects: list[Arrival] = []
        for e in events:
            if isinstance(e, Arrival):
                heap.append((e.at, _ARRIVE, seq, len(objects), 0))
                objects.append(e)
                res.outcomes.append(Outcome(pod_key(e.obj)))
            elif isinstance(e, Departure):
                heap.append((e.at, _DEPART, seq, e.key, None))
            seq += 1
        heapq.heapify(heap)
        if not heap:
            return res
        start = heap[0][0] if heap else 0.0
        end = max(max((e.at + (e.duration or 0)) for e in objects) if objects else start,
                  max((e.at for e in events if isinstance(e, Departure)), default=start))
        res.start, res.end = start, end
        self.preempt.start = start
        n_samples = max(1, opts.samples)
        step_t = (end - start) / n_samples if end > start else 0.0
        step_d = saturate_target / n_samples if saturate_target else None
        next_sample, k = start, 0  # the k-th sample is at start + k * step_t (no drift from repeated additions)
        first_at: dict[int, float] = {}
        waiting: dict[int, int] = {}  # object id -> the attempt number scheduled
        # milli-GPU of pods running (those the cluster file runs too: they are allocated) or waiting to be resubmitted
        demand_live = sum(entry[4] for entry in self._running.values())
        last_t = start
        total = len(heap)
        done = 0
        report_every = max(1, total // 200)
        ledger_used = self.quota.used
        retry, deadline = opts.retry, opts.deadline

        def sample(t: float) -> None:
            res.samples.append((t - start, res.arrived_gpu, demand_live, sched.gpu_alloc, sched.frag_device, sched.frag_node,
                                sched.frag_starved, sched.cpu_alloc, sched.mem_alloc, len(self._running), len(waiting)))
            res.quota_samples.append(tuple(ledger_used))

        while heap:
            t, kind, _s, ref, attempt = heapq.heappop(heap)
            self.now = t  # the time snapshot subscribers read (policy/simulate/burn.py)
            if step_d is None:
                while next_sample < t:  # a sample at s shows the state after every event at or before s
                    sample(next_sample)
                    k += 1
                    next_sample = start + k * step_t if step_t and k <= n_samples else float("inf")
            res.alloc_area += sched.gpu_alloc * (t - last_t)
            last_t = t
            if kind == _DEPART:
                if isinstance(ref, str):  # a trace departure: the pod by name
                    entry = self._running.get(ref)
                    if entry is not None:
                        demand_live -= entry[4]
                    self._remove(ref)
                    for oid, att in list(waiting.items()):
                        if res.outcomes[oid].key == ref:
                            del waiting[oid]
                            demand_live -= self._gpu_demand(oid, objects[oid].obj)
                            res.outcomes[oid].final = "withdrawn"
                else:
                    key, token = ref
                    entry = self._running.get(key)
                    if entry is not None and entry[2]["metadata"]["uid"] == token:  # this run's end (a preempted run's end is not)
                        demand_live -= entry[4]
                        self._remove(key)
            else:
                oid = ref
                if attempt and waiting.get(oid) != attempt:
                    continue  # withdrawn while waiting
                waiting.pop(oid, None)
                arrival = objects[oid]
                out = res.outcomes[oid]
                if attempt == 0:
                    first_at[oid] = t
                    gpu = self._gpu_demand(oid, arrival.obj)
                    res.arrived_gpu += gpu
                    demand_live += gpu
                else:
                    gpu = None
                bound = self._attempt(arrival, oid, attempt, t, out, res)
                for victim, held in self.preempt.drain():  # a plan's victims, evicted: their objects arrive again now
                    demand_live -= held
                    if victim < 0:
                        continue  # the starting cluster's: no object to re-queue
                    demand_live += self._gpu_demand(victim, objects[victim].obj)
                    first_at[victim] = t  # re-queued: its deadline counts from now
                    waiting[victim] = res.outcomes[victim].attempts
                    res.outcomes[victim].final = "preempted"
                    heapq.heappush(heap, (t, _ARRIVE, seq, victim, waiting[victim]))
                    seq += 1
                if bound is not None:
                    node, req = bound
                    if attempt:
                        out.waited = t - first_at[oid]
                    if arrival.duration is not None:
                        heapq.heappush(heap, (t + arrival.duration, _DEPART, seq, (out.key, self._running[out.key][2]["metadata"]["uid"]), None))
                        seq += 1
                elif out.final in ("denied", "unplaceable"):
                    if retry is not None and t + retry <= first_at[oid] + deadline:
                        waiting[oid] = attempt + 1
                        heapq.heappush(heap, (t + retry, _ARRIVE, seq, oid, attempt + 1))
                        seq += 1
                    else:
                        demand_live -= self._gpu_demand(oid, arrival.obj)
                elif out.final == "conflict":
                    demand_live -= self._gpu_demand(oid, arrival.obj)
                if step_d is not None:
                    res.steps.append((res.arrived_gpu, sched.gpu_alloc))
                    while res.arrived_gpu >= next_sample and next_sample <= saturate_target:
                        sample(t)
                        next_sample += step_d
            if attempt == 0 or isinstance(ref, str):  # progress counts trace events, not departures and retries they cause
                done += 1
                if progress is not None and done % report_every == 0:
                    progress(done, total)
        if step_d is None:
            while next_sample <= end:
                sample(next_sample)
                k += 1
                next_sample = start + k * step_t if step_t and k <= n_samples else float("inf")
        elif not res.samples or res.samples[-1][1] != res.arrived_gpu:
            sample(last_t)
        res.span = last_t - start
        res.attempts = sum(o.attempts for o in res.outcomes)
        res.preemption = self.preempt.report()
        if progress is not None:
            progress(total, total)
        return res

    def _remove(self, key: str) -> None:
        entry = self._running.pop(key, None)
        if entry is None:
            return
        node, req, pod = entry[0], entry[1], entry[2]
        self.snapshot.apply("DELETED", pod)
        self.scheduler.unbind(node, req, key)

    def _attempt(self, arrival: Arrival, oid: int, attempt: int, now: float, out: Outcome, res: Result):
        """One CREATE of the object: decide (mutate, validate), then bind; returns (node, request) when bound."""
        out.attempts += 1
        key = out.key
        if key in self._running or self.snapshot.pod(*key.split("/", 1)) is not None:
            out.final, out.codes, out.message = "conflict", ("AlreadyExists",), f"pods {key!r} already exists"
            return None
        obj = arrival.obj
        meta = dict(obj.get("metadata") or {})
        meta["uid"] = f"sim-{oid}-{attempt}"
        meta.setdefault("namespace", key.split("/", 1)[0])
        pod = {**obj, "kind": "Pod", "apiVersion": obj.get("apiVersion") or "v1", "metadata": meta, "status": {"phase": "Pending"}}
        request = {
            "uid": meta["uid"],
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "requestKind": {"group": "", "version": "v1", "kind": "Pod"},
            "requestResource": {"group": "", "version": "v1", "resource": "pods"},
            "name": meta.get("name"),
            "namespace": meta["namespace"],
            "operation": "CREATE",
            "userInfo": {"username": arrival.user, "groups": list(arrival.groups)},
            "object": pod,
            "oldObject": None,
            "dryRun": False,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
        }
        engine, snap = self.engine, self.snapshot
        decision = engine.decide(request, snap, now, mutate=True, reserve=False)
        decision_patched = bool(decision.allowed and decision.patch)
        if decision_patched:
            try:
                pod = apply_patch(pod, decision.patch)
            except PatchError as exc:  # the API server would refuse the patched object
                out.final, out.codes, out.message = "denied", ("PatchFailed",), str(exc)
                res.denied_attempts["PatchFailed"] = res.denied_attempts.get("PatchFailed", 0) + 1
                return None
            request["object"] = pod
        if decision.allowed:
            decision = engine.decide(request, snap, now)
        if attempt == 0:
            out.first_allowed = decision.allowed
            out.first_codes = tuple(r.code for r in decision.reasons)
        if not decision.allowed:
            enforce = [r for r in decision.reasons if r.mode == "enforce"]
            out.final, out.codes = "denied", tuple(r.code for r in enforce)
            out.blocks = tuple(dict.fromkeys(r.block for r in enforce))
            out.message = enforce[0].message if enforce else ""
            for r in enforce:
                res.denied_attempts[r.code] = res.denied_attempts.get(r.code, 0) + 1
            for b in out.blocks:
                res.denied_blocks[b] = res.denied_blocks.get(b, 0) + 1
            return None
        res.admitted_attempts += 1
        for r in decision.reasons:
            if r.mode == "warn":
                res.warned[r.code] = res.warned.get(r.code, 0) + 1
        try:  # the API server validates the object after admission: a malformed one never exists
            req = self._arrival_request(oid, obj) if not decision_patched else self._request(pod)
            problem = shape_problem("Pod", pod)
            if problem is not None:
                raise SnapshotError(problem)
        except (ResourceError, SnapshotError, TypeError, AttributeError) as exc:
            out.final, out.codes, out.blocks, out.message = "denied", ("Invalid",), (), f"the API server refuses the object: {exc}"
            res.denied_attempts["Invalid"] = res.denied_attempts.get("Invalid", 0) + 1
            return None
        if decision.plan is not None and self.options.preempt:  # the victims go before it is bound
            self.preempt.carry_out(decision.plan, now, res.start, self._running, self._remove, self.quota.book)
        node, code, message = self.scheduler.place(req)
        if node is None:
            # Never created: drop the quota hold its admission took (the snapshot would have, on seeing the pod).
            snap.reservations.release(key)
            out.final, out.codes, out.blocks, out.message = "unplaceable", (code,), (), message
            res.unplaceable_attempts[code] = res.unplaceable_attempts.get(code, 0) + 1
            return None
        bound = {**pod, "metadata": {**pod["metadata"], "creationTimestamp": self.preempt.stamp(now)},
                 "spec": {**pod["spec"], "nodeName": node}, "status": {"phase": "Running"}}
        # The scheduler binds at once, so the pod appears bound: one snapshot event instead of Pending, then bound.
        snap.apply("ADDED", bound)
        self.scheduler.bind(node, req, key)
        self._running[key] = (node, req, bound, oid, req.gpu_milli)
        self.preempt.bound(key, oid, now)
        out.final, out.codes, out.blocks, out.node, out.message = "bound", (), (), node, ""
        return node, req
