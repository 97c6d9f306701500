"""`quota` blocks: Kueue-style nominal / cohort / borrowingLimit / lendingLimit over GPU-equivalents.

Fit rule, all in exact milli-GPU integers (docs/semantics.md has the derivation):

    used + requested <= nominal + borrowable
    borrowable = 0 without a cohort, else min(borrow, pool) (borrow None = unlimited)
    pool = sum over the other cohort members m of min(max(0, nominal_m - used_m), lend_m)
           - sum over the other members of what they already borrow, max(0, used_m - nominal_m)

`used` is what live pods are charged (kept incrementally by `QuotaLedger`, which
subscribes to the cluster snapshot) plus the holds of admitted pods the snapshot has
not shown yet. The holds live in the snapshot's `ReservationLedger` (policy/cluster/ledger.py),
so they survive a policy reload; each engine's ledger mirrors them by quota id.
Per-model and `gpu_memory` limits are hard caps.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from lang import ir
from lang.quantity import format_bytes_short, format_milli
from policy.cluster.snapshot import is_live
from policy.context import Context, where
from policy.cluster.ledger import ReservationLedger
from policy.cluster.ledger import pod_key  # re-exported: the key holds and charges share
from policy.blocks.cohorts import CohortTree
from policy.blocks.holdbook import book_of
from policy.reclaim.contention import Contention
from policy.subject.workloads import HELD_KINDS, controlled_child, ends_hold, hold_key, object_uid, owner_hold_in
from policy.weaksub import subscribe_weakly

FINISHED = ("Succeeded", "Failed")
RESERVATION_TTL = 60.0  # seconds an admitted pod's charge is held until the snapshot shows the pod

Charge = tuple[int, int, int, str | None, int]  # (quota index, milli-GPU, bytes, model, model milli-GPU)


@dataclass(frozen=True, slots=True)
class QuotaSpec:
    """One compiled quota: its limits and the selector closure."""

    index: int
    id: str
    location: str
    name: str
    cohort: str | None
    nominal: int | None
    per_model: dict
    gpu_memory: int | None
    borrow: int | None
    lend: int | None
    mode: str
    selector: Callable | None
    namespace: str | None = None  # the only namespace the selector can match, when it names one
    weight: int | None = None  # milli fair-sharing weight (None: 1)


class QuotaLedger:
    """Per-quota usage kept incrementally from snapshot events, so a decision never scans pods."""

    def __init__(self, specs: list[QuotaSpec], to_workload: Callable[[dict], object], cohorts: tuple = ()):
        self.specs = specs
        self.tree = CohortTree(specs, cohorts)  # Kueue hierarchical cohorts (policy/blocks/cohorts.py)
        self.book = None  # policy.reclaim.book.VictimBook: running workloads by quota, when a plan may be needed
        self.preempting: frozenset[str] = frozenset()  # priority classes declared `preempts`
        self.to_workload = to_workload  # live pod -> enriched Workload (normalize_object + model resolution)
        self.used = [0] * len(specs)  # milli-GPU
        self.memory = [0] * len(specs)  # bytes
        self.models: list[dict[str, int]] = [{} for _ in specs]
        self.pods: dict[str, tuple[Charge, ...]] = {}
        self.index_of = {s.id: s.index for s in specs}
        self.holds = ReservationLedger()  # private until `attach` finds the snapshot's shared one
        self.shared = False
        self.holds.listen(self._mirror)
        self.last_owner: tuple = (None, None)  # (subject, its owner's hold key) as the quota check found it
        self.unkeyed = [s for s in specs if s.namespace is None]
        self.by_namespace: dict[str, list[QuotaSpec]] = {}
        for s in specs:
            if s.namespace is not None:
                self.by_namespace.setdefault(s.namespace, []).append(s)

    def attach(self, snapshot) -> None:
        """Charge every live pod of the snapshot once, then follow its events."""
        if snapshot is None:
            return
        for pod in snapshot.pods():
            self.on_event("ADDED", None, pod)
        subscribe_weakly(snapshot, self.on_event)
        shared = getattr(snapshot, "reservations", None)
        if isinstance(shared, ReservationLedger):
            for key in list(self.holds.holds):  # none in practice: attach runs before any decision
                self.holds.release(key)
            self.holds, self.shared = shared, True
            for _, holds in shared.holds.values():
                self._mirror(holds, +1)
            shared.listen(self._mirror)

    def charges_for(self, w) -> tuple[Charge, ...]:
        """What `w` is charged in each quota whose selector matches."""
        if w.total_gpus <= 0 and not w.gpu_memory:
            return ()
        memory = (w.gpu_memory or 0) * w.pods
        out = []
        keyed = self.by_namespace.get(w.namespace, ())
        for s in (self.unkeyed + keyed) if keyed else self.unkeyed:  # quotas of other namespaces cannot match
            if s.selector is None or s.selector(w):
                out.append((s.index, w.total_gpus, memory, w.gpu_model, w.total_gpus))
        return tuple(out)

    def on_event(self, event: str, old: dict | None, new: dict | None) -> None:
        """Snapshot callback: re-charge a pod when it appears, changes or goes away."""
        obj = new if new is not None else old
        if not isinstance(obj, dict):
            return
        kind = obj.get("kind", "Pod")
        if kind != "Pod":
            if kind in HELD_KINDS and self.holds.workloads:  # a held workload gone, done or scaled down: its pods will not come
                self._workload_event(event, obj, new, old)
            return
        key = pod_key(obj)
        previous = self.pods.pop(key, None)
        if previous:
            self._apply(previous, -1)
            if self.book is not None:
                self.book.remove(key)
        if event != "DELETED" and new is not None and is_live(new):
            w = self.to_workload(new)
            charges = self.charges_for(w)
            if charges:
                self.pods[key] = charges
                self._apply(charges, +1)
                if self.book is not None:  # running workloads by quota, for reclaim and preemption plans
                    self.book.add(key, new, w, charges)
            if not self.shared:  # a shared ledger is released by the snapshot itself
                self.holds.release(key)  # the pod itself now carries the charge
        elif new is not None and event != "DELETED" and key in self.holds.holds and (new.get("status") or {}).get("phase") in FINISHED:
            self.holds.release(key)  # first seen already finished: it never charges, so its hold must not wait for the expiry

    def _workload_event(self, event: str, obj: dict, new: dict | None, old: dict | None = None) -> None:
        meta = obj.get("metadata") or {}
        name = meta.get("name")
        if type(name) is not str:
            return
        key = hold_key(meta.get("namespace"), obj["kind"], name)
        if key not in self.holds.holds:
            return
        if event == "DELETED" or ends_hold(new):
            self.release_workload(key, object_uid(obj))
        elif new is not None and not same_generation(old, new):
            self._watched_resize(key, new, old)

    def _watched_resize(self, key: str, new: dict, old: dict | None) -> None:
        """A held workload's spec changed in the cluster: a scale down (or suspension) the webhook never saw releases what it drops, once.

        The webhook sees every admitted UPDATE unless it failed open or was down; the watch
        sees them all. Measured against the demand the hold was sized to (the book), so an
        UPDATE already released by `release_holds` releases nothing more here; capped by the hold.
        """
        w = self.to_workload(new)
        if w.suspended:
            self.release_workload(key, object_uid(new))
            return
        now = (w.total_gpus, (w.gpu_memory or 0) * w.pods)
        before = book_of(self.holds).demand.get(key)
        if before is None and old is not None:
            was = self.to_workload(old)
            before = (was.total_gpus, (was.gpu_memory or 0) * was.pods)
        if before is None or (now[0] >= before[0] and now[1] >= before[1]):
            return  # not smaller: a scale up the webhook missed holds nothing more (its pods are charged one by one)
        released = self.shrink_workload(key, w, before)
        hook = book_of(self.holds).on_watched_shrink
        if hook is not None and released:
            hook(key, object_uid(new), released, now)

    def _apply(self, charges: tuple[Charge, ...], sign: int) -> None:
        for qi, milli, memory, model, model_milli in charges:
            self.used[qi] += sign * milli
            self.memory[qi] += sign * memory
            if model is not None:
                per = self.models[qi]
                per[model] = per.get(model, 0) + sign * model_milli

    def _mirror(self, holds, sign: int) -> None:
        """Listener of the reservation ledger: add or drop holds in this engine's usage (unknown quota ids skip)."""
        index_of = self.index_of
        for qid, milli, memory, model, model_milli in holds:
            qi = index_of.get(qid)
            if qi is not None:
                self._apply(((qi, milli, memory, model, model_milli),), sign)

    def reserve(self, key: str, charges: tuple[Charge, ...], expires_at: float) -> tuple:
        """Hold `charges` for an admitted pod until the snapshot shows it or `expires_at` passes; the holds taken."""
        if not charges or key in self.pods:
            return ()
        specs = self.specs
        holds = tuple((specs[qi].id, *rest) for qi, *rest in charges)
        self.holds.reserve(key, holds, expires_at)
        return holds

    def hold_workload(self, key: str, charges: tuple[Charge, ...], expires_at: float, uid: str | None = None,
                      demand: tuple[int, int] | None = None) -> tuple:
        """Hold an admitted workload's `charges` until its pods take them (`take`) or `expires_at` passes; adds to an earlier hold of it; the holds added.

        `uid` is the object's, `demand` the (milli-GPU, bytes) its spec asks now: what a later
        scale down or deletion is measured against (policy/blocks/holdbook.py).
        """
        specs = self.specs
        holds = tuple((specs[qi].id, *rest) for qi, *rest in charges)
        self.holds.add(key, holds, expires_at)
        if demand is not None:
            book_of(self.holds).record(key, uid, demand, self.holds.holds)
        return holds

    def take(self, key: str, charges: tuple[Charge, ...]) -> tuple:
        """Move a workload pod's `charges` out of its workload's hold (the pod holds them itself now); what was taken."""
        specs = self.specs
        return self._take(key, tuple((specs[qi].id, *rest) for qi, *rest in charges))

    def _take(self, key: str, wanted: tuple) -> tuple:
        """Take `wanted` (by quota id) from the hold of `key`, across all its entries (a hold grows by one entry per scale up), capped by what it holds."""
        held = self.holds.holds.get(key)
        if held is None:
            return ()
        parts = []
        for qid, milli, memory, model, model_milli in wanted:
            for h in held[1]:  # split over the entries the ledger would otherwise take from only the first of
                if h[0] != qid or h[3] != model or not (milli > 0 or memory > 0):
                    continue
                part = (qid, min(milli, h[1]), min(memory, h[2]), model, min(model_milli, h[4]))
                if part[1] or part[2]:
                    parts.append(part)
                    milli, memory, model_milli = milli - part[1], memory - part[2], model_milli - part[4]
        return self.holds.take(key, tuple(parts)) if parts else ()

    def owner_hold(self, w) -> str | None:
        """The hold key of the admitted workload Pod `w` belongs to, when that workload still holds GPUs (a dict hit per candidate key)."""
        if not self.holds.workloads or w.kind != "Pod":
            return None
        last = self.last_owner
        if last[0] is w and (last[1] is None or last[1] in self.holds.holds):
            return last[1]
        return owner_hold_in(w, self.holds.holds)

    def release_workload(self, key: str, uid: str | None = None) -> bool:
        """Release the whole hold of workload `key` (deleted, finished, suspended) unless it was taken for another object of that name; once."""
        book = book_of(self.holds)
        if key not in self.holds.holds or not book.owns(key, uid):
            return False
        book.end(key, uid)  # remembered: a cluster ledger's copy of this hold is not counted again here
        return self.holds.release(key)

    def shrink_workload(self, key: str, w, old_demand: tuple[int, int]) -> tuple:
        """Release what a scale down of workload `w` no longer needs: the demand the hold was sized to minus `w`'s, capped by what it holds.

        Measured against the book's demand, not the request's oldObject, so a scale decided
        twice releases once; without a book entry, against `old_demand` (the old object's).
        """
        book = book_of(self.holds)
        held = self.holds.holds.get(key)
        if held is None or not book.owns(key, object_uid(w.obj)):
            return ()
        new = (w.total_gpus, (w.gpu_memory or 0) * w.pods)
        before = book.demand.get(key, old_demand)
        milli, memory = max(0, before[0] - new[0]), max(0, before[1] - new[1])
        book.demand[key] = new
        if not milli and not memory:
            return ()
        seen, wanted = set(), []
        for qid, _, _, model, _ in held[1]:
            if (qid, model) not in seen:
                seen.add((qid, model))
                wanted.append((qid, milli, memory, model, milli if model is not None else 0))
        return self._take(key, tuple(wanted))

    def expire(self, now: float) -> None:
        """Drop holds whose time has passed (cheap when none is due)."""
        self.holds.expire(now)

    def borrowable(self, qi: int) -> int:
        """Milli-GPU quota `qi` may take beyond its nominal right now (the cohort tree's `available`, policy/blocks/cohorts.py)."""
        return self.tree.borrowable(qi, self.used)


def _contention(ledger: QuotaLedger, spec: QuotaSpec, w, over: bool) -> str | None:
    """The plan an over-quota request may get: `preempt` for a `preempts` class, `fair-share` in a weighted cohort tree."""
    if w.priority_class is not None and w.priority_class in ledger.preempting:
        return "preempt"
    tree = ledger.tree
    if spec.cohort is not None and tree.root(spec.index) in tree.fair:
        return "fair-share"
    return None


def same_generation(old: dict | None, new: dict) -> bool:
    """Whether a watch event leaves the object's spec as it was (`metadata.generation` unchanged: a status update)."""
    if old is None:
        return False
    g_old, g_new = (old.get("metadata") or {}).get("generation"), (new.get("metadata") or {}).get("generation")
    return type(g_new) is int and g_old == g_new


def compile_quota(q: ir.Quota, index: int, selector, mode: str, namespace: str | None = None) -> QuotaSpec:
    """The compiled form of one `quota` block."""
    return QuotaSpec(
        index=index,
        id=q.id,
        location=where(q.span),
        name=q.name,
        cohort=q.cohort,
        nominal=q.gpus,
        per_model=dict(q.per_model),
        gpu_memory=q.gpu_memory,
        borrow=q.borrow,
        lend=q.lend,
        mode=mode,
        selector=selector,
        namespace=namespace,
        weight=q.weight,
    )


def demand_of(w) -> str:
    """` (JobSet x: 4 workers x 8 GPUs + ...)`: the arithmetic of a workload object's request, else ``."""
    if not w.template_paths:
        return ""
    parts = [f"{ps.count} {ps.name} pods x {format_milli(ps.gpus)} GPU" for ps in w.pod_sets if ps.gpus and ps.count]
    what = "added by this update of" if w.operation != "CREATE" else "for"
    return f" ({what} {w.kind} {w.name or ''}: {' + '.join(parts) or 'no GPU pods'})"


def make_check(spec: QuotaSpec, *, prefiltered: bool = False) -> Callable[[Context], None]:
    """The per-request check of one quota; `prefiltered` when the pipeline already tested the selector."""
    qi, block, location, mode, name = spec.index, spec.id, spec.location, spec.mode, spec.name
    sel = None if prefiltered else spec.selector
    per_model, memory_cap = spec.per_model, spec.gpu_memory

    def check(ctx: Context) -> None:
        w = ctx.w
        if w.operation != "CREATE" and not w.added_gpus or w.suspended or (w.total_gpus <= 0 and not w.gpu_memory):
            return  # a workload object's UPDATE is judged for the GPUs it adds (scale up, a bigger template, resume)
        if sel is not None and not sel(w):
            return
        ctx.blocks.append(block)
        ledger = ctx.state.quota
        holds = ledger.holds
        if ctx.now >= holds.next_expiry:  # inlined expire(): this runs on every GPU request
            holds.expire(ctx.now)
        if w.template_paths and controlled_child(w):
            ctx.note(block, location, f"{w.kind} {w.name or ''} is made by its owner's controller: its GPUs are its owner's, judged there")
            return
        resize = w.operation != "CREATE"
        requested = w.added_gpus if resize else w.total_gpus
        # Charge once: a pod of a workload still holding quota finds that hold by a dict hit per candidate key.
        owner = None
        if holds.workloads and w.kind == "Pod":
            owner = owner_hold_in(w, holds.holds)
            ledger.last_owner = (w, owner)  # the commit of this request's holds asks again
            if owner is not None and ctx.trace is None:  # a member pod: one entry of its hold covering all of it needs no arithmetic
                model, memory = w.gpu_model, (w.gpu_memory or 0) * w.pods
                for qid, h_milli, h_mem, h_mod, h_mod_milli in holds.holds[owner][1]:
                    if qid == block:
                        if (h_milli >= requested and (h_mem >= memory or memory_cap is None)
                                and (model not in per_model or (h_mod == model and h_mod_milli >= requested))):
                            ctx.reserve.append((ledger, (qi, requested, memory, model, requested)))
                            return
                        break  # split over entries (a scaled-up hold): summed below
        covered = covered_memory = covered_model = 0
        explaining = ctx.trace is not None
        model = w.gpu_model
        memory = (w.gpu_memory or 0) * w.pods
        if owner is not None:  # the share its workload's hold already counts is not counted again
            h_memory = h_model = 0
            for qid, h_milli_, h_mem_, h_mod, h_mod_milli in holds.holds[owner][1]:
                if qid == block:
                    covered += h_milli_
                    h_memory += h_mem_
                    if h_mod is not None and h_mod == model:
                        h_model += h_mod_milli
            if covered > requested:
                covered = requested
            covered_memory = memory if h_memory > memory else h_memory
            covered_model = (requested if h_model > requested else h_model) if model is not None else 0
            if (covered == requested and (covered_model == requested or model not in spec.per_model)
                    and (covered_memory == memory or spec.gpu_memory is None) and not explaining):
                # The hold counts all of it: nominal, model and memory caps add nothing, so no arithmetic.
                ctx.reserve.append((ledger, (qi, requested, memory, model, requested)))
                return
        if spec.nominal is not None and requested > 0:
            used = ledger.used[qi] - covered
            # Within nominal needs no cohort arithmetic; compute what is borrowable only beyond it.
            fits_nominal = used + requested <= spec.nominal
            borrowable = 0 if fits_nominal and not explaining else ledger.borrowable(qi)
            over = not fits_nominal and used + requested > spec.nominal + borrowable
            if over or explaining:  # messages are built only when someone reads them
                data = {"used": used, "requested": requested, "nominal": spec.nominal, "borrowable": borrowable}
                text = (
                    f"{name}: {format_milli(used)} in use + {format_milli(requested)} requested{demand_of(w)}"
                    f" {'>' if over else '<='} {format_milli(spec.nominal)} nominal + {format_milli(borrowable)} borrowable"
                )
                if covered:
                    text += f" ({format_milli(covered)} of it held for {owner[3:]}, not counted twice)"
                contention = _contention(ledger, spec, w, over) if over and ledger.book is not None and mode == "enforce" else None
                if contention is not None:  # a plan may make room: policy/reclaim/settle.py decides, or denies as here
                    if ctx.contention is None:
                        ctx.contention = []
                    ctx.contention.append(Contention(spec, contention, requested, ("QuotaExceeded", text, data)))
                    ctx.note(block, location, text + f": over, a {contention} plan is sought")
                elif over:
                    ctx.find("QuotaExceeded", block, location, text, mode, data)
                else:
                    ctx.note(block, location, text + ": fits")
            if (fits_nominal and not resize and ledger.book is not None and mode == "enforce" and spec.cohort is not None
                    and ledger.tree.others_borrow(qi, ledger.used)):
                if ctx.contention is None:  # within nominal while others borrow: a reclaim if it cannot land
                    ctx.contention = []
                ctx.contention.append(Contention(spec, "reclaim", requested))
        if model is not None and model in spec.per_model:
            limit, used = spec.per_model[model], ledger.models[qi].get(model, 0) - covered_model
            over = used + requested > limit
            if over or explaining:
                data = {"model": model, "used": used, "requested": requested, "nominal": limit, "borrowable": 0}
                text = f"{name}: {format_milli(used)} {model} in use + {format_milli(requested)} requested"
                if over:
                    ctx.find("QuotaModelExceeded", block, location, f"{text} > {format_milli(limit)} nominal {model}", mode, data)
                else:
                    ctx.note(block, location, f"{text} <= {format_milli(limit)} nominal {model}: fits")
        if spec.gpu_memory is not None and w.gpu_memory and not resize:  # memory of a resize: not judged (docs/workloads.md)
            charge, used = w.gpu_memory * w.pods, ledger.memory[qi] - covered_memory
            over = used + charge > spec.gpu_memory
            if over or explaining:
                data = {"used": used, "requested": charge, "nominal": spec.gpu_memory, "borrowable": 0}
                text = f"{name}: {format_bytes_short(used)} GPU memory in use + {format_bytes_short(charge)} requested"
                if over:
                    ctx.find("QuotaMemoryExceeded", block, location, f"{text} > {format_bytes_short(spec.gpu_memory)} nominal", mode, data)
                else:
                    ctx.note(block, location, f"{text} <= {format_bytes_short(spec.gpu_memory)} nominal: fits")
        if resize and memory and w.total_gpus:  # a resize holds the memory of the GPUs it adds, not of the whole workload again
            memory = memory * requested // w.total_gpus
        ctx.reserve.append((ledger, (qi, requested, memory, model, requested)))

    return check
