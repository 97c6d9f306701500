"""Property tests: the evaluator against a brute-force search on small clusters (≤ 12 nodes, 2–3 levels).

The brute force reads node eligibility and topology paths from the raw Node objects and
searches every domain of the level itself. Which device a bound shared pod sits on is
a modeling choice of the index (the API does not say), so the brute force starts from
the index's device states and re-derives everything else.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.policy.placement.placement_builders import BLOCK, H100, HOST, L4, MODELS, RACK, node, pod

from lang.quantity import to_int, to_milli
from policy.placement import GangRequest, PlacementIndex
from policy.placement.aggregates import SHAPES, resource_part, sums
from policy.placement.devices import FULL, Demand
from policy.placement.needs import NodeFilter, pod_needs
from policy.placement.query import _needs, fits, search
from policy.placement.room import room as _cap
from policy.subject.model import PodSet

EXAMPLES = int(os.environ.get("ALLOT_FUZZ_EXAMPLES", "60"))
SETTINGS = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
THREE = [("t", [("block", BLOCK), ("rack", RACK), ("host", HOST)])]
TWO = [("t", [("rack", RACK), ("host", HOST)])]


@st.composite
def clusters(draw):
    """(topologies, nodes, pods) of a small cluster with some usage and some excluded nodes."""
    topologies = draw(st.sampled_from([THREE, TWO]))
    count = draw(st.integers(1, 12))
    nodes, pods = [], []
    for i in range(count):
        gpus = draw(st.sampled_from([1, 2, 4, 8]))
        state = draw(st.sampled_from(["ok"] * 6 + ["cordoned", "notready", "tainted"]))
        nodes.append(node(
            f"n{i}", f"b{draw(st.integers(0, 1))}", f"r{draw(st.integers(0, 1))}", gpus=gpus,
            product=draw(st.sampled_from([H100, H100, L4])), cordoned=state == "cordoned", ready=state != "notready",
            taints=[{"key": "maint", "effect": "NoSchedule"}] if state == "tainted" else [],
        ))
        used = draw(st.integers(0, gpus))
        if used:
            pods.append(pod(f"w{i}", f"n{i}", gpus=used))
        if used < gpus:  # bound pods never overcommit a node: the scheduler and device plugin see to it
            taken = 0
            for j in range(draw(st.integers(0, 3))):
                share = draw(st.sampled_from([250, 500]))
                if taken + share <= FULL:  # all on one spare device at most
                    taken += share
                    pods.append(pod(f"s{i}-{j}", f"n{i}", share=str(share / 1000)))
    return topologies, nodes, pods


DEMANDS = st.one_of(
    st.builds(lambda k: (k * FULL, None), st.sampled_from([1, 2, 3, 4])),
    st.builds(lambda f: (f, f), st.sampled_from([250, 500])),
)


def _eligible(n: dict, tolerate: bool = False) -> bool:
    spec, status = n["spec"], n["status"]
    ready = any(c["type"] == "Ready" and c["status"] == "True" for c in status["conditions"])
    return ready and not spec.get("unschedulable") and (tolerate or not spec.get("taints"))


def _node_max(idx: PlacementIndex, n: dict, gpus: int, fraction, per_gpu, product, tolerate=False) -> int:
    """Pods of one demand a node takes, by adding them one at a time to any device that still has room."""
    labels = n["metadata"]["labels"]
    if not _eligible(n, tolerate) or (product and labels["nvidia.com/gpu.product"] != product):
        return 0
    state = idx.nodes[n["metadata"]["name"]]
    whole_free = state.free_whole()
    devices = [[FULL - f, s] for f, s, _m in state.partial_states()]
    placed = 0
    if fraction is None:
        k = gpus // FULL
        while whole_free >= k:
            whole_free -= k
            placed += 1
        return placed
    devices += [[0, 0] for _ in range(whole_free)]
    progress = True
    while progress:
        progress = False
        for dev in devices:
            if dev[0] + fraction <= FULL and (per_gpu is None or dev[1] < per_gpu):
                dev[0] += fraction
                dev[1] += 1
                placed += 1
                progress = True
                break
    return placed


def _domains(topologies, nodes, level: int) -> dict[tuple, list[dict]]:
    labels = [label for _lv, label in topologies[0][1]]
    out: dict[tuple, list[dict]] = {}
    for n in nodes:
        path = tuple(n["metadata"]["labels"][label] for label in labels[: level + 1])
        out.setdefault(path, []).append(n)
    return out


@SETTINGS
@given(clusters(), DEMANDS, st.integers(1, 12), st.data())
def test_fits_exactly_when_brute_force_finds_a_domain(cluster, demand, count, data):
    topologies, nodes, pods = cluster
    levels = topologies[0][1]
    level = data.draw(st.integers(0, len(levels) - 1))
    per_gpu = data.draw(st.sampled_from([None, 2])) if demand[1] else None
    product = data.draw(st.sampled_from([None, H100, L4]))
    tolerate = data.draw(st.booleans())  # the generator's taint is maint:NoSchedule
    tolerations = ({"key": "maint", "operator": "Exists"},) if tolerate else ()
    idx = PlacementIndex(topologies, MODELS)
    for n in nodes:
        idx.apply_node("ADDED", n)
    for p in pods:
        idx.apply_pod("ADDED", p)
    gpus, fraction = demand
    gang = GangRequest((PodSet("w", count, gpus, fraction=fraction, gpu_product=product),), required=levels[level][0],
                       per_gpu=per_gpu, tolerations=tolerations)
    got = idx.query(gang)

    by_name = {n["metadata"]["name"]: n for n in nodes}
    caps = {}
    for path, members in _domains(topologies, nodes, level).items():
        caps[path] = sum(_node_max(idx, n, gpus, fraction, per_gpu, product, tolerate) for n in members)
    fitting = {path: cap for path, cap in caps.items() if cap >= count}
    assert got.fits == bool(fitting), (got.reason, caps)
    if not got.fits:
        return
    chosen = next(path for path in fitting if path[-1] == got.domain)
    assert fitting[chosen] == min(fitting.values()), "the chosen domain is a tightest fit"
    assert sum(got.nodes.values()) == count
    for name, pods_here in got.nodes.items():
        n = by_name[name]
        assert _eligible(n, tolerate)
        assert tuple(n["metadata"]["labels"][label] for _lv, label in levels[: level + 1]) == chosen
        assert pods_here <= _node_max(idx, n, gpus, fraction, per_gpu, product, tolerate), "never more than the node has free"


@SETTINGS
@given(clusters(), st.integers(1, 6), st.integers(1, 6), st.sampled_from([1000, 2000]), st.data())
def test_mixed_gangs_are_sound(cluster, a, b, big, data):
    topologies, nodes, pods = cluster
    levels = topologies[0][1]
    level = data.draw(st.integers(0, len(levels) - 1))
    idx = PlacementIndex(topologies, MODELS)
    for n in nodes:
        idx.apply_node("ADDED", n)
    for p in pods:
        idx.apply_pod("ADDED", p)
    gang = GangRequest((PodSet("big", a, big), PodSet("small", b, 250, fraction=250)), required=levels[level][0])
    got = idx.query(gang)
    if not got.fits:
        return
    by_name = {n["metadata"]["name"]: n for n in nodes}
    paths = {tuple(by_name[name]["metadata"]["labels"][label] for _lv, label in levels[: level + 1]) for name in got.nodes}
    assert len(paths) == 1, "one domain of the required level"
    for name in got.nodes:
        state = idx.nodes[name]
        whole = sum(k for node_name, i, k in got.assignments if node_name == name and i == 0) * (big // FULL)
        shares = sum(k for node_name, i, k in got.assignments if node_name == name and i == 1)
        assert _eligible(by_name[name])
        assert whole <= state.free_whole()
        left_whole = state.free_whole() - whole
        room = left_whole * 4 + sum(f // 250 for f, _s, _m in state.partial_states())
        assert shares <= room, "never more than the node has free"


def check_aggregates(idx: PlacementIndex) -> None:
    """Every domain's aggregates and every level bucket equal a recomputation from the node states."""
    for state, counted in idx._rekeys.items():  # a key move waiting: still counted under the key it had
        assert state.spec.model != counted.model and state.spec.paths == counted.paths, state.name
        assert state.aggs[0] is idx.flat.root.aggs[counted.model], state.name
    idx.settle_rekeys()
    lag = idx.lag
    queued = {id(agg) for agg in lag.aggs}
    assert len(queued) == len(lag.aggs), "an agg is queued once"
    for tree in (idx.flat, *idx.trees.values()):
        _check_marks(tree, queued)
    _check_free_counts(idx, resource_part)  # not deferred: exact before any settling
    _check_node_counts(idx)
    lag.settle()
    assert not lag.aggs
    for tree in (idx.flat, *idx.trees.values()):
        stack = [tree.root]
        while stack:
            d = stack.pop()
            stack.extend(d.children.values())
            under, todo = [], [d]
            while todo:
                x = todo.pop()
                under.extend(x.nodes)
                todo.extend(x.children.values())
            want: dict[str, tuple[dict, dict]] = {}
            for state in under:
                c = state.contribution()
                if c is None:
                    continue
                hist, partial = want.setdefault(state.spec.model, ({}, {}))
                hist[c[0]] = hist.get(c[0], 0) + 1
                for s in c[1]:
                    partial[s] = partial.get(s, 0) + 1
            for model in set(want) | set(d.aggs):
                agg = d.aggs.get(model)
                hist, partial = want.get(model, ({}, {}))
                got_hist = {h: c for h, c in enumerate(agg.hist) if c} if agg else {}
                assert got_hist == hist, (d.path, model)
                # the node count is derived from the histogram, and hot readers test `agg.vec` for "no node counted"
                assert (agg.nodes if agg else 0) == sum(hist.values()), (d.path, model)
                assert agg is None or bool(agg.vec) == bool(hist), (d.path, model)
                assert (agg.partial if agg else {}) == partial, (d.path, model)
                if agg and sums(agg) is not None:
                    want_sums = [0, 0, 0]
                    for state in under:
                        if state.spec is not None and state.spec.model == model and state.contribution() is not None:
                            for r, v in enumerate(resource_part(state) or (0, 0, 0)):
                                want_sums[r] += v
                    assert list(sums(agg)) == want_sums, (d.path, model)
                if agg:
                    assert agg.caps[: len(SHAPES)] == [sum((h // k) * c for h, c in hist.items()) for k in SHAPES]
                    if agg.lists is not None:
                        for i, cap in enumerate(agg.caps[: len(SHAPES)]):
                            buckets = agg.lists[i]
                            if buckets is None:  # per-node level: only the free-devices bucket
                                continue
                            holders = [c for c, bucket in buckets.by_cap.items() if agg in bucket]
                            assert holders == ([cap] if cap else []), (d.path, model, i)
                            assert buckets.order == sorted(c for c, b in buckets.by_cap.items() if b)


def _check_node_counts(idx: PlacementIndex) -> None:
    """The label value counts and the excluded counts equal a recount over the tracked nodes' specs: per model over all
    its nodes, tainted or not, and per tainted model key over that key's nodes."""
    labels: dict = {}
    totals: dict = {}
    excluded: dict = {}
    for state in idx.nodes.values():
        spec = state.spec
        if spec is None or spec.gpus <= 0:
            continue
        for key in ((idx.variants[spec.model][0], spec.model) if spec.taints else (spec.model,)):
            totals[key] = totals.get(key, 0) + 1
            by_key = labels.setdefault(key, {})
            for k, v in spec.labels.items():
                values = by_key.setdefault(k, {})
                values[str(v)] = values.get(str(v), 0) + 1
        if not spec.eligible:
            why = (spec.why_not or "excluded").split(" ", 1)[0]
            excluded[why] = excluded.get(why, 0) + 1
    assert {m: {k: v for k, v in c.by_key.items() if v} for m, c in idx.labels.items() if c.total} == labels
    assert {m: c.total for m, c in idx.labels.items() if c.total} == totals
    assert {k: v for k, v in idx.excluded.items() if v} == excluded
    for key in idx.model_keys:  # what a gang without tolerations asks of the counts: its nodes without blocking taints
        untainted = [s.spec for s in idx.nodes.values() if s.spec is not None and s.spec.gpus > 0 and s.spec.model == key]
        for flt in UNIVERSAL_PROBES:
            want = all(flt.matches(spec.name, spec.labels) for spec in untainted)
            assert idx.passes_all(flt, (key,)) == want, (key, flt)


UNIVERSAL_PROBES = (
    NodeFilter((("pool", "a"),)),
    NodeFilter(terms=(((("pool", "In", ("a", "b")),), ()),)),
    NodeFilter(terms=(((("pool", "NotIn", ("b",)),), ()),)),
    NodeFilter(terms=(((("pool", "Exists", ()),), ()),)),
    NodeFilter(terms=(((("pool", "DoesNotExist", ()),), ()),)),
    NodeFilter(terms=(((("nvidia.com/gpu.count", "Gt", ("3",)),), ()),)),
)


def _check_free_counts(idx: PlacementIndex, amounts) -> None:
    """The flat root's counts of free (cpu, memory, slots) by value equal a count over its nodes of `amounts(node)`."""
    for model, agg in idx.flat.root.aggs.items():
        want = [{} for _ in range(3)]
        for state in idx.flat.root.nodes:
            if state.spec is not None and state.spec.model == model and state.contribution() is not None:
                for r, v in enumerate(amounts(state) or ()):
                    want[r][v] = want[r].get(v, 0) + 1
        assert agg.res == want, model


def _check_marks(tree, queued: set) -> None:
    """Before settling: each agg is filed at its `placed` capacities, and one whose capacity moved is queued."""
    stack = [tree.root]
    while stack:
        d = stack.pop()
        stack.extend(d.children.values())
        for model, agg in d.aggs.items():
            if agg.lists is None:
                continue
            for i, cap in enumerate(agg.caps):
                buckets = agg.lists[i]
                if buckets is None:
                    continue
                holders = [c for c, bucket in buckets.by_cap.items() if agg in bucket]
                assert holders == ([agg.filed(i)] if agg.filed(i) else []), (d.path, model, i)
                assert agg.marked == (id(agg) in queued), (d.path, model)
                assert agg.marked or agg.filed(i) == cap, (d.path, model, i)


OPS = st.lists(
    st.one_of(
        st.tuples(st.just("bind"), st.integers(0, 11), st.sampled_from(["1", "2", "0.25"])),
        st.tuples(st.just("unbind"), st.integers(0, 30)),
        st.tuples(st.just("reserve"), st.sampled_from(["g1", "g2", "g3"]), st.integers(1, 6), st.sampled_from([None, "rack", "host"])),
        st.tuples(st.just("bindres"), st.sampled_from(["g1", "g2", "g3"])),
        st.tuples(st.just("release"), st.sampled_from(["g1", "g2", "g3"])),
        st.tuples(st.just("expire"), st.integers(0, 20)),
        st.tuples(st.just("cordon"), st.integers(0, 11), st.booleans()),
    ),
    max_size=25,
)


PROBES = (
    GangRequest((PodSet("p", 2, 1000),), topology="t", required="rack"),
    GangRequest((PodSet("p", 3, 2000),), topology="t", required="block"),
    GangRequest((PodSet("p", 4, 250, fraction=250),), topology="t", required="host"),
)


def _from_scratch(topologies, nodes: dict, pods: dict, idx: PlacementIndex) -> PlacementIndex:
    fresh = PlacementIndex(topologies, MODELS)
    fresh.load(nodes.values(), pods.values())
    for resv in idx.reservations.by_id.values():
        for key, (name, demand) in resv.slots.items():
            fresh._mutate(fresh.nodes[name], lambda: fresh.nodes[name].add(key, demand))
    return fresh


@SETTINGS
@given(clusters(), OPS)
def test_reserve_bind_release_expire_match_recomputation(cluster, ops):
    topologies, node_list, pod_list = cluster
    topologies = THREE
    nodes = {n["metadata"]["name"]: n for n in node_list}
    pods = {p["metadata"]["name"]: p for p in pod_list}
    idx = PlacementIndex(topologies, MODELS)
    for n in nodes.values():
        idx.apply_node("ADDED", n)
    for p in pods.values():
        idx.apply_pod("ADDED", p)
    names = sorted(nodes)
    made = 0
    for op in ops:
        kind = op[0]
        if kind == "bind":
            where = names[op[1] % len(names)]
            ask = Demand(milli=250) if op[2] == "0.25" else Demand(whole=int(op[2]))
            state = idx.nodes[where]
            room = state.free_whole() >= ask.whole if ask.whole else state.free_whole() > 0 or any(f >= 250 for f, _s, _m in state.partial_states())
            if not room:
                continue  # the scheduler binds only where the pod fits
            made += 1
            name = f"x{made}"
            p = pod(name, where, share=op[2], cpu="1") if op[2] == "0.25" else pod(name, where, gpus=int(op[2]), cpu="2", memory="1Gi")
            pods[name] = p
            idx.apply_pod("ADDED", p)
        elif kind == "unbind" and pods:
            name = sorted(pods)[op[1] % len(pods)]
            idx.apply_pod("DELETED", pods.pop(name))
        elif kind == "reserve":
            result = idx.query(GangRequest((PodSet("w", op[2], 1000),), topology="t", required=op[3]))
            if result.fits:
                idx.reserve(op[1], result, expires_at=float(op[2] * 3))
        elif kind == "bindres":
            resv = idx.reservations.get(op[1])
            if resv is not None:
                made += 1
                where = next(iter(resv.slots.values()))[0]
                p = pod(f"x{made}", where, gpus=1, annotations={"allot.dev/reservation": op[1]})
                pods[p["metadata"]["name"]] = p
                idx.apply_pod("ADDED", p)
        elif kind == "release":
            idx.release(op[1])
        elif kind == "expire":
            idx.expire(float(op[1]))
        elif kind == "cordon":
            name = names[op[1] % len(names)]
            n = dict(nodes[name], spec=dict(nodes[name]["spec"], unschedulable=op[2]))
            nodes[name] = n
            idx.apply_node("MODIFIED", n)
        check_aggregates(idx)
        for probe in PROBES:  # answers re-used per index version equal a fresh search after every op
            assert idx.query(probe) == search(idx, probe), (op, probe)
            assert idx.fits(probe) is fits(idx, probe), (op, probe)
    fresh = _from_scratch(topologies, nodes, pods, idx)
    check_aggregates(fresh)
    for name in names:
        assert idx.free_milli(name) == fresh.free_milli(name), name
        assert idx.nodes[name].whole_used == fresh.nodes[name].whole_used
        got_n, want_n = idx.nodes[name], fresh.nodes[name]
        assert (got_n.cpu_used, got_n.ram_used, len(got_n.allocs)) == (want_n.cpu_used, want_n.ram_used, len(want_n.allocs)), name


# ---- cpu, memory, pod slots and node filters: the index against a brute-force scan ----------------------------

REQ = "requiredDuringSchedulingIgnoredDuringExecution"
INF = 1 << 62  # unstated allocatable (an int: float inf // n is nan)


@st.composite
def resource_clusters(draw):
    """(topologies, nodes, pods): nodes with cpu/memory/pod allocatable (sometimes unstated) and pool/tier labels;
    bound pods requesting cpu and memory, some asking no GPU at all."""
    topologies = draw(st.sampled_from([THREE, TWO]))
    nodes, pods = [], []
    for i in range(draw(st.integers(1, 10))):
        gpus = draw(st.sampled_from([1, 2, 4, 8]))
        state = draw(st.sampled_from(["ok"] * 6 + ["cordoned", "tainted"]))
        labels = {k: v for k, v in (("pool", draw(st.sampled_from(["a", "b", None]))), ("tier", draw(st.sampled_from(["1", "5", "10", "x", None]))))
                  if v is not None}
        nodes.append(node(
            f"n{i}", f"b{draw(st.integers(0, 1))}", f"r{draw(st.integers(0, 1))}", gpus=gpus,
            product=draw(st.sampled_from([H100, H100, L4])), cordoned=state == "cordoned",
            taints=[{"key": "maint", "effect": "NoSchedule"}] if state == "tainted" else [], labels=labels,
            cpu=draw(st.sampled_from([None, "8", "16", "64", "7500m"])), memory=draw(st.sampled_from([None, "64Gi", "256Gi"])),
            max_pods=draw(st.sampled_from([None, 1, 2, 3, 110])),
        ))
        used = draw(st.integers(0, gpus))
        if used:
            pods.append(pod(f"w{i}", f"n{i}", gpus=used, cpu=draw(st.sampled_from([None, "2", "4500m"])), memory=draw(st.sampled_from([None, "8Gi"]))))
        for j in range(draw(st.integers(0, 2))):
            pods.append(pod(f"c{i}-{j}", f"n{i}", gpus=0, cpu=draw(st.sampled_from([None, "1", "250m"])), memory=draw(st.sampled_from([None, "1Gi"]))))
    return topologies, nodes, pods


EXPRESSIONS = st.builds(
    lambda key, op, values: {"key": key, "operator": op, **({"values": values} if op not in ("Exists", "DoesNotExist") else {})},
    st.sampled_from(["pool", "tier", "zone"]), st.sampled_from(["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"]),
    st.lists(st.sampled_from(["a", "b", "1", "5", "3"]), min_size=1, max_size=2),
)
FIELDS = st.builds(lambda op, names: {"key": "metadata.name", "operator": op, "values": names},
                   st.sampled_from(["In", "NotIn"]), st.lists(st.sampled_from(["n0", "n1", "n2"]), min_size=1, max_size=2))
TERMS = st.lists(st.fixed_dictionaries({}, optional={"matchExpressions": st.lists(EXPRESSIONS, max_size=2),
                                                     "matchFields": st.lists(FIELDS, max_size=1)}), min_size=1, max_size=2)
FILTERS = st.fixed_dictionaries({}, optional={
    "nodeSelector": st.dictionaries(st.sampled_from(["pool", "tier"]), st.sampled_from(["a", "b", "5"]), max_size=1),
    "affinity": st.builds(lambda terms: {"nodeAffinity": {REQ: {"nodeSelectorTerms": terms}}}, TERMS),
})


def _bf_requirement(e: dict, have) -> bool:
    op, values = e["operator"], e.get("values", [])
    if op == "In":
        return have is not None and have in values
    if op == "NotIn":
        return have is None or have not in values
    if op == "Exists":
        return have is not None
    if op == "DoesNotExist":
        return have is None
    number = have is not None and have.lstrip("-").isdigit() and len(values) == 1 and values[0].lstrip("-").isdigit()
    if not number:
        return False
    return int(have) > int(values[0]) if op == "Gt" else int(have) < int(values[0])


def _bf_matches(n: dict, spec: dict) -> bool:
    """nodeSelector and required node affinity, read straight from the Kubernetes docs."""
    labels, name = n["metadata"]["labels"], n["metadata"]["name"]
    if any(labels.get(k) != v for k, v in (spec.get("nodeSelector") or {}).items()):
        return False
    required = spec.get("affinity", {}).get("nodeAffinity", {}).get(REQ)
    if required is None:
        return True
    for term in required["nodeSelectorTerms"]:
        exprs, fields = term.get("matchExpressions", []), term.get("matchFields", [])
        if (exprs or fields) and all(_bf_requirement(e, labels.get(e["key"])) for e in exprs) \
                and all(_bf_requirement(f, name) for f in fields):
            return True
    return False


def _requested(p: dict, resource: str, milli: bool) -> int:
    total = 0
    for c in p["spec"]["containers"]:
        raw = c["resources"].get("requests", {}).get(resource)
        if raw is not None:
            total += to_milli(raw) if milli else to_int(raw)
    return total


def _bf_free(n: dict, pods: list[dict]) -> tuple[float, float, float]:
    """(cpu milli, memory bytes, pod slots) free on a node: allocatable minus the bound pods' requests (inf when unstated)."""
    alloc = n["status"]["allocatable"]
    here = [p for p in pods if p["spec"].get("nodeName") == n["metadata"]["name"]]
    cpu = to_milli(alloc["cpu"]) - sum(_requested(p, "cpu", True) for p in here) if "cpu" in alloc else INF
    ram = to_int(alloc["memory"]) - sum(_requested(p, "memory", False) for p in here) if "memory" in alloc else INF
    slots = int(alloc["pods"]) - len(here) if "pods" in alloc else INF
    return cpu, ram, slots


@SETTINGS
@given(resource_clusters(), DEMANDS, st.integers(1, 8), st.sampled_from([None, "1", "3", "4500m", "20"]),
       st.sampled_from([None, "4Gi", "100Gi"]), FILTERS, st.data())
def test_counting_cpu_memory_slots_and_selectors_matches_brute_force(cluster, demand, count, cpu, memory, flt, data):
    topologies, nodes, pods = cluster
    levels = topologies[0][1]
    level = data.draw(st.integers(0, len(levels) - 1))
    per_gpu = data.draw(st.sampled_from([None, 2])) if demand[1] else None
    product = data.draw(st.sampled_from([None, H100, L4]))
    tolerate = data.draw(st.booleans())
    idx = PlacementIndex(topologies, MODELS)
    for n in nodes:
        idx.apply_node("ADDED", n)
    for p in pods:
        idx.apply_pod("ADDED", p)
    spec = {"containers": [{"name": "c", "resources": {"requests": {k: v for k, v in (("cpu", cpu), ("memory", memory)) if v}}}], **flt}
    needs = pod_needs(spec)
    gpus, fraction = demand
    gang = GangRequest((PodSet("w", count, gpus, fraction=fraction, gpu_product=product, needs=needs),), required=levels[level][0],
                       per_gpu=per_gpu, tolerations=({"key": "maint", "operator": "Exists"},) if tolerate else ())
    got = idx.query(gang)
    want_cpu = to_milli(cpu) if cpu else 0
    want_ram = to_int(memory) if memory else 0

    def brute(n: dict) -> int:
        cap = _node_max(idx, n, gpus, fraction, per_gpu, product, tolerate)
        if not cap or not _bf_matches(n, spec):
            return 0
        free_cpu, free_ram, slots = _bf_free(n, pods)
        for free, asked in ((free_cpu, want_cpu), (free_ram, want_ram), (slots, 1)):
            if asked:
                cap = min(cap, max(0, free // asked))
        return int(cap)

    caps = {path: sum(brute(n) for n in members) for path, members in _domains(topologies, nodes, level).items()}
    asked = _needs(idx, gang)
    if asked:  # every domain's exact capacity, as the query counts it, equals the brute force
        tree = idx.trees["t"]
        for path, cap in caps.items():
            d = tree.root
            for value in path:
                d = d.children[value]
            assert _cap(idx, d, asked[0][1], per_gpu) == cap, (path, cap)
    fitting = {path: cap for path, cap in caps.items() if cap >= count}
    assert got.fits == bool(fitting), (got.reason, caps)
    assert idx.fits(gang) is got.fits
    if not got.fits:
        return
    chosen = next(path for path in fitting if path[-1] == got.domain)
    assert fitting[chosen] == min(fitting.values()), "the chosen domain is a tightest fit"
    assert sum(got.nodes.values()) == count
    by_name = {n["metadata"]["name"]: n for n in nodes}
    for name, pods_here in got.nodes.items():
        assert pods_here <= brute(by_name[name]), "never more than the node has free, by every resource"
