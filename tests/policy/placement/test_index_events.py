"""The index follows node and pod events exactly: ordering, moves, deletions, snapshot subscription."""

from __future__ import annotations

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.policy.placement.placement_builders import BLOCK, FABRIC, HOST, MODELS, RACK, gang, index, node, pod
from test_properties import check_aggregates

from policy.cluster.snapshot import ClusterSnapshot
from policy.placement import Demand, GangRequest, PlacementIndex


def test_pod_before_its_node_is_counted_when_the_node_arrives():
    idx = index(pods=[pod("p", "a1", gpus=3)])
    idx.apply_node("ADDED", node("a1"))
    assert idx.free_gpus("a1") == 1
    check_aggregates(idx)


def test_relabelled_node_moves_between_racks():
    idx = index([node("a1", rack="r1"), node("a2", rack="r2")])
    idx.apply_node("MODIFIED", node("a1", rack="r2"))
    got = idx.query(gang(8, required="rack"))
    assert got.fits and got.domain == "b1-r2"
    check_aggregates(idx)


def test_deleted_node_keeps_its_pods_until_they_go():
    idx = index([node("a1")], [pod("p", "a1", gpus=2)])
    idx.apply_node("DELETED", node("a1"))
    assert not idx.query(gang(1, required="host")).fits
    idx.apply_node("ADDED", node("a1"))
    assert idx.free_gpus("a1") == 2
    idx.apply_pod("DELETED", pod("p", "a1", gpus=2))
    assert idx.free_gpus("a1") == 4
    check_aggregates(idx)


def test_status_heartbeat_changes_nothing_and_pending_to_bound_counts_once():
    idx = index([node("a1")])
    idx.apply_pod("ADDED", pod("p", None, gpus=2, phase="Pending"))
    assert idx.free_gpus("a1") == 4
    idx.apply_pod("MODIFIED", pod("p", "a1", gpus=2))
    idx.apply_pod("MODIFIED", pod("p", "a1", gpus=2))
    assert idx.free_gpus("a1") == 2
    idx.apply_pod("MODIFIED", pod("p", "a1", gpus=2, phase="Succeeded"))
    assert idx.free_gpus("a1") == 4


def test_cordon_and_uncordon_round_trip():
    idx = index([node("a1"), node("a2")], [pod("p", "a1", gpus=1)])
    idx.apply_node("MODIFIED", node("a1", cordoned=True))
    assert idx.excluded == {"cordoned": 1}
    assert idx.query(gang(4, required="host")).nodes == {"a2": 4}
    idx.apply_node("MODIFIED", node("a1"))
    assert idx.excluded == {"cordoned": 0}
    assert idx.free_gpus("a1") == 3
    check_aggregates(idx)


def test_bulk_load_equals_event_by_event():
    nodes = [node(f"n{i}", f"b{i % 2}", f"r{i % 3}", gpus=4 + 4 * (i % 2)) for i in range(10)]
    pods = [pod(f"p{i}", f"n{i}", gpus=i % 4) for i in range(1, 10)] + [pod("s", "n0", share="0.5")]
    by_events = index(nodes, pods)
    bulk = PlacementIndex(FABRIC, MODELS)
    bulk.load(nodes, pods)
    check_aggregates(bulk)
    for name in by_events.nodes:
        assert bulk.free_milli(name) == by_events.free_milli(name)
    labels = {"block": BLOCK, "rack": RACK, "host": HOST}

    def room(idx, level, value):
        return sum(idx.free_gpus(n["metadata"]["name"]) for n in nodes if n["metadata"]["labels"][labels[level]] == value)

    for level in ("block", "rack", "host"):
        for size in (1, 5, 9):
            a, b = by_events.query(gang(size, required=level)), bulk.query(gang(size, required=level))
            assert a.fits == b.fits
            if a.fits:  # equally tight; which of equals is taken depends on history (docs/placement.md)
                assert room(by_events, level, a.domain) == room(bulk, level, b.domain)


def test_load_refuses_a_non_empty_index():
    idx = index([node("a1")])
    with pytest.raises(ValueError):
        idx.load([], [])


def test_reserve_refuses_an_unfit_result():
    idx = index([node("a1")])
    with pytest.raises(ValueError):
        idx.reserve("g", idx.query(gang(5, required="host")), 10.0)


def test_attached_to_a_snapshot_it_follows_its_events():
    snapshot = ClusterSnapshot.from_objects([node("a1"), node("a2", rack="r2")])
    idx = PlacementIndex.from_snapshot(snapshot, FABRIC, MODELS)
    idx.attach(snapshot)
    snapshot.apply("ADDED", pod("p", "a1", gpus=4))
    assert idx.free_gpus("a1") == 0
    snapshot.apply("MODIFIED", node("a2", rack="r2", cordoned=True))
    assert not idx.query(gang(1, required="host")).fits
    snapshot.apply("DELETED", pod("p", "a1", gpus=4))
    assert idx.free_gpus("a1") == 4
    check_aggregates(idx)


def test_fixture_cluster_loads_through_the_snapshot():
    from webhook.clusterfile import read_cluster_file

    snapshot = read_cluster_file("tests/fixtures/cluster/small.yaml")
    idx = PlacementIndex.from_snapshot(snapshot, FABRIC, MODELS)
    check_aggregates(idx)
    assert idx.nodes, "the fixture has GPU nodes"
    used = sum(8 - idx.free_gpus(n) for n in idx.nodes if idx.nodes[n].gpus == 8 and idx.nodes[n].contribution())
    assert used > 0, "its running pods hold GPUs"


def test_flat_view_over_a_wide_domain_fills_first_come_and_stays_exact():
    from policy.placement.index import FLAT
    from policy.placement.query import WIDE_DOMAIN

    nodes = [node(f"n{i:03d}", gpus=1) for i in range(WIDE_DOMAIN + 44)]
    pods = [pod(f"p{i}", f"n{i:03d}", gpus=1) for i in range(0, WIDE_DOMAIN + 44, 2)]  # every other node full
    idx = index(nodes, pods)
    got = idx.query(gang(5, topology=FLAT))
    assert got.fits and sum(got.nodes.values()) == 5
    assert all(idx.free_gpus(n) >= k for n, k in got.nodes.items())
    assert not idx.query(gang(151, topology=FLAT)).fits  # 150 free in all


def test_buckets_keep_sorted_non_empty_capacities():
    from policy.placement.aggregates import Buckets

    b = Buckets()
    b.move("x", 0, 340_000)  # a zone-wide capacity costs no memory below it
    b.move("y", 0, 5)
    b.move("z", 0, 5)
    assert b.order == [5, 340_000] and b.at_least(6) == "x" and b.at_least(1) == "y"
    b.move("y", 5, 0)
    assert b.at_least(1) == "z" and b.largest() == "x"
    b.move("z", 5, 0)
    b.move("x", 340_000, 7)
    assert b.order == [7] and b.by_cap == {7: {"x": None}} and b.at_least(8) is None


JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 10) | st.text(max_size=6) | st.sampled_from(["4", "True", "Ready", "NoSchedule"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(
        ["metadata", "spec", "status", "labels", "name", "uid", "nodeName", "allocatable", "nvidia.com/gpu", "conditions",
         "type", "status", "taints", "effect", "key", "unschedulable", "containers", "resources", "limits", "phase",
         "annotations", "kind", "nvidia.com/gpu.product", "nvidia.com/gpu.memory"]), inner, max_size=4),
    max_leaves=12,
)


@settings(max_examples=int(os.environ.get("ALLOT_FUZZ_EXAMPLES", "60")), deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["Node", "Pod"]), st.sampled_from(["ADDED", "MODIFIED", "DELETED"]), JSONISH), max_size=6))
def test_odd_objects_never_raise(events):
    idx = index([node("a1")])
    for kind, event, body in events:
        obj = dict(body) if isinstance(body, dict) else {"spec": body}
        obj["kind"] = kind
        obj.setdefault("metadata", {"name": "x"})
        if not isinstance(obj["metadata"], dict):
            obj["metadata"] = {"name": "x"}
        idx.on_event(event, None, obj)
    check_aggregates(idx)
    idx.query(gang(1, required="rack"))


def test_a_filter_every_untainted_node_passes_is_universal_for_gangs_without_tolerations():
    from policy.placement.needs import NodeFilter

    pool_a, pool_b = NodeFilter((("pool", "a"),)), NodeFilter((("pool", "b"),))
    dedicated = [{"key": "dedicated", "value": "b", "effect": "NoSchedule"}]
    a1, a2 = node("a1", labels={"pool": "a"}), node("a2", labels={"pool": "a"})
    b1 = node("b1", labels={"pool": "b"}, taints=dedicated)
    idx = index([a1, a2, b1])
    (variant,) = idx.variants
    assert idx.passes_all(pool_a, ("h100",)) and not idx.passes_all(pool_b, ("h100",))
    assert idx.passes_all(pool_b, (variant,)) and not idx.passes_all(pool_a, ("h100", variant))
    idx.apply_node("MODIFIED", node("b1", labels={"pool": "b"}))  # its taint gone: an untainted node of pool b
    assert not idx.passes_all(pool_a, ("h100",))
    idx.apply_node("MODIFIED", b1)  # tainted again
    idx.apply_node("MODIFIED", node("a2", labels={"pool": "b"}))  # an untainted node of pool b
    assert not idx.passes_all(pool_a, ("h100",)) and idx.passes_all(pool_b, (variant,))
    check_aggregates(idx)


def test_a_node_stating_more_gpus_than_any_node_has_is_not_tracked():
    huge = node("huge")
    huge["status"]["allocatable"]["nvidia.com/gpu"] = "100Gi"  # malformed: 107 billion devices
    idx = index([node("a1"), huge])
    assert "huge" not in idx.nodes and idx.free_gpus("a1") == 4
    idx.apply_node("MODIFIED", node("huge"))
    assert idx.free_gpus("huge") == 4
    idx.apply_node("MODIFIED", huge)  # a tracked node whose count turns malformed: it takes no pod
    assert idx.free_gpus("huge") == 0 and idx.capacity("huge", Demand(whole=1)) == 0
    check_aggregates(idx)


MAINT = [{"key": "maint", "value": "true", "effect": "NoSchedule"}]


def _tolerating(count, required="host"):
    from policy.placement.capacity import Toleration

    g = gang(count, required=required)
    return GangRequest(g.pod_sets, topology="fabric", required=required, tolerations=(Toleration({"key": "maint", "operator": "Exists"}),))


@pytest.mark.parametrize("between", ["nothing", "bind", "query", "cordon", "deleted", "check"])
def test_a_taint_waits_to_move_its_node_and_reads_as_moved(between):
    nodes = [node(f"n{i}", "b1", f"r{i % 2}", gpus=4) for i in range(4)]
    idx, twin = index(nodes), index(nodes)
    twin.lag.limit = 0  # moves every key at once
    tainted = node("n1", "b1", "r1", gpus=4, taints=MAINT)
    for i in (idx, twin):
        i.apply_node("MODIFIED", tainted)
    assert idx._rekeys and not twin._rekeys
    if between == "bind":
        for i in (idx, twin):
            i.apply_pod("ADDED", pod("p", "n1", gpus=3))
    elif between == "query":
        assert idx.query(_tolerating(16, "block")).fits and not idx._rekeys  # read: the move is done first
        assert idx.query(gang(13, required="block")).fits is False  # 12 untainted GPUs left
    elif between == "cordon":
        for i in (idx, twin):
            i.apply_node("MODIFIED", node("n1", "b1", "r1", gpus=4, taints=MAINT, cordoned=True))
    elif between == "deleted":
        for i in (idx, twin):
            i.apply_node("DELETED", tainted)
    elif between == "check":
        check_aggregates(idx)  # settles, after checking the node is still counted under its untainted key
    for i in (idx, twin):
        i.apply_node("MODIFIED" if between != "deleted" else "ADDED", nodes[1])  # the taint undone
    for probe in (gang(16, required="block"), gang(13, required="block"), _tolerating(16, "block"), _tolerating(1)):
        assert idx.query(probe) == twin.query(probe), (between, probe)
    check_aggregates(idx)
    check_aggregates(twin)


def test_taints_beyond_the_limit_move_the_oldest_at_once():
    from policy.placement.index import REKEY_LIMIT

    nodes = [node(f"n{i:02d}", "b1", f"r{i % 4}", gpus=2) for i in range(REKEY_LIMIT + 3)]
    idx = index(nodes)
    for n in nodes:
        idx.apply_node("MODIFIED", node(n["metadata"]["name"], "b1", n["metadata"]["labels"][RACK][3:], gpus=2, taints=MAINT))
        assert len(idx._rekeys) <= REKEY_LIMIT
    assert [s.name for s in idx._rekeys] == [f"n{i:02d}" for i in range(3, REKEY_LIMIT + 3)]  # the oldest moved
    assert idx.query(gang(1)).fits is False and idx.query(_tolerating(2 * len(nodes), "block")).fits and not idx._rekeys
    check_aggregates(idx)
