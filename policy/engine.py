"""The decision engine: a policy set compiled once into closures, deciding admission requests.

Per request: normalize the object into a `Workload`, fill the engine-owned fields
(GPU model, implied GPU memory, agent), run every compiled check, and combine the
findings into a `Decision` (docs/semantics.md): denied iff some enforce-mode finding;
warn-mode findings become admission warnings; audit-mode ones audit annotations.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Callable

from lang import ir
from lang.reads import reads_field
from policy.admission import headline
from policy.blocks.agents import is_marked_agent
from policy.compiler.passes import Compiled, audit_key, compile_policy_set
from policy.context import Context
from policy.decision import Decision, Reason
from policy.manifests.cel import mentions
from policy.blocks.gang import join_owner, settle
from policy.blocks.gang_holds import DomainWatch, domain_key, may_hold, release_domain
from policy.subject.expression import express, reads_expression
from policy.subject.normalize import normalize, normalize_object
from policy.subject.workloads import HELD_KINDS, WORKLOAD_TTL, controlled_child, hold_key, object_uid, workload_memory
from policy.blocks.quota import RESERVATION_TTL, QuotaLedger
from policy.cluster.ledger import WorkloadChange
from policy.reclaim.book import VictimBook, needs_book
from policy.reclaim.settle import settle as settle_contention
from policy.weaksub import subscribe_weakly

WARNING_LIMIT = 120  # characters per admission warning (API server guidance)
# Normalization problems that only warn: a pod created a moment before its group object is normal.
# HAMi clamps gpucores above 100 to 100 and places the pod: Allot counts it so and only warns. A scale of a
# workload the cluster state does not hold cannot be judged: said as a warning, not denied.
# Nor a KAITO Workspace whose instance type no node reports yet (KAITO provisions it; its pods are judged).
# An object of a kind Allot does not read, an accelerator no dialect counts, a CronJob whose runs may overlap: said,
# not denied (a policy denies unread objects with a rule on `unread`: docs/kinds.md).
WARN_PROBLEMS = frozenset({"MissingGroup", "ClampedGpuCores", "WorkloadNotInClusterState", "UnknownInstanceType",
                           "GpuShareLowerBound",
                           "UnreadWorkload", "UncountedAccelerator", "OverlappingRuns"})
_SETATTR = object.__setattr__


class SnapshotState:
    """Incremental indexes over one cluster snapshot: quota usage, and placement (built on first need)."""

    def __init__(self, compiled: Compiled, snapshot, to_workload: Callable[[dict], object]):
        self.snapshot = snapshot
        self.compiled = compiled
        self._planner = None
        self._meter = None
        self._steering = None
        # One normalization per pod event for the quota ledger and the budget meter (the meter clears it after each event).
        self.live = LastWorkload(to_workload) if compiled.budget_specs else to_workload
        self.quota = QuotaLedger(compiled.quota_specs, self.live, compiled.policy.cohorts)
        self.quota.preempting = frozenset(p.name for p in compiled.policy.priorities if p.preempts)
        if needs_book(compiled.policy):  # running workloads by quota: what a plan chooses victims from
            self.quota.book = VictimBook()
        if compiled.quota_specs:
            self.quota.attach(snapshot)

    @property
    def meter(self):
        """The budget meter over this snapshot once attached (policy/budget/meter.py), else None."""
        return self._meter

    def meter_at(self, t_ms: int, clock=None):
        """The budget meter, attached at `t_ms` on first use; None without budgets (webhook/meter/ binds it to the API server's clock)."""
        if self._meter is None and self.compiled.budget_specs:
            from policy.budget.meter import BudgetMeter

            meter = BudgetMeter(self.compiled.budget_specs, self.live)
            meter.clock = clock
            meter.attach(self.snapshot, t_ms)
            self._meter = meter
        return self._meter

    def planner(self):
        """The gang planner over this snapshot's placement index (loaded when a gang first needs it)."""
        if self._planner is None and self.snapshot is not None:
            from policy.placement import GangPlanner, PlacementIndex

            policy = self.compiled.policy
            topologies = [(t.name, [(lv.name, lv.label) for lv in t.levels]) for t in policy.topologies]
            models = {g.product: (g.name, g.memory) for g in policy.gpus}
            index = PlacementIndex.from_snapshot(self.snapshot, topologies, models)
            subscribe_weakly(self.snapshot, index.on_event)  # not index.attach: a reloaded engine must not leak
            self._planner = GangPlanner(index)
            # A held workload deleted, finished, suspended or scaled to zero in the cluster releases its domain.
            self._planner.watch = DomainWatch(self._planner, self.quota.to_workload)
            subscribe_weakly(self.snapshot, self._planner.watch.on_event)
        return self._planner


    def steering(self):
        """Fragmentation steering over the planner's placement index, its live mix cached here (policy/placement/steer.py)."""
        if self._steering is None:
            planner = self.planner()
            if planner is None:
                return None
            from policy.placement.steer import Steering

            self._steering = Steering(planner.index)
        return self._steering


class LastWorkload:
    """`to_workload` remembering the last pod it read, so the quota ledger and the budget meter normalize each event once."""

    __slots__ = ("to_workload", "obj", "w")

    def __init__(self, to_workload: Callable[[dict], object]):
        self.to_workload, self.obj, self.w = to_workload, None, None

    def __call__(self, obj: dict):
        if obj is not self.obj:
            self.obj, self.w = obj, self.to_workload(obj)
        return self.w

    def clear(self) -> None:
        """Forget the last pod (after each event: a dict changed in place must be read again)."""
        self.obj = self.w = None


class Engine:
    """A compiled policy set; `decide` answers one AdmissionReview request."""

    def __init__(self, policy_set: ir.PolicySet, *, mode_override: str | None = None):
        self.policy_set = policy_set
        self.compiled = compile_policy_set(policy_set, mode_override)
        self.mode_override = mode_override
        self._by_namespace = self.compiled.by_namespace
        self._unkeyed = self.compiled.unkeyed
        self._identity = self.compiled.identities[0] if self.compiled.identities else None
        # Blocks whose findings stand on a workload DELETE: agents, and rules that read `operation` (they ask for it).
        self._judges_delete = frozenset({a.id for a in policy_set.agents} | {
            r.id for r in policy_set.rules if any(e is not None and mentions(e, "operation") for e in (r.selector, r.when))})
        self._state: SnapshotState | None = None
        self._express = reads_expression(policy_set)
        # `quota.covered`: the quota selectors, tested on each subject only when some block reads the field
        self._covers = tuple(self.compiled.selectors[q.id] for q in policy_set.quotas) if reads_field(policy_set, "quota.covered") else None
        # This engine's shared allowed Decisions: its block ids are its own string objects, so a key of another
        # engine's (a reload, two engines side by side) would be compared character by character on every hit.
        self._plain_allows: dict[tuple[str, ...], Decision] = {}

    @property
    def block_ids(self) -> list[str]:
        """Ids of every governing block, in source order per kind."""
        return list(self.compiled.block_ids)

    def state_for(self, snapshot) -> SnapshotState:
        """The incremental indexes of `snapshot` (built on first use, then kept current by events)."""
        state = self._state
        if state is None or state.snapshot is not snapshot:
            state = self._state = SnapshotState(self.compiled, snapshot, lambda obj: self._live_workload(obj, snapshot))
        return state

    def warm(self, snapshot) -> None:
        """Build every index the policy needs for `snapshot` now (call after load or reload), not on a request."""
        state = self.state_for(snapshot)
        policy = self.policy_set
        if any(g.topology for g in policy.gangs) or any(f.per_gpu is not None for f in policy.fractions) or needs_book(policy) or policy.steers:
            state.planner()

    def adopt(self, previous: "Engine | None", snapshot, now: float) -> list[str]:
        """Take over `previous`'s placed gangs over `snapshot` (a policy reload): their domains and held slots.

        Quota holds already outlive an engine (they live on the snapshot); without this a
        reload would forget where half-admitted gangs went, and their later members could
        land elsewhere. Returns the gang keys taken over.
        """
        old = previous._state if previous is not None else None
        if old is None or old.snapshot is not snapshot or old._planner is None:
            return []
        planner = self.state_for(snapshot).planner()
        return planner.adopt(old._planner, now) if planner is not None else []

    def _live_workload(self, obj: dict, snapshot):
        return self.enrich(normalize_object(obj, snapshot))

    def enrich(self, w):
        """Fill the engine-owned subject fields: `gpu_model`, implied `gpu_memory`, `agent`, `quota.covered`.

        The Workload was just built for this request and nobody else holds it, so the
        fields are set in place instead of copying a 40-field dataclass per request.
        """
        c = self.compiled
        if self._express:  # only sets that read what a workload states pay for reading it
            express(w)
        if w.gpu_model is None and w.gpu_product is not None:
            by_product = c.model_by_product
            if w.gpu_product in by_product:  # `in` + subscript, not .get: this runs on every request
                _SETATTR(w, "gpu_model", by_product[w.gpu_product])
        if w.template_paths and w.gpu_memory is None and w.gpus > 0:  # a workload object: summed over its sets
            memory = workload_memory(w, c.model_by_product, c.model_memory)
            if memory is not None:
                _SETATTR(w, "gpu_memory", memory)
        elif w.gpu_memory is None and w.gpu_model is not None and w.gpus > 0 and w.gpu_model in c.model_memory:
            memory = c.model_memory[w.gpu_model]
            if memory is not None:  # a share of the device, or N whole devices
                share = w.fraction if w.fraction is not None else w.gpus
                _SETATTR(w, "gpu_memory", memory * share // 1000)
        if not w.agent:
            identity = self._identity
            if (identity is not None and identity(w)) or (w.labels and is_marked_agent(w.labels)):
                _SETATTR(w, "agent", True)
        if self._covers is not None:  # last: a quota's `for` may read any field filled above
            _SETATTR(w, "quota_covered", any(sel is None or sel(w) for sel in self._covers))
        return w

    def decide(self, request: dict, snapshot, now: float, *, mutate: bool = False, reserve: bool = True,
               problems: tuple = (), taken: list | None = None) -> Decision:
        """Decide one AdmissionReview v1 `request` against `snapshot` at time `now`.

        On the validating side (`mutate=False`) an admitted, non-dryRun pod CREATE
        reserves its quota charge until the snapshot shows the pod; `reserve=False`
        (offline evaluation, tests) never reserves. `problems` are what the caller saw
        in the raw bytes (duplicate keys): denied like normalization's own. `taken`, if given,
        receives `(key, holds, expires_at)` for every pod hold taken, so a caller can commit them elsewhere.
        """
        w = self.enrich(normalize(request, snapshot))
        if not w.user and self._identity is not None and not w.agent:  # inlined _subject: the hot path
            _SETATTR(w, "agent", True)
        if problems:
            _SETATTR(w, "problems", (*w.problems, *problems))
        state = self._state
        if state is None or state.snapshot is not snapshot:  # inlined state_for: the hot path
            state = self.state_for(snapshot)
        ctx = Context(w, snapshot, now, mutate, state=state)
        ctx.may_reserve = reserve
        return self._run(ctx, reserve=reserve, taken=taken)

    def _subject(self, request: dict, snapshot):
        """The enriched subject of a request; a requester without a username is judged by the agents blocks.

        The API server always names the user (`system:anonymous` at least), so a missing
        username is an identity that cannot be established: where agents blocks judge by
        identity, such a request must not pass as an ordinary user (policy/blocks/agents.py denies it).
        """
        w = self.enrich(normalize(request, snapshot))
        if not w.user and not w.agent and self._identity is not None:
            _SETATTR(w, "agent", True)
        return w

    def explain(self, request: dict, snapshot, now: float, *, mutate: bool = False):
        """(Decision, trace, workload): the trace lists (block, location, text) of every step."""
        w = self._subject(request, snapshot)
        ctx = Context(w, snapshot, now, mutate, explain=True, state=self.state_for(snapshot))
        ctx.may_reserve = False
        return self._run(ctx, reserve=False), ctx.trace, w

    def evaluate(self, w, snapshot, now: float, *, mutate: bool = False, reserve: bool = True) -> Decision:
        """Decide an already normalized and enriched Workload."""
        ctx = Context(w, snapshot, now, mutate, state=self.state_for(snapshot))
        ctx.may_reserve = reserve
        return self._run(ctx, reserve=reserve)

    def _run(self, ctx: Context, *, reserve: bool, taken: list | None = None) -> Decision:
        w = ctx.w
        if w.problems and w.operation in ("CREATE", "UPDATE"):
            self._problems(ctx)
        self._by_namespace.get(w.namespace, self._unkeyed)(ctx)
        if ctx.contention:  # a quota left room to make: a reclaim or preemption plan, or the denial it deferred
            settle_contention(ctx)
        planner = ctx.state._planner
        if ctx.gang is None and planner is not None and planner.workloads and w.kind == "Pod":
            join_owner(ctx)  # a pod of a workload holding its domain goes there, selected by a gang block or not
        if ctx.gang is not None:  # a gang domain is held (and the member pinned) only once admitted
            allowed = not any(r.mode == "enforce" for r in ctx.reasons)
            # A workload object's domain is held on the validating side, as its quota (docs/workloads.md).
            settle(ctx, allowed, hold=reserve and not w.dry_run and may_hold(ctx), taken=taken)
        if w.operation == "DELETE" and w.template_paths and ctx.reasons:
            # Workload DELETEs reach Allot to release holds; only blocks that judge deletions may refuse one.
            ctx.reasons = [r for r in ctx.reasons if r.block in self._judges_delete]
        decision = combine(ctx, self._plain_allows)
        if reserve and decision.allowed and not ctx.mutate and not w.dry_run:
            if ctx.reserve:
                commit_reservations(ctx, taken)
            if w.template_paths and w.operation != "CREATE" and ctx.state.quota.holds.workloads:
                release_holds(ctx, taken)
            if w.template_paths and w.operation != "CREATE" and planner is not None and planner.workloads:
                key = domain_key(w)
                if release_domain(ctx) and taken is not None and not any(
                        type(t) is WorkloadChange and t.key == key for t in taken):
                    # deleted, suspended or scaled to zero: its gang domain too (a cluster ledger drops its entry)
                    taken.append(WorkloadChange("drop", key, (), 0.0, object_uid(w.obj)))
        return decision

    def _problems(self, ctx: Context) -> None:
        for p in ctx.w.problems:
            mode = self.compiled.mode("warn" if p.code in WARN_PROBLEMS else "enforce")
            ctx.find(p.code, "subject", "request", p.message, mode, {})


def commit_reservations(ctx: Context, taken: list | None = None) -> None:
    """Hold the admitted pod's quota charges until the snapshot shows it (appended to `taken`); an admitted workload's until its pods take them.

    Workload holds and a pod's take from one go to `taken` as `WorkloadChange`s, so a
    cluster ledger writes them with the pod holds (webhook/ledger/cluster.py).
    """
    w = ctx.w
    workload = w.template_paths and w.kind in HELD_KINDS and w.name and not controlled_child(w)
    if not workload and (w.operation != "CREATE" or w.kind != "Pod"):
        return  # group objects are checked whole; their pods are charged one by one
    by_ledger: dict[int, tuple] = {}
    for ledger, charge in ctx.reserve:
        entry = by_ledger.setdefault(id(ledger), (ledger, []))
        entry[1].append(charge)
    if workload:  # charge once: its pods take their share from this hold (docs/workloads.md)
        key = hold_key(w.namespace, w.kind, w.name)
        demand = (w.total_gpus, (w.gpu_memory or 0) * w.pods)  # what a later scale down is measured against
        expires_at = ctx.now + WORKLOAD_TTL
        uid = object_uid(w.obj)
        for ledger, charges in by_ledger.values():
            holds = ledger.hold_workload(key, tuple(charges), expires_at, uid, demand)
            if taken is not None and holds:
                taken.append(WorkloadChange("hold", key, holds, expires_at, uid, demand))
        return
    key = f"{w.namespace or 'default'}/{w.name}" if w.name else f"uid:{w.uid}"
    expires_at = ctx.now + RESERVATION_TTL
    for ledger, charges in by_ledger.values():
        reservations = ledger.holds
        if reservations.took and key in reservations.took:  # decided again: what it took before goes back first
            back = reservations.untake(key)
            if taken is not None and back is not None:
                taken.append(WorkloadChange("give", back[0], back[1], pod=key))
        owner = ledger.owner_hold(w) if reservations.workloads else None
        parts = ledger.take(owner, tuple(charges)) if owner is not None else ()
        holds = ledger.reserve(key, tuple(charges), expires_at)
        if parts:
            reservations.note_take(key, owner, parts)
            if taken is not None:
                taken.append(WorkloadChange("take", owner, parts, pod=key))
        if taken is not None and holds:
            taken.append((key, holds, expires_at))


def release_holds(ctx: Context, taken: list | None = None) -> None:
    """An admitted UPDATE or DELETE of a held workload: release what it no longer needs, at once (docs/workloads.md).

    DELETE releases the whole hold; an UPDATE that suspends it (Kueue preempting) too; a
    scale down (UPDATE, or the `scale` sub-resource judged on the live object) releases the
    demand it drops, never more than the hold still holds. Each release goes to `taken`
    as a `WorkloadChange` too (a cluster ledger writes it after the answer).
    """
    w = ctx.w
    if w.kind not in HELD_KINDS or not w.name or controlled_child(w):
        return
    ledger = ctx.state.quota
    key = hold_key(w.namespace, w.kind, w.name)
    if key not in ledger.holds.holds:
        return
    uid = object_uid(w.obj)
    if w.operation == "DELETE" or w.suspended:
        if ledger.release_workload(key, uid) and taken is not None:
            taken.append(WorkloadChange("drop", key, (), 0.0, uid))
    elif w.operation == "UPDATE" and not w.added_gpus:
        old = ctx.w.old_obj
        before = None
        if type(old) is dict:
            was = ledger.to_workload(old)
            before = (was.total_gpus, (was.gpu_memory or 0) * was.pods)
        demand = (w.total_gpus, (w.gpu_memory or 0) * w.pods)
        released = ledger.shrink_workload(key, w, before or demand)
        if taken is not None and released:
            taken.append(WorkloadChange("shrink", key, released, 0.0, uid, demand))


def warning_text(r: Reason) -> str:
    """An admission warning line: `block: message`, cut to 120 characters."""
    text = headline(r.block, r.message)
    return text if len(text) <= WARNING_LIMIT else text[: WARNING_LIMIT - 3] + "..."


_PLAIN_ALLOWS: dict[tuple[str, ...], Decision] = {}  # blocks -> the allowed, finding-free Decision (immutable, shared)


def combine(ctx: Context, plain: dict | None = None) -> Decision:
    """Findings -> Decision: deny overrides; warn -> warnings; audit -> audit annotations; `plain` caches the allowed ones (an engine's own)."""
    if not ctx.reasons and ctx.placement is None and (ctx._patch is None or not ctx.mutate):
        # The common answer: building a frozen dataclass costs microseconds, so share one per block list.
        if plain is None:
            plain = _PLAIN_ALLOWS
        seen = tuple(ctx.blocks)  # keyed as seen (a block may repeat); the Decision carries them de-duplicated
        if seen in plain:
            return plain[seen]
        if len(plain) > 4096:
            plain.clear()
        decision = plain[seen] = Decision(allowed=True, blocks=tuple(dict.fromkeys(seen)), audit=MappingProxyType({}))
        return decision
    reasons = tuple(ctx.reasons)
    allowed = True
    warnings: list[str] = []
    audit: dict[str, str] = {}
    for r in reasons:
        if r.mode == "enforce":
            allowed = False
        elif r.mode == "warn":
            warnings.append(warning_text(r))
        else:
            key = audit_key(r.block)
            audit[key] = f"{audit[key]}; {r.message}" if key in audit else r.message
    return Decision(
        allowed=allowed,
        reasons=reasons,
        warnings=tuple(warnings),
        audit=audit,
        patch=ctx.patch_ops() if ctx.mutate else (),
        blocks=tuple(dict.fromkeys(ctx.blocks)),
        placement=ctx.placement,
        plan=ctx.plan,
    )
