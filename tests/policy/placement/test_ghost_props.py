"""Property: a node deleted then added back (`PlacementIndex._revive`) leaves the index exactly as a fresh read and attach.

Random node deletions and re-additions — the object unchanged (the same dicts, or a fresh decoded copy), or changed
while gone (a pool label, another rack or block: other domains; another product or a blocking taint: another model
key; cordoned, NotReady, cpu resized, no GPUs left) — mixed with binds, unbinds and changes of tracked nodes, go to an
index that remembers deleted nodes (a small limit, so some are forgotten) and to a twin that remembers none (every
node added is read and filed afresh). After each step both hold the same: every node's view and its domains,
aggregates and ranked aggregates (by domain path), the order nodes are filed in each domain (queries walk it),
every aggregate, bucket and count a query reads, the index version, and the same answers. At the end, the index
equals a fresh load of the final objects (whole-GPU pods only: a load may place shares on other devices).
"""

from __future__ import annotations

import copy

from hypothesis import given
from hypothesis import strategies as st
from tests.policy.placement.placement_builders import BLOCK, H100, L4, MODELS, RACK, node, pod
from tests.policy.placement.test_lag_props import PROBES, _state
from tests.policy.placement.test_properties import SETTINGS, THREE, TWO, _check_marks, check_aggregates

from policy.placement import PlacementIndex
from policy.placement.capacity import DEFAULT_TOLERATED, read_node

CHANGES = ("same", "copy", "pool", "rack", "block", "product", "taint", "untaint", "cordon", "notready", "cpu", "nogpu", "gpus")

OPS = st.lists(
    st.one_of(
        st.tuples(st.just("gone"), st.integers(0, 5), st.sampled_from(CHANGES)),
        st.tuples(st.just("gone"), st.integers(0, 5), st.sampled_from(("same", "copy"))),
        st.tuples(st.just("bind"), st.integers(0, 5), st.sampled_from(["1", "2", "0", "0.25"])),
        st.tuples(st.just("unbind"), st.integers(0, 30)),
        st.tuples(st.just("modify"), st.integers(0, 5), st.sampled_from(CHANGES)),
        st.tuples(st.just("query"), st.integers(0, len(PROBES) - 1)),
    ),
    max_size=30,
)


def _changed(n: dict, change: str) -> dict:
    """`n` after one change (fresh dicts for what changed, the rest shared, as a watch cache's objects are)."""
    meta, spec, status = n["metadata"], n["spec"], n["status"]
    labels = meta["labels"]
    if change == "same":
        return n
    if change == "copy":
        return copy.deepcopy(n)  # a watch event decodes new dicts: equal, not the same
    if change == "pool":
        return dict(n, metadata=dict(meta, labels=dict(labels, pool="b" if labels.get("pool") == "a" else "a")))
    if change == "rack":
        return dict(n, metadata=dict(meta, labels=dict(labels, **{RACK: labels[BLOCK] + "-r" + ("9" if labels[RACK][-1] != "9" else "0")})))
    if change == "block":
        block = "b1" if labels[BLOCK] == "b0" else "b0"
        return dict(n, metadata=dict(meta, labels=dict(labels, **{BLOCK: block, RACK: block + labels[RACK][2:]})))
    if change == "product":
        return dict(n, metadata=dict(meta, labels=dict(labels, **{"nvidia.com/gpu.product": L4 if labels["nvidia.com/gpu.product"] == H100 else H100})))
    if change == "taint":
        return dict(n, spec=dict(spec, taints=[{"key": "maint", "effect": "NoSchedule"}]))
    if change == "untaint":
        return dict(n, spec=dict(spec, taints=[]))
    if change == "cordon":
        return dict(n, spec=dict(spec, unschedulable=not spec.get("unschedulable")))
    if change == "notready":
        ready = status["conditions"][0]["status"] == "True"
        return dict(n, status=dict(status, conditions=[{"type": "Ready", "status": "False" if ready else "True"}]))
    alloc = status["allocatable"]
    if change == "cpu":
        return dict(n, status=dict(status, allocatable=dict(alloc, cpu="8" if alloc.get("cpu") == "16" else "16")))
    if change == "nogpu":
        return dict(n, status=dict(status, allocatable=dict(alloc, **{"nvidia.com/gpu": "0"})))
    return dict(n, status=dict(status, allocatable=dict(alloc, **{"nvidia.com/gpu": "8" if alloc["nvidia.com/gpu"] != "8" else "2"})))


def _where(idx: PlacementIndex) -> dict:
    """Every node's view, where it is filed (domains, aggs, ranked aggs by tree and path), and each domain's node order
    (key moves a taint left waiting done first, as a reader does)."""
    idx.settle_rekeys()
    out: dict = {}
    for name, state in idx.nodes.items():
        model = state.spec.model if state.spec is not None else None
        for d, agg in zip(state.domains, state.aggs):
            assert d.aggs[model] is agg, (name, d.path)  # each agg is its domain's for the node's key
        assert state.ranked == tuple(a for a in state.aggs if a.lists is not None), name
        out[name] = (state.spec, [(d.tree.name, d.path) for d in state.domains], [(a.domain.tree.name, a.domain.path) for a in state.ranked],
                     state.whole_used, state.cpu_used, state.ram_used, sorted(state.allocs), state.alt is None)
    for tree in (idx.flat, *idx.trees.values()):
        stack = [tree.root]
        while stack:
            d = stack.pop()
            stack.extend(d.children.values())
            out[(tree.name, d.path)] = [s.name for s in d.nodes]
    out["counts"] = ({m: {k: v for k, v in c.by_key.items() if v} for m, c in idx.labels.items() if c.total},
                     {m: c.total for m, c in idx.labels.items()}, {k: v for k, v in idx.excluded.items() if v},
                     idx.model_memory, idx.model_keys, idx.variants, idx.max_gpus)
    return out


@SETTINGS
@given(st.sampled_from([THREE, TWO]), st.lists(st.sampled_from([2, 4, 8]), min_size=1, max_size=6), OPS, st.sampled_from([1, 2, 256]),
       st.booleans())
def test_a_node_added_back_is_filed_as_a_fresh_attach_files_it(topologies, sizes, ops, limit, shares):
    nodes = {f"n{i}": node(f"n{i}", f"b{i % 2}", f"r{i % 3}", gpus=g, cpu="16", memory="64Gi", max_pods=8,
                           taints=[{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}])
             for i, g in enumerate(sizes)}
    names = sorted(nodes)
    idx, twin = PlacementIndex(topologies, MODELS), PlacementIndex(topologies, MODELS)
    idx.ghost_limit = limit
    twin.ghost_limit = 0
    pods: dict = {}
    gone: set = set()
    made = 0

    def both(kind, event, obj):
        getattr(idx, kind)(event, obj)
        getattr(twin, kind)(event, obj)
        assert not twin._ghosts
        assert len(idx._ghosts) <= limit
        assert idx.version == twin.version, (event, obj["metadata"]["name"])

    for n in nodes.values():
        both("apply_node", "ADDED", n)
    for op in ops:
        kind = op[0]
        if kind == "gone":
            name = names[op[1] % len(names)]
            if name in gone:
                gone.discard(name)
                nodes[name] = _changed(nodes[name], op[2])
                both("apply_node", "ADDED", nodes[name])
                want = read_node(nodes[name], idx.topologies, idx.gpu_models, DEFAULT_TOLERATED)
                got = idx.nodes[name].spec if name in idx.nodes else None
                assert got == (want if want.gpus > 0 or got is not None else None), op
            else:
                gone.add(name)
                both("apply_node", "DELETED", nodes[name])
        elif kind == "modify":
            name = names[op[1] % len(names)]
            nodes[name] = _changed(nodes[name], op[2])
            if name not in gone:
                both("apply_node", "MODIFIED", nodes[name])
        elif kind == "bind":
            if op[2] == "0.25" and not shares:
                continue
            where = names[op[1] % len(names)]
            if where in gone:
                continue  # the scheduler binds to nodes that exist (a GPU-less pod on a node not tracked is not counted)
            made += 1
            p = pod(f"x{made}", where, share="0.25", cpu="500m") if op[2] == "0.25" else pod(f"x{made}", where, gpus=int(op[2]), cpu="2", memory="1Gi")
            pods[p["metadata"]["name"]] = p
            both("apply_pod", "ADDED", p)
        elif kind == "unbind":
            if pods:
                both("apply_pod", "DELETED", pods.pop(sorted(pods)[op[1] % len(pods)]))
        else:
            probe = PROBES[op[1]]
            got, want = idx.query(probe), twin.query(probe)
            assert got == want, (op, got.reason, want.reason)
        assert _where(idx) == _where(twin), op
    assert _state(idx) == _state(twin)
    check_aggregates(idx)
    if not shares:  # a fresh load of the final objects: the same views and aggregates (whole devices: no placement choice)
        fresh = PlacementIndex(topologies, MODELS)
        fresh.load([nodes[n] for n in names if n not in gone], pods.values())
        assert {n: s.spec for n, s in idx.nodes.items() if s.spec is not None and s.spec.gpus > 0} == {
            n: s.spec for n, s in fresh.nodes.items() if s.spec is not None and s.spec.gpus > 0}
        assert _state(idx) == _state(fresh)
        for probe in PROBES:
            assert idx.query(probe).fits == fresh.query(probe).fits, probe


@SETTINGS
@given(st.lists(st.tuples(st.sampled_from([1, 2, 4, 8]), st.lists(st.sampled_from(["1", "2", "4", "0", "0.25"]), max_size=4)),
                min_size=1, max_size=5), st.integers(0, 4), st.booleans())
def test_a_node_joining_or_leaving_by_arithmetic_equals_the_general_join(shape, which, leave):
    from policy.placement.aggregates import join, join_whole, resource_part

    def build():
        nodes = [node(f"n{i}", f"b{i % 2}", f"r{i % 2}", gpus=g, cpu="16", memory="64Gi", max_pods=6) for i, (g, _p) in enumerate(shape)]
        pods = [pod(f"p{i}-{j}", f"n{i}", share="0.25", cpu="1") if s == "0.25" else pod(f"p{i}-{j}", f"n{i}", gpus=int(s), cpu="3", memory="2Gi")
                for i, (_g, ps) in enumerate(shape) for j, s in enumerate(ps)]
        idx = PlacementIndex(THREE, MODELS)
        for n in nodes:
            idx.apply_node("ADDED", n)
        for p in pods:
            idx.apply_pod("ADDED", p)
        idx.lag.settle()
        return idx

    a, b = build(), build()
    name = f"n{which % len(shape)}"
    sa, sb = a.nodes[name], b.nodes[name]
    if leave:  # counted now: it leaves
        done = join_whole(sa, sa.spec, -1)
        join(sb, sb.contribution(), resource_part(sb), -1)
    else:  # it leaves by the general path first in both, then joins back by each
        join(sa, sa.contribution(), resource_part(sa), -1)
        join(sb, sb.contribution(), resource_part(sb), -1)
        done = join_whole(sa, sa.spec, +1)
        join(sb, sb.contribution(), resource_part(sb), +1)
    assert done == (not sa.shared), "the arithmetic path declines a node with shared devices, and only it"
    if not done:
        return
    # (the general join also marks aggs whose capacities did not move — a full node: hist[0] alone — which files nothing)
    queued = {id(agg) for agg in a.lag.aggs}
    for tree in (a.flat, *a.trees.values()):
        _check_marks(tree, queued)  # every agg whose capacities moved is marked
    assert _state(a) == _state(b)
    if not leave:
        check_aggregates(a)  # counted again as its spec says: equal to a recount
