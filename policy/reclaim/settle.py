"""The engine's reclaim step: after every block, turn the quota checks' contention into a plan, or into the denial it was.

Three kinds (docs/reclaim.md):

- `reclaim`: a request within its quota's nominal that the cluster cannot place while other
  quotas' borrowed workloads hold the GPUs: those borrowers give way (any priority).
- `fair-share`: a borrowing request over its limit, in a cohort tree with weights: borrowers whose
  weighted share is above the requester's share with the request give way, furthest above first.
- `preempt`: a request of a `preempts` class over its quota: lower-priority workloads give way,
  other quotas' borrowers (under the fair-share rule) before the quota's own.

A plan found admits the request with a warning (`ReclaimPlanned`, `PreemptionPlanned`) and
`Decision.plan`; a contended request with no plan keeps its denial, saying why.
"""

from __future__ import annotations

from dataclasses import replace

from lang.quantity import format_milli
from policy.blocks.gang import gang_request_of
from policy.placement.index import FLAT
from policy.reclaim.contention import Contention  # noqa: F401 - re-exported for the quota check's callers
from policy.reclaim.plan import Plan, Victim, VictimPod
from policy.reclaim.ordered import Givers, choose_ordered
from policy.reclaim.search import Candidate, choose

_NONE_MAY = "no workload may give way (no other quota borrows"
PLAN_TTL = 120.0  # seconds the victims of an admitted plan count as going (not chosen again, their GPUs counted free)


def settle(ctx) -> None:
    """Compute the plan for `ctx.contention` (once per request) and record it, or put back the deferred denials."""
    entries = ctx.contention
    ledger = ctx.state.quota
    book = ledger.book
    kind = "preempt" if any(e.kind == "preempt" for e in entries) else "fair-share" if any(e.kind == "fair-share" for e in entries) else "reclaim"
    first = next(e for e in entries if e.kind == kind)
    planner = ctx.state.planner() if ctx.snapshot is not None else None
    index = planner.index if planner is not None else None
    request, unplaced_at = _request(ctx, planner)
    if kind == "reclaim" and (index is None or request is None or (unplaced_at is None and index.query(request).fits)):
        return  # it lands now (or cannot be asked): nothing to reclaim
    plan, why = (None, "no running workloads are known") if book is None else _plan(ctx, kind, entries, index, request)
    spec = first.spec
    if plan is None:
        for e in entries:
            if e.finding is not None:
                code, text, data = e.finding
                ctx.find(code, e.spec.id, e.spec.location, f"{text}; no {e.kind} plan: {why}", e.spec.mode, data)
            else:
                ctx.note(e.spec.id, e.spec.location, f"{e.spec.name}: no {e.kind} plan: {why}")
        return
    if unplaced_at is not None:  # the gang lands once the victims are gone: its unplaceable finding becomes the plan
        del ctx.reasons[unplaced_at]
    ctx.plan = plan
    text = f"{spec.name}: {plan.summary()}"
    if kind == "preempt":
        ctx.find("PreemptionPlanned", spec.id, spec.location, text, "warn", plan.to_json())
    else:
        ctx.find("ReclaimPlanned", spec.id, spec.location, text, "warn", plan.to_json())
    if ctx.may_reserve and not ctx.w.dry_run and not ctx.mutate:
        for v in plan.victims:
            book.pledged[(v.namespace, v.kind, v.name)] = ctx.now + PLAN_TTL


def _request(ctx, planner):
    """(the GangRequest to place, the index of the gang block's unplaceable finding or None)."""
    if ctx.unplaced is not None:
        return ctx.unplaced
    if ctx.gang is not None or planner is None:
        return None, None  # placed already (its domain is held), or nothing to ask
    request, _group = gang_request_of(ctx.w, ctx.snapshot, planner)
    return replace(request, topology=FLAT), None  # a request without a topology requirement may land on any GPU node


def _plan(ctx, kind: str, entries, index, request) -> tuple[Plan | None, str]:
    ledger = ctx.state.quota
    tree, book, specs = ledger.tree, ledger.book, ledger.specs
    w = ctx.w
    mine = {e.spec.index for e in entries}
    used = list(ledger.used)
    pledged = _pledged(book, ctx.now)
    for u in pledged:  # victims of plans already admitted: counted as gone, never chosen twice
        for qi, m in u.milli.items():
            used[qi] -= m
    usage = tree.usage(used)
    nominal = list(tree.nominal[: tree.quotas])
    needs = [(e.spec.index, e.requested) for e in entries if e.kind != "reclaim"]
    my_share = max((tree.share(qi, usage, req) for qi, req in needs), default=0)
    priority = w.priority if w.priority is not None else 0
    takes: dict[int, tuple[int, str]] = {}  # quotas whose borrowers may give way: share, why (first met first)
    for r in mine:
        for qi in range(tree.quotas):
            if qi in takes or qi in mine or not tree.same_tree(qi, r) or used[qi] <= nominal[qi]:
                continue
            share = tree.share(qi, usage)
            if kind != "reclaim" and share <= my_share:
                continue  # a borrower at or above its fair share cannot make another give way
            why = f"{specs[qi].name} borrows {format_milli(used[qi] - nominal[qi])} beyond its nominal {format_milli(nominal[qi])}"
            takes[qi] = (share, why + (f" (share {share})" if tree.root(qi) in tree.fair else ""))
    cls = w.priority_class or "its class"
    givers = Givers(book, mine=mine, takes=takes, preempt=kind == "preempt", priority=priority, seen={u.key for u in pledged} | book.excluded,
                    own_reason=lambda u, r: f"priority {u.lowest_priority()} < {priority} ({cls}) in quota {specs[r].name}")
    plain = book.search == "plain"
    candidates = givers.all() if plain else None
    if plain and not candidates:
        return None, _NONE_MAY + (", none of lower priority" if kind == "preempt" else "") + ")"

    def quota_fits(after: list[int]) -> bool:
        return all(after[qi] + req <= nominal[qi] + tree.borrowable(qi, after) for qi, req in needs)

    need = max((req for _qi, req in needs), default=0) or w.total_gpus
    whatif, last = None, [None]
    if index is not None and request is not None:
        from policy.placement.whatif import WhatIf

        whatif = WhatIf(index)
        whatif.drop(k for u in pledged for k in u.pods)

        def lands(drop, keep, ask: bool = True) -> bool:
            whatif.restore(k for c in keep for k in c.unit.pods)
            whatif.drop(k for c in drop for k in c.unit.pods)
            return whatif.fits(request) if ask else False
    domains, domain = _domains_of(index, request, book) if whatif is not None else (None, None)
    try:
        if plain:
            chosen = choose(candidates, used=used, nominal=nominal, quota_fits=quota_fits, lands=lands if whatif else None, need=need,
                            domains=domains)
        else:
            chosen, some = choose_ordered(givers, used=used, nominal=nominal, quota_fits=quota_fits, lands=lands if whatif else None,
                                          need=need, domain=domain, domains=domains)
            if not some:
                return None, _NONE_MAY + (", none of lower priority" if kind == "preempt" else "") + ")"
        if chosen is not None and whatif is not None:
            last[0] = whatif.place(request)  # with exactly the chosen victims out: where it lands
    finally:
        if whatif is not None:
            whatif.restore_all()
    if chosen is None:
        count = len(candidates) if plain else len(givers.all())
        return None, f"{count} workload(s) could give way, but the request would not fit" + (" and land" if whatif else "") + " with all of them gone"
    victims = tuple(_victim(ctx, c, specs) for c in chosen)
    spec = next(e.spec for e in entries if e.kind == kind)
    rules = [spec.id] + sorted({specs[qi].id for c in chosen for qi in c.unit.milli} - {spec.id})
    if kind == "preempt" and w.priority_class:
        rules.append(f"priority {w.priority_class}")
    nodes = tuple(sorted(last[0].nodes.items())) if last[0] is not None and last[0].fits else ()
    workload = f"{w.kind} {w.namespace or 'default'}/{w.name or w.gang or ''}"
    return Plan(kind, spec.id, workload, victims, sum(v.gpus for v in victims), tuple(rules), nodes, whatif is not None), ""


def _domains_of(index, request, book):
    """(the domains a candidate frees GPUs in, the units holding GPUs in a domain) when the request must land in one, else Nones.

    A domain is a node for one pod, a value of the required level for a gang.
    """
    from policy.placement.request import gang_size

    def on(nodes):
        return [u for n in nodes for u in book.by_node.get(n, {}).values()]

    label = None
    if request.required is not None:
        tree, _ = index.tree_for(request.topology)
        levels = dict(zip(tree.level_names, tree.labels)) if tree is not None else {}
        label = levels.get(request.required)
        if label is None:
            return None, None
    elif gang_size(request)[0] != 1:
        return None, None  # several pods anywhere: no single domain to free
    else:
        return (lambda c: c.unit.nodes()), (lambda d: on((d,)))  # one pod lands on one node
    nodes, memo, members = index.nodes, {}, {}

    def domains(c) -> frozenset:
        key = c.unit.key
        hit = memo.get(key)
        if hit is None:
            out = set()
            for node in c.unit.nodes():
                state = nodes.get(node)
                if state is None or state.spec is None:
                    continue
                value = state.spec.labels.get(label)
                if value is not None:
                    out.add(value)
            hit = memo[key] = frozenset(out)
        return hit

    def domain(d) -> list:
        if not members:  # the nodes of each value, once per request
            for name, state in nodes.items():
                value = state.spec.labels.get(label) if state.spec is not None else None
                if value is not None:
                    members.setdefault(value, []).append(name)
        return on(members.get(d, ()))

    return domains, domain


def _pledged(book, now: float) -> list:
    out = []
    for key, until in list(book.pledged.items()):
        unit = book.units.get(key)
        if unit is None or until <= now:
            del book.pledged[key]  # gone (the plan worked) or the plan was never carried out
        else:
            out.append(unit)
    return out


def _victim(ctx, c: Candidate, specs) -> Victim:
    u = c.unit
    uid = u.uid if u.uid is not None else _uid(ctx.snapshot, u)
    pods = tuple(VictimPod(ns, name, puid, node, milli) for ns, name, puid, node, milli in sorted(u.pods.values(), key=lambda p: p[1]))
    quotas = tuple(specs[qi].id for qi in sorted(u.milli))
    return Victim(u.kind, u.namespace, u.name, uid, u.action, quotas, u.lowest_priority(), u.gpus(), pods, c.reason, u.first_admitted())


def _uid(snapshot, u) -> str | None:
    """The uid of a workload named by a pod label (a JobSet), from the cluster state when it holds the object."""
    if snapshot is None or u.kind in ("Pod", "PodGroup"):
        return None
    for obj in snapshot.objects(u.kind):
        meta = obj.get("metadata") or {}
        if meta.get("name") == u.name and (meta.get("namespace") or "default") == u.namespace:
            uid = meta.get("uid")
            return uid if type(uid) is str else None
    return None
