"""Property: an index whose buckets and free-amount counts lag (settled when read) answers as one settled at every event.

Random binds (whole, shared, GPU-less with cpu and memory; some overcommit), unbinds, and node changes
(cordon, Ready, allocatable, a pool label: the same domains; a taint or another rack: other aggregates; the node
deleted and added back) go to two indexes: one with the default or a small lag limit (so events also
settle the oldest marks themselves) and a twin with limit 0 (settled at every event, as the
aggregates were kept before they lagged). Queries read in between settle what events marked.
After each step the lagging index's queries agree with the twin's, every aggregate a query reads
(per-domain caps, histogram, shared states, resource sums, the flat root's free-amount counts and
each level's bucket membership) is equal, and at the end both equal a recomputation from their
node states (`check_aggregates`). A fresh load is not the reference: which device a shared pod
sits on depends on the order pods came and went, so a rebuild may share devices differently.
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from tests.policy.placement.placement_builders import BLOCK, MODELS, RACK, node, pod
from tests.policy.placement.test_properties import SETTINGS, THREE, TWO, check_aggregates

from policy.placement import GangRequest, PlacementIndex
from policy.placement import aggregates
from policy.placement.aggregates import SHAPES, bound, certain, most_free, sums
from policy.placement.devices import Demand
from policy.placement.index import REKEY_LIMIT
from policy.placement.needs import NodeFilter, PodNeeds
from policy.subject.model import PodSet

PROBES = (
    GangRequest((PodSet("p", 2, 1000),), topology="t", required="rack"),
    GangRequest((PodSet("p", 1, 1000),), topology="t", required="host"),
    GangRequest((PodSet("p", 3, 2000),), topology="t"),
    GangRequest((PodSet("p", 2, 250, fraction=250),), topology="t", required="host", per_gpu=4),
    GangRequest((PodSet("p", 2, 1000, needs=PodNeeds(cpu=3000, memory=2**30)),), topology="t", required="rack"),
    GangRequest((PodSet("p", 1, 1000, needs=PodNeeds(cpu=40_000)),), topology="t", required="host"),
    GangRequest((PodSet("p", 2, 1000, needs=PodNeeds(node_filter=NodeFilter((("pool", "a"),)))),), topology="t", required="rack"),
)

OPS = st.lists(
    st.one_of(
        st.tuples(st.just("bind"), st.integers(0, 7), st.sampled_from(["1", "2", "4", "0.25", "0", "0"])),
        st.tuples(st.just("unbind"), st.integers(0, 40)),
        st.tuples(st.just("cordon"), st.integers(0, 7), st.booleans()),
        st.tuples(st.just("resize"), st.integers(0, 7), st.sampled_from(["8", "16", "64"])),
        st.tuples(st.just("label"), st.integers(0, 7), st.sampled_from(["a", "b", None])),
        st.tuples(st.just("ready"), st.integers(0, 7), st.booleans()),
        # two blocking taints and none: a taint undone finds the key it left (kept), one replaced by another does not
        st.tuples(st.just("taint"), st.integers(0, 7), st.sampled_from(["maint", "drain", None])),
        st.tuples(st.just("rack"), st.integers(0, 7), st.sampled_from(["r0", "r1", "r9"])),
        st.tuples(st.just("gone"), st.integers(0, 7)),
        st.tuples(st.just("query"), st.integers(0, len(PROBES) - 1)),
        st.tuples(st.just("check")),
    ),
    max_size=30,
)


def _state(idx: PlacementIndex) -> dict:
    """Every aggregate a query reads, keyed by tree, domain path and model (bucket members as domain paths)."""
    idx.settle_rekeys()
    idx.lag.settle()
    out: dict = {}
    for tree in (idx.flat, *idx.trees.values()):
        stack = [tree.root]
        while stack:
            d = stack.pop()
            stack.extend(d.children.values())
            for model, agg in d.aggs.items():
                if not agg.nodes:
                    continue
                hist = tuple(c for c in agg.hist)
                while len(hist) > 1 and not hist[-1]:
                    hist = hist[:-1]
                out[(tree.name, d.path, model)] = (agg.nodes, agg.caps, hist, dict(agg.partial), sums(agg), agg.res)
        for level, by_model in enumerate(tree.buckets):
            for model, lists in by_model.items():
                for i, b in enumerate(lists):
                    if b is not None and b.by_cap:  # (an empty one may exist in one index only: a key move taken back)
                        # membership, not order: equal capacities are ordered by when they were filed (docs/placement.md)
                        filed = {cap: sorted(a.domain.path for a in members) for cap, members in b.by_cap.items()}
                        out[(tree.name, level, model, SHAPES[i])] = (filed, b.order)
    return out


@SETTINGS
@given(st.sampled_from([THREE, TWO]), st.lists(st.sampled_from([1, 2, 4, 8]), min_size=1, max_size=8), OPS,
       st.sampled_from([1, 2, 5, None]))
def test_an_index_whose_aggregates_lag_reads_as_one_settled_at_every_event(topologies, sizes, ops, limit):
    nodes = {f"n{i}": node(f"n{i}", f"b{i % 2}", f"r{i % 3}", gpus=g, cpu="16", memory="64Gi", max_pods=6) for i, g in enumerate(sizes)}
    pods: dict = {}
    names = sorted(nodes)
    idx, twin = PlacementIndex(topologies, MODELS), PlacementIndex(topologies, MODELS)
    idx.lag.limit = aggregates.LAG_LIMIT if limit is None else limit
    twin.lag.limit = 0

    def both(apply, event, obj):
        apply(idx)(event, obj)
        apply(twin)(event, obj)
        assert not twin.lag.aggs and not twin._rekeys, "limit 0 settles at every event"
        assert len(idx.lag.aggs) <= idx.lag.limit, "events settle the oldest beyond it"
        assert len(idx._rekeys) <= min(idx.lag.limit, REKEY_LIMIT), "key moves too"

    def node_event(i):
        return i.apply_node

    def pod_event(i):
        return i.apply_pod

    for n in nodes.values():
        both(node_event, "ADDED", n)
    made = 0
    gone: set = set()
    for op in ops:
        kind = op[0]
        if kind == "bind":
            where = names[op[1] % len(names)]
            made += 1
            name = f"x{made}"
            if op[2] == "0.25":
                p = pod(name, where, share="0.25", cpu="500m")
            else:  # may overcommit: bound pods count whatever they take (reality wins)
                p = pod(name, where, gpus=int(op[2]), cpu="3", memory="2Gi")
            pods[name] = p
            both(pod_event, "ADDED", p)
        elif kind == "unbind" and pods:
            name = sorted(pods)[op[1] % len(pods)]
            both(pod_event, "DELETED", pods.pop(name))
        elif kind == "gone":  # deleted (its pods stay counted where they are), or added back
            name = names[op[1] % len(names)]
            if name in gone:
                gone.discard(name)
                both(node_event, "ADDED", nodes[name])
            else:
                gone.add(name)
                both(node_event, "DELETED", nodes[name])
        elif kind in ("cordon", "resize", "label", "ready", "taint", "rack"):
            name = names[op[1] % len(names)]
            n = nodes[name]
            meta, status = n["metadata"], n["status"]
            if kind == "cordon":
                n = dict(n, spec=dict(n["spec"], unschedulable=op[2]))
            elif kind == "resize":
                n = dict(n, status=dict(status, allocatable=dict(status["allocatable"], cpu=op[2])))
            elif kind == "label":  # a fresh labels dict, as a watch event brings
                labels = {k: v for k, v in meta["labels"].items() if k != "pool"}
                n = dict(n, metadata=dict(meta, labels=labels if op[2] is None else dict(labels, pool=op[2])))
            elif kind == "ready":
                n = dict(n, status=dict(status, conditions=[{"type": "Ready", "status": "True" if op[2] else "False"}]))
            elif kind == "taint":  # a blocking taint: another model key, so other aggregates
                n = dict(n, spec=dict(n["spec"], taints=[{"key": op[2], "effect": "NoSchedule"}] if op[2] else []))
            else:
                labels = meta["labels"]
                n = dict(n, metadata=dict(meta, labels=dict(labels, **{RACK: labels[BLOCK] + "-" + op[2]})))
            nodes[name] = n
            if name not in gone:
                both(node_event, "MODIFIED", n)
        elif kind == "query":  # one probe read now: it settles whatever events marked since the last read
            probe = PROBES[op[1]]
            got, want = idx.query(probe), twin.query(probe)
            assert got.fits == want.fits, (op, got.reason, want.reason)
        elif kind == "check":
            _compare(idx, twin, op)
    _compare(idx, twin, "end")
    check_aggregates(idx)
    check_aggregates(twin)


READS = (Demand(whole=1), Demand(whole=2, cpu=3000), Demand(whole=1, cpu=10_000, ram=2**30), Demand(milli=250, cpu=500))


def _compare(idx: PlacementIndex, twin: PlacementIndex, op) -> None:
    """What the query reads of the flat roots, then every probe, answers alike (read before any settling by hand: the
    readers settle), then every aggregate is equal. Key moves a taint left waiting are done first, as a query does
    before reading (these readers are only ever called by one)."""
    idx.settle_rekeys()
    for key, want in twin.flat.root.aggs.items():
        got = idx.flat.root.aggs.get(key)
        if got is None:  # a key the twin moved a node to and back; the lagging index took its move back: never made
            assert not want.nodes, (op, key)
            continue
        for i, demand in enumerate(READS):
            readers = (lambda a, t: certain(a, demand, t.max_gpus), lambda a, t: bound(a, demand), lambda a, t: most_free(a))
            reader = readers[(i + len(op)) % 3]  # one reader first, before any other settles: each must settle itself
            assert reader(got, idx) == reader(want, twin), (op, key, demand)
    for probe in PROBES:
        got, want = idx.query(probe), twin.query(probe)
        assert got.fits == want.fits, (op, probe, got.reason, want.reason)
        assert sum(got.nodes.values()) == sum(want.nodes.values()), (op, probe)
    assert _state(idx) == _state(twin), op
