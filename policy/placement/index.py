"""`PlacementIndex`: the public facade — node and pod events in, gang queries and reservations out.

Pure: no I/O and no clock; expiry takes `now` from the caller.
"""

from __future__ import annotations

from typing import Callable, Iterable, Mapping, Sequence

from policy.cluster.snapshot import is_live
from policy.placement.aggregates import _GV, Lag, Tree, add_bulk, bind_whole, apply_resources, finish_bulk, join, join_whole, move_pod, rekey, reserve_devices, resource_part, respec_whole, unbind_whole
from policy.placement.capacity import DEFAULT_TOLERATED, TAINT_SEP, Levels, NodeSpec, is_map, keep_raw, mapping, read_node, reread
from policy.placement.devices import Demand, NodeState
from policy.placement.needs import LabelCounts, Untainted, pod_requests
from policy.placement.query import demand_of, fits, search
from policy.placement.reservations import RESERVATION_ANNOTATION, Ledger, Reservations
from policy.placement.result import GangRequest, PlacementReason, PlacementResult
from policy.subject.model import PodSet

_WHY_KEY = {"cordoned": "cordoned", "NotReady": "NotReady"}  # why-not reasons by their `excluded` key, the usual ones
FLAT = "cluster"  # the implicit topology with no levels: every eligible GPU node
# Key moves left waiting, at most (and at most the lag's limit): each costs a query settling it about one taint event
# (tens of µs), so a query pays at most 8 of them; an event beyond settles the oldest.
REKEY_LIMIT = 8
ANSWERS_LIMIT = 1024  # re-usable answers kept per index version (cleared beyond: a bound, not an LRU)
# Deleted nodes remembered, at most (oldest forgotten first): a node deleted then added back under its name (repaired,
# re-registered by its kubelet) is read against the view it left and re-filed in the domains it left, when its label
# paths and model key are unchanged (a domain and its aggregates, once made, are never dropped: the same objects).
GHOST_LIMIT = 256


def _kind(obj: Mapping) -> str | None:
    kind = obj.get("kind")
    if kind:
        return kind
    spec = mapping(obj.get("spec"))
    return "Pod" if "containers" in spec else "Node" if "allocatable" in mapping(obj.get("status")) else None


def _pod_key(pod: Mapping) -> str:
    meta = mapping(pod.get("metadata"))
    return str(meta.get("uid") or f"{meta.get('namespace') or 'default'}/{meta.get('name')}")


_NO_STATUS: dict = {}
_DONE = ("Succeeded", "Failed")


def _usable(pod: Mapping) -> bool:
    """The parts `is_live` and the demand reader look into are objects (odd input never raises)."""
    return is_map(pod.get("metadata")) and is_map(pod.get("spec")) and is_map(pod.get("status", _NO_STATUS))


class PlacementIndex(Reservations):
    """Free GPU capacity by node and topology domain, kept incrementally; answers gang queries."""

    def __init__(
        self,
        topologies: Sequence[tuple[str, Levels]] = (),
        gpu_models: Mapping[str, tuple[str, int]] = {},
        *,
        tolerated: frozenset[str] = DEFAULT_TOLERATED,
        demand: Callable[[Mapping], PodSet] | None = None,
    ):
        self.topologies = tuple((name, tuple(tuple(lv) for lv in levels)) for name, levels in topologies)
        self.gpu_models = dict(gpu_models)
        self.tolerated = tolerated
        self.lag = Lag()  # what events marked and readers settle, for every tree (aggregates.Lag)
        self.trees: dict[str, Tree] = {name: Tree(name, levels, self.lag) for name, levels in self.topologies}
        self.flat = Tree(FLAT, (), self.lag)
        self.nodes: dict[str, NodeState] = {}
        self.model_memory: dict[str, int] = {}  # model key -> bytes per device (smallest seen)
        self.model_keys: tuple[str, ...] = ()  # sorted untainted model keys: what a gang without tolerations uses
        self.variants: dict[str, tuple[str, tuple]] = {}  # tainted model key -> (model, blocking taints)
        self.excluded: dict[str, int] = {}  # why_not kind -> GPU nodes
        self.reservations = Ledger()
        self._pods: dict[str, tuple[str, Demand]] = {}  # live bound pod -> (node, demand)
        self._pending: dict[str, Demand] = {}  # live unbound pod -> its demand, read once
        # Nodes whose model key changed (a taint) but which are still counted under the old one, oldest first: node ->
        # the spec they are counted as. Readers settle them first (`settle_rekeys`); a taint undone before takes it back.
        self._rekeys: dict[NodeState, NodeSpec] = {}
        self._demand = demand
        self.version = 0  # bumped by every change a query could read: equal versions, equal answers
        # Answers at `_answers_at`: (kind, gang) -> answer. A query is a pure function of the index and the
        # gang, so members of a gang not yet held (dryRun, denied, offline) and repeated share checks re-use it.
        self._answers: dict[tuple[str, GangRequest], object] = {}
        self._answers_at = -1
        self.max_gpus = 0  # the most devices any node has had
        # Label values of nodes, for which node filters all of them pass: per model (the declared name or product)
        # over all its nodes, tainted or not, and per tainted model key (variant) over that key's nodes; the untainted
        # key's are the model's minus its variants' (`needs.Untainted`), so a taint counts a node's labels once.
        self.labels: dict[str, LabelCounts] = {}
        self.exact_memo: tuple = (-1, None, False, True)  # (version, demand, exact, possible): room.judge
        # Recently deleted nodes: name -> (the spec it was counted as, its domains, aggs and ranked aggs, the raw taints
        # and allocatable that spec was read from); see GHOST_LIMIT (0: none kept, every node added is read afresh).
        self._ghosts: dict[str, tuple] = {}
        self.ghost_limit = GHOST_LIMIT

    # ---- building ----------------------------------------------------------------------
    @classmethod
    def from_snapshot(cls, snapshot, topologies: Sequence[tuple[str, Levels]] = (), gpu_models: Mapping[str, tuple[str, int]] = {}, **kw) -> "PlacementIndex":
        """An index over a `policy.cluster.ClusterSnapshot`'s nodes and pods (not yet subscribed)."""
        if "demand" not in kw:
            from policy.subject.normalize import pod_demand

            kw["demand"] = lambda pod: pod_demand(pod, snapshot)
        index = cls(topologies, gpu_models, **kw)
        index.load(snapshot.nodes(), snapshot.pods())
        return index

    def load(self, nodes: Iterable[Mapping], pods: Iterable[Mapping]) -> None:
        """Bulk-load an empty index: node specs and pod usage first, then aggregates and buckets in one pass."""
        if self.nodes:
            raise ValueError("load() fills an empty index; use apply_node/apply_pod for changes")
        self.version += 1
        for node in nodes:
            spec = read_node(node, self.topologies, self.gpu_models, self.tolerated)
            if spec.gpus <= 0 or spec.name in self.nodes:
                continue
            state = self.nodes[spec.name] = NodeState(spec.name, spec)
            keep_raw(state, node)
            self._attach(state)
            self._note_model(spec)
            self._count_labels(spec, +1)
            if not spec.eligible:
                self._count_excluded(spec.why_not or "excluded", +1)
        for pod in pods:
            if not _usable(pod):
                continue
            node_name = pod["spec"].get("nodeName")
            if not isinstance(node_name, str) or not node_name or not is_live(pod):
                continue
            demand = self._pod_demand(pod)
            state = self.nodes.get(node_name)
            if state is None:
                if not demand.whole and not demand.milli:
                    continue  # a GPU-less pod on a node not tracked (CPU-only): nothing to count
                state = self.nodes[node_name] = NodeState(node_name)
            key = _pod_key(pod)
            state.add(key, demand)
            self._pods[key] = (node_name, demand)
        for state in self.nodes.values():
            contribution = state.contribution()
            if contribution is not None:
                add_bulk(state, contribution)
                apply_resources(state, None, resource_part(state))
        for tree in (self.flat, *self.trees.values()):
            finish_bulk(tree)

    def attach(self, snapshot) -> None:
        """Follow the snapshot's changes: `snapshot.subscribe(self.on_event)`."""
        snapshot.subscribe(self.on_event)

    def on_event(self, event: str, old: Mapping | None, new: Mapping | None) -> None:
        """A `ClusterSnapshot` callback: route node and pod changes, ignore the rest."""
        obj = new if new is not None else old
        if obj is None:
            return
        kind = _kind(obj)
        if kind == "Node":
            self.apply_node(event, obj)
        elif kind == "Pod":
            self.apply_pod(event, obj)

    # ---- events ------------------------------------------------------------------------
    def apply_node(self, event: str, node: Mapping) -> None:
        """Apply one Node watch event (ADDED / MODIFIED / DELETED)."""
        meta = node.get("metadata")
        if type(meta) is not dict:
            meta = mapping(meta)
        name = meta.get("name")
        if type(name) is not str:
            name = str(name or "")
        state = self.nodes.get(name)
        if event == "DELETED":
            if state is not None:
                old = state.spec
                if old is not None and old[4] > 0 and not (self._rekeys and state in self._rekeys):
                    self._delete(state, old)  # what `_set_spec(state, None)` does for a counted node, its key settled
                else:
                    self._set_spec(state, None)
                if not state.allocs:
                    del self.nodes[name]
            return
        if state is not None:
            prev = state.spec
            # (NodeSpec fields by position, as `_respec` reads them: 3 model, 4 gpus, 6 paths)
            if prev is not None and prev[4] > 0:  # the usual event: compare the parts placement reads, read what changed
                spec = reread(state, node, meta, self.topologies, self.gpu_models, self.tolerated)
                if spec is None:
                    return
                if spec[3] is prev[3] and spec[6] is prev[6] and spec[4] > 0 and not (self._rekeys and state in self._rekeys):
                    self._respec(state, prev, spec)  # what `_set_spec` decides, for a node whose key move is not waiting
                else:
                    self._set_spec(state, spec)
                return
        if self._ghosts and (state is None or state.spec is None):
            ghost = self._ghosts.pop(name, None)
            if ghost is not None:
                self._revive(state, name, node, meta, ghost)
                return
        spec = read_node(node, self.topologies, self.gpu_models, self.tolerated, state.spec if state is not None else None)
        if spec.gpus <= 0 and state is None:
            return  # CPU-only nodes are not tracked at all
        if state is None:
            state = self.nodes[name] = NodeState(name)
        keep_raw(state, node)
        if state.spec != spec:  # status heartbeats change nothing placement reads: skip them cheaply
            self._set_spec(state, spec)

    def _revive(self, state: NodeState | None, name: str, node: Mapping, meta: Mapping, ghost: tuple) -> None:
        """A node added back after its deletion (`GHOST_LIMIT`): its object compared part by part with the one it left
        (`reread`), and when its label paths and model key are unchanged, filed again in the domains it left."""
        old, domains, aggs, ranked, taints_raw, alloc_raw = ghost
        probe = state if state is not None else NodeState(name)
        probe.spec, probe.taints_raw, probe.alloc_raw = old, taints_raw, alloc_raw
        spec = reread(probe, node, meta, self.topologies, self.gpu_models, self.tolerated)
        probe.spec = None
        if spec is None:
            spec = old  # what it was: equal to a fresh read (`reread`)
        elif spec[4] <= 0:  # no GPUs now
            if state is not None:  # held pods keep it tracked, without aggregates
                self._set_spec(state, spec)
            return  # else not tracked, as a CPU-only node
        if state is None:
            state = self.nodes[name] = probe
        # (NodeSpec fields by position: 3 model, 6 paths) the same domains and key: the same chain a walk would find
        same = spec is old or (spec[3] == old[3] and spec[6] == old[6])
        self._enter(state, spec, (domains, aggs, ranked) if same else None)

    def _enter(self, state: NodeState, spec: NodeSpec, chain: tuple | None) -> None:
        """What `_set_spec(state, spec)` does for a node not counted (no spec) taking one with GPUs: filed in its domains
        (those of `chain` when given, `_reattach`), then counted."""
        self.version += 1
        state.spec = spec
        if chain is not None:
            self._reattach(state, chain)
        else:
            self._attach(state)
        self._count_in(state, spec)

    def _delete(self, state: NodeState, old: NodeSpec) -> None:
        """A counted node deleted (its key move, if any, settled): it leaves its aggregates and counts, remembered
        (`_bury`), and is taken out of the domains that file it — the flat root and each tree's deepest (`_attach`)."""
        self.version += 1
        self._count_out(state, old)
        if self.ghost_limit:
            self._bury(state, old)
        domains = state.domains
        domains[0].nodes.pop(state, None)
        i = 0
        for _tree, path in zip(self.trees.values(), old[6]):
            if path is not None:
                i += len(path) + 1
                domains[i].nodes.pop(state, None)
        state.domains = state.aggs = state.ranked = ()
        state.alt = None
        state.spec = None

    def _count_in(self, state: NodeState, spec: NodeSpec) -> None:
        """A node filed in its domains as `spec` (with GPUs) is counted: its model, its labels, its aggregates or excluded."""
        if spec[4] > self.max_gpus or self.model_memory.get(spec[3]) != spec[5]:
            self._note_model(spec)
        self._count_labels(spec, +1)
        if spec[1]:  # it joins its aggregates (by arithmetic when no device is shared)
            if not join_whole(state, spec, +1):
                join(state, state.contribution(), resource_part(state), +1)
        else:
            self._count_excluded(spec[2] or "excluded", +1)

    def _count_out(self, state: NodeState, old: NodeSpec) -> None:
        """`_count_in` undone for a node counted as `old` (NodeSpec fields by position: 1 eligible, 2 why_not)."""
        if old[1]:  # it leaves its aggregates (by arithmetic when no device is shared)
            if not join_whole(state, old, -1):
                join(state, state.contribution(), resource_part(state), -1)
        elif old[2]:
            self._count_excluded(old[2], -1)
        self._count_labels(old, -1)

    def _bury(self, state: NodeState, spec: NodeSpec) -> None:
        """Remember a node being deleted, counted as `spec` in its domains (`_revive` reads it back)."""
        ghosts = self._ghosts
        ghosts[state.name] = (spec, state.domains, state.aggs, state.ranked, state.taints_raw, state.alloc_raw)
        if len(ghosts) > self.ghost_limit:
            del ghosts[next(iter(ghosts))]

    def _set_spec(self, state: NodeState, spec: NodeSpec | None, chain: tuple | None = None) -> None:
        rekeys = self._rekeys
        if rekeys and state in rekeys:  # its key move waits: undone (nothing to do), or done before this change
            counted = rekeys[state]
            if spec is not None and spec.model == counted.model and spec.paths == counted.paths and spec.gpus > 0:
                del rekeys[state]
                state.spec = counted  # still counted so: this change goes from there
            else:
                self._settle_rekey(state)
        old = state.spec
        # Same place in every topology (only a taint may change the model key): the node keeps its domains.
        in_place = spec is not None and old is not None and old.gpus > 0 and spec.gpus > 0 and old.paths == spec.paths
        if in_place and old.model == spec.model:
            self._respec(state, old, spec)  # the usual change (cordon, Ready, allocatable, a label): same aggregates
            return
        if in_place and self._rekey(state, old, spec):  # a blocking taint added or gone: same domains, other key
            return
        self.version += 1
        if old is not None and old[4] > 0:  # (NodeSpec fields by position: 1 eligible, 2 why_not, 3 model, 4 gpus, 5 memory)
            self._count_out(state, old)
            if not in_place:
                if spec is None and self.ghost_limit:
                    self._bury(state, old)
                self._detach(state)
        state.spec = spec
        if spec is None or spec[4] <= 0:
            return
        if in_place:  # a taint added or gone: the same domains, the aggregates of the other model key
            self._reaggregate(state)
        elif chain is not None:
            self._reattach(state, chain)
        else:
            self._attach(state)
        self._count_in(state, spec)

    def _respec(self, state: NodeState, old: NodeSpec, spec: NodeSpec) -> None:
        """A node's spec changed but not its model key nor its place in any topology: move its contribution in the
        domains it is in (O(depth), as a pod event does), and count only the labels that changed."""
        self.version += 1
        # NodeSpec fields by position (`respec_whole` says why): name, eligible, why_not, model, gpus, memory, paths,
        # taints, cpu, ram, pods, labels
        _n, e0, why0, _m, g0, mem0, _p, _t, cpu0, ram0, pods0, labels0 = old
        _n, e1, why1, model, g1, mem1, _p, taints, cpu1, ram1, pods1, labels1 = spec
        if labels0 is not labels1:
            self.labels[model].replace(labels0, labels1)
            if taints:  # a tainted key's node: counted in its model's counts too
                self.labels[self.variants[model][0]].replace(labels0, labels1)
        if e0 != e1 or why0 != why1:  # `_count_excluded`, inlined
            excluded = self.excluded
            if not e0:
                key = _WHY_KEY.get(why0) or (why0 or "excluded").split(" ", 1)[0]
                excluded[key] = excluded.get(key, 0) - 1
            if not e1:
                key = _WHY_KEY.get(why1) or (why1 or "excluded").split(" ", 1)[0]
                excluded[key] = excluded.get(key, 0) + 1
        if e0 == e1 and g0 == g1 and mem0 == mem1 and cpu0 == cpu1 and ram0 == ram1 and pods0 == pods1:
            state.spec = spec  # labels only (or a why-not reason): what the node adds to its domains is unchanged
            return
        if g1 != g0 or mem1 != mem0:
            reserve_devices(g1)
            self._note_model(spec)
        if respec_whole(state, old, spec):  # the usual node (no shared device): arithmetic on its counters
            state.spec = spec
            return
        before = state.contribution()
        res_before = resource_part(state) if before is not None else None
        state.spec = spec
        after = state.contribution()
        if before is not None and after is not None:
            move_pod(state, before, after, res_before, resource_part(state))
        elif before is not None:  # cordoned, NotReady: it leaves its aggregates
            join(state, before, res_before, -1)
        elif after is not None:  # back
            join(state, after, resource_part(state), +1)

    def _rekey(self, state: NodeState, old: NodeSpec, spec: NodeSpec) -> bool:
        """An eligible node that stays eligible with the same amounts changed model key in the same domains (a blocking
        taint added or gone): move it to the other key's aggregates and label counts — deferred (`_rekeys`) when its
        labels are unchanged, so a taint undone before anything reads (a flap, a drain cancelled) costs nothing; False
        (nothing done) for any other change, which detaches and re-attaches."""
        if not (old.eligible and spec.eligible) or old.gpus != spec.gpus or old.memory != spec.memory or old.cpu != spec.cpu or (
                old.ram != spec.ram or old.pods != spec.pods):
            return False
        self.version += 1
        if spec.gpus > self.max_gpus or self.model_memory.get(spec.model) != spec.memory:
            self._note_model(spec)
        if old.labels is spec.labels or old.labels == spec.labels:  # deferred: counted as `old` until settled
            state.spec = spec
            rekeys = self._rekeys
            rekeys[state] = old
            limit = self.lag.limit
            if len(rekeys) > (limit if limit < REKEY_LIMIT else REKEY_LIMIT):
                self._settle_rekey(next(iter(rekeys)))  # the oldest: at most one per event
            return True
        self._move_key(state, old, spec)
        return True

    def settle_rekeys(self) -> None:
        """Do every deferred key move (`_rekey`): what every reader of the aggregates and label counts needs first."""
        rekeys = self._rekeys
        while rekeys:
            self._settle_rekey(next(iter(rekeys)))

    def _settle_rekey(self, state: NodeState) -> None:
        old = self._rekeys.pop(state)
        self._move_key(state, old, state.spec)

    def _move_key(self, state: NodeState, old: NodeSpec, spec: NodeSpec) -> None:
        """Move a node counted as `old` to the aggregates and label counts of `spec`'s model key, in its domains."""
        model = spec.model
        alt = state.alt
        if alt is not None and alt[0] == model:  # back to the key it left (the taint undone): its aggs, kept
            aggs, ranked = alt[1], alt[2]
        else:
            found = []
            for d in state.domains:  # `Domain.agg_for`, inlined: a node's first taint looks up one agg per domain
                agg = d.aggs.get(model)
                found.append(agg if agg is not None else d.agg_for(model))
            aggs = tuple(found)
            ranked = tuple([agg for agg in found if agg.lists is not None])
        state.alt = (old.model, state.aggs, state.ranked)
        state.spec = spec
        rekey(state, aggs, ranked)  # the same amounts under either spec
        if old.labels is spec.labels or old.labels == spec.labels:  # the same model: only variants' counts change
            if old.taints:
                self.labels[old.model].add(old.labels, -1)
            if spec.taints:
                counts = self.labels.get(model)
                if counts is None:
                    counts = self.labels[model] = LabelCounts()
                counts.add(spec.labels, +1)
        else:
            self._count_labels(old, -1)
            self._count_labels(spec, +1)

    def _note_model(self, spec: NodeSpec) -> None:
        if spec.gpus > self.max_gpus:
            self.max_gpus = spec.gpus  # never lowered: a bound for the exactness certificate (aggregates.certain)
        known = self.model_memory.get(spec.model)
        if known is None or (spec.memory and (not known or spec.memory < known)):
            self.model_memory[spec.model] = spec.memory
            if spec.taints:
                self.variants[spec.model] = (spec.model.split(TAINT_SEP, 1)[0], spec.taints)
            else:
                self.model_keys = tuple(sorted(k for k in self.model_memory if k not in self.variants))

    def _count_labels(self, spec: NodeSpec, sign: int) -> None:
        """Count (+1) or forget (-1) a node's labels under its model, and under its variant key when tainted."""
        labels = self.labels
        model, node_labels = spec[3], spec[11]  # (NodeSpec fields by position: 3 model, 7 taints, 11 labels)
        for key in ((self.variants[model][0], model) if spec[7] else (model,)):
            counts = labels.get(key)
            if counts is None:
                counts = labels[key] = LabelCounts()
            counts.add(node_labels, sign)

    def passes_all(self, flt, keys: tuple[str, ...]) -> bool:
        """Whether every tracked node of these model keys passes the node filter."""
        if self._rekeys:
            self.settle_rekeys()
        for key in keys:
            counts = self.labels.get(key)
            if counts is None:
                continue
            if key not in self.variants:  # an untainted key: its model's nodes but those of its variants
                tainted = [self.labels[vk] for vk, (model, _t) in self.variants.items() if model == key and vk in self.labels]
                if any(c.total for c in tainted):
                    counts = Untainted(counts, tainted)
            if not counts.universal(flt, self.nodes):
                return False
        return True

    def _count_excluded(self, why: str, delta: int) -> None:
        key = why.split(" ", 1)[0]
        self.excluded[key] = self.excluded.get(key, 0) + delta

    def _attach(self, state: NodeState) -> None:
        """File the node in its domains and take its aggregates for its model key, in one walk down each tree."""
        spec = state.spec
        _n, _e, _w, model, gpus, _m, paths, _t, _c, _r, _s, _l = spec  # by position: see `_respec`
        root = self.flat.root
        root.nodes[state] = None
        agg = root.aggs.get(model)
        domains = [root]
        aggs = [agg if agg is not None else root.agg_for(model)]
        ranked = []  # the aggs of domains below a root: those filed in level buckets
        for tree, path in zip(self.trees.values(), paths):
            if path is None:
                continue  # Kueue likewise ignores nodes lacking any level label of a topology
            # A node added back (or moved) usually finds its domains: walk the children, no chain copies
            domain = tree.root
            top = len(domains)
            agg = domain.aggs.get(model)
            domains.append(domain)
            aggs.append(agg if agg is not None else domain.agg_for(model))
            for value in path:
                child = domain.children.get(value)
                if child is None:  # a domain first seen: the rest of the chain is created there
                    for domain in tree.domains_for(path)[len(domains) - top:]:
                        agg = domain.agg_for(model)
                        domains.append(domain)
                        aggs.append(agg)
                        ranked.append(agg)
                    break
                domain = child
                agg = domain.aggs.get(model)
                if agg is None:
                    agg = domain.agg_for(model)
                domains.append(domain)
                aggs.append(agg)
                ranked.append(agg)
            domain.nodes[state] = None
        state.domains = tuple(domains)
        state.aggs = tuple(aggs)
        state.ranked = tuple(ranked)
        state.alt = None
        if gpus >= len(_GV):
            reserve_devices(gpus)  # every h an event can meet has its packed delta ready

    def _reattach(self, state: NodeState, chain: tuple) -> None:
        """File the node in the domains it was deleted from (`_revive`): what `_attach` finds for the same label paths
        and model key, without the walk. Each tree's chain is its root then one domain per path value, the node filed
        in the last (and in the flat root, first)."""
        domains, aggs, ranked = chain
        domains[0].nodes[state] = None
        i = 0
        for _tree, path in zip(self.trees.values(), state.spec[6]):
            if path is not None:
                i += len(path) + 1
                domains[i].nodes[state] = None
        state.domains = domains
        state.aggs = aggs
        state.ranked = ranked
        state.alt = None
        gpus = state.spec[4]
        if gpus >= len(_GV):
            reserve_devices(gpus)

    def _reaggregate(self, state: NodeState) -> None:
        """The node's aggregates: its domains' for its model key."""
        model = state.spec.model
        found = []
        for d in state.domains:  # `Domain.agg_for`, inlined: a node added looks up one agg per domain
            agg = d.aggs.get(model)
            found.append(agg if agg is not None else d.agg_for(model))
        state.aggs = tuple(found)
        state.ranked = tuple([agg for agg in found if agg.lists is not None])
        reserve_devices(state.spec.gpus)  # every h an event can meet has its packed delta ready

    def _detach(self, state: NodeState) -> None:
        for domain in state.domains:
            domain.nodes.pop(state, None)
        state.domains = ()
        state.aggs = ()
        state.ranked = ()
        state.alt = None

    def _mutate(self, state: NodeState, change: Callable[[], object]) -> object:
        """Run `change` on the node and push the difference into its domains (O(depth))."""
        self.version += 1
        before = state.contribution()
        res_before = resource_part(state) if before is not None else None
        out = change()
        after = state.contribution()
        if before is not None or after is not None:
            move_pod(state, before, after, res_before, resource_part(state) if after is not None else None)
        return out

    def apply_pod(self, event: str, pod: Mapping) -> None:
        """Apply one Pod watch event: a pod counts while bound (`spec.nodeName`) and live."""
        meta, spec, status = pod.get("metadata"), pod.get("spec"), pod.get("status")
        usable = type(meta) is dict and type(spec) is dict and (status is None or type(status) is dict)
        if not usable:  # rare: a Mapping that is not a dict, or odd input
            usable = _usable(pod)
            meta, spec = mapping(meta), mapping(spec)
        uid = meta.get("uid")
        key = uid if type(uid) is str and uid else _pod_key(pod)
        known = self._pods.get(key)
        # `is_live`, inlined for dicts (every pod event asks): not being deleted, not Succeeded/Failed
        live = (not meta.get("deletionTimestamp") and (status is None or status.get("phase") not in _DONE)) if usable else False
        if event == "DELETED" or not live:
            self._pending.pop(key, None)
            if known is not None:
                self._release_pod(key, known[0])
            return
        node_name = spec.get("nodeName")
        if not isinstance(node_name, str) or not node_name:
            # Pending: read the demand now (GPU requests are immutable), so the bind event only moves counters.
            if key not in self._pending:
                self._pending[key] = self._pod_demand(pod)
            if known is not None:
                self._release_pod(key, known[0])
            return
        if known is not None:
            if known[0] == node_name:
                return  # status updates of a bound pod change nothing placement reads
            self._release_pod(key, known[0])
        demand = self._pending.pop(key) if key in self._pending else self._pod_demand(pod)
        state = self.nodes.get(node_name)
        if state is None:
            if not demand.whole and not demand.milli:
                return  # a GPU-less pod on a node not tracked (CPU-only): nothing to count
            state = self.nodes[node_name] = NodeState(node_name)  # the pod arrived before its node
        annotations = meta.get("annotations")
        rid = annotations.get(RESERVATION_ANNOTATION) if annotations and isinstance(annotations, Mapping) else None
        if isinstance(rid, str) and rid:
            self._consume(rid, node_name, demand)
        self.version += 1
        if not bind_whole(state, key, demand):  # the usual bind, as arithmetic; else _mutate, inlined
            before = state.contribution()
            res_before = resource_part(state) if before is not None else None
            state.add(key, demand)
            after = state.contribution()
            if before is not None or after is not None:
                move_pod(state, before, after, res_before, resource_part(state) if after is not None else None)
        self._pods[key] = (node_name, demand)

    def _pod_demand(self, pod: Mapping) -> Demand:
        """What a pod holds on its node: GPUs (none for a GPU-less pod), cpu, memory and one pod slot."""
        if self._demand is None:
            from policy.subject.normalize import pod_demand

            self._demand = pod_demand
        pod_set = self._demand(pod)
        demand = demand_of(pod_set, self.gpu_models)
        cpu, ram = pod_requests(pod["spec"])
        if demand is None:
            return Demand(cpu=cpu, ram=ram)
        return Demand(demand.whole, demand.milli, demand.memory, cpu=cpu, ram=ram)  # usage does not care which model was asked

    def _release_pod(self, key: str, node_name: str) -> None:
        del self._pods[key]
        state = self.nodes.get(node_name)
        if state is None:
            return
        if unbind_whole(state, key):  # the usual pod gone, as arithmetic
            self.version += 1
        else:
            self._mutate(state, lambda: state.remove(key))
        if state.spec is None and not state.allocs:
            del self.nodes[node_name]

    # ---- queries and reservations ------------------------------------------------------
    def tree_for(self, topology: str | None) -> tuple[Tree | None, PlacementReason | None]:
        """The tree of a declared topology (default: the first; the flat cluster when none is declared)."""
        if topology is None:
            return (next(iter(self.trees.values())) if self.trees else self.flat), None
        tree = self.trees.get(topology) or (self.flat if topology == FLAT else None)
        if tree is None:
            known = ", ".join(self.trees) or "none"
            return None, PlacementReason("UnknownTopology", f"no topology {topology!r} is declared (declared: {known})", {"topology": topology})
        return tree, None

    def query(self, gang: GangRequest) -> PlacementResult:
        """Where the whole gang fits now (reservations held by others count as used)."""
        return self._answer("query", gang, search)

    def fits(self, gang: GangRequest) -> bool:
        """`query(gang).fits`, without building the placement (for checks that need only yes or no)."""
        return self._answer("fits", gang, fits)

    def _answer(self, kind: str, gang: GangRequest, ask: Callable):
        """`ask(self, gang)`, re-used while `version` is unchanged (answers are immutable)."""
        if self._rekeys:
            self.settle_rekeys()
        answers = self._answers
        if self._answers_at != self.version or len(answers) >= ANSWERS_LIMIT:
            answers.clear()
            self._answers_at = self.version
        try:
            hit = answers.get((kind, gang))
        except TypeError:  # an unhashable toleration value: just ask
            return ask(self, gang)
        if hit is None:
            hit = answers[(kind, gang)] = ask(self, gang)
        return hit

    # ---- accessors for tests and tools -------------------------------------------------
    def free_gpus(self, node: str) -> int:
        """Untouched devices of an eligible node (0 for unknown or excluded nodes)."""
        state = self.nodes.get(node)
        return state.free_whole() if state is not None and state.contribution() is not None else 0

    def free_milli(self, node: str) -> int:
        """Free milli-GPU of an eligible node: untouched devices plus what shared ones have left."""
        state = self.nodes.get(node)
        if state is None or state.contribution() is None:
            return 0
        return state.free_whole() * 1000 + sum(free for free, _s, _m in state.partial_states())

    def capacity(self, node: str, demand: Demand, per_gpu: int | None = None) -> int:
        """How many pods of `demand` fit on the node now."""
        state = self.nodes.get(node)
        return state.capacity(demand, per_gpu) if state is not None else 0

    def sharers(self, node: str) -> tuple[int, ...]:
        """Pods sharing each shared device of the node (for `per_gpu` checks)."""
        state = self.nodes.get(node)
        return tuple(s for _f, s, _m in state.partial_states()) if state is not None else ()

    def bound(self):
        """(node, demand) of every live bound pod the index counts (fragmentation steering reads the live mix from them)."""
        return self._pods.values()
