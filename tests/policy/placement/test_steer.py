"""Fragmentation steering: the live mix, node ranking, and the webhook's preferred-affinity patch."""

import lang
from policy.cluster.snapshot import ClusterSnapshot
from policy.engine import Engine
from policy.placement import PlacementIndex
from policy.placement.affinity import preferred_patch
from policy.placement.devices import Demand
from policy.placement.steer import Steering
from policy.testing.patch import apply_patch


def node(name, gpus):
    alloc = {"cpu": "64", "memory": "256Gi", "pods": "110", "nvidia.com/gpu": str(gpus)}
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {}},
            "status": {"allocatable": alloc, "capacity": dict(alloc), "conditions": [{"type": "Ready", "status": "True"}]}}


def pod(name, where, gpus, cores=None, **spec):
    limits = {"nvidia.com/gpu": str(gpus)} if gpus else {}
    if cores:
        limits["nvidia.com/gpucores"] = str(cores)
    p = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "a", "uid": name},
         "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}, "limits": limits}}], **spec}}
    if where:
        p["spec"]["nodeName"] = where
        p["status"] = {"phase": "Running"}
    return p


def cluster():
    return ClusterSnapshot.from_objects([node("n1", 8), node("n2", 8), node("n3", 8), pod("p1", "n1", 1, 50),
                                         pod("p2", "n2", 4), pod("p3", "n3", 1, 50), pod("p4", "n3", 1)])


def review(obj):
    return {"uid": "1", "kind": {"group": "", "version": "v1", "kind": "Pod"}, "resource": {"group": "", "version": "v1", "resource": "pods"},
            "operation": "CREATE", "namespace": "a", "name": obj["metadata"]["name"], "userInfo": {"username": "u"}, "object": obj}


def test_a_half_share_goes_where_a_half_device_is_free():
    got = Steering(PlacementIndex.from_snapshot(cluster())).steer(Demand(milli=500, cpu=1000))
    assert got.pods == 4 and got.feasible == 3
    assert {c.node for c in got.choices[:2]} == {"n1", "n3"}  # each has a device half used: the share fills it
    assert [c.weight for c in got.choices] == [100, 50, 25]
    first = got.choices[0]
    assert (first.before, first.after) == (250, 0) and got.choices[2].node == "n2" and got.choices[0].score > got.choices[2].score


def test_preferred_patch_merges_with_the_pods_own_terms():
    own = {"weight": 7, "preference": {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}}
    p = pod("x", None, 1, affinity={"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [own]}})
    out = apply_patch(p, preferred_patch(p, [("n1", 100), ("n2", 50)]))
    terms = out["spec"]["affinity"]["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert terms[0] == own and [t["weight"] for t in terms] == [7, 100, 50]
    assert terms[1]["preference"] == {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}
    assert "requiredDuringSchedulingIgnoredDuringExecution" not in out["spec"]["affinity"]["nodeAffinity"]


def _decide(policy, obj, snapshot=None):
    ps, diags = lang.compile_policies([("s.policy", policy)])
    assert diags == []
    return Engine(ps).decide(review(obj), snapshot or cluster(), 0.0, mutate=True)


def test_the_webhook_steers_a_share_and_explains_it():
    d = _decide("steer small { by fragmentation\n nodes 2 }\n", pod("x", None, 1, 50))
    assert d.allowed
    (r,) = d.reasons
    assert (r.code, r.mode) == ("PlacementSteered", "audit") and r.data["nodes"][0] in ("n1", "n3") and len(r.data["nodes"]) == 2
    assert "FGD score" in r.message and "fragmentation 250 -> 0 milli-GPU" in r.message
    out = apply_patch(pod("x", None, 1, 50), d.patch)
    terms = out["spec"]["affinity"]["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert [t["weight"] for t in terms] == [100, 50]


def test_audit_mode_patches_nothing_and_gangs_are_left_alone():
    d = _decide("steer s {\n by fragmentation\n mode audit\n}\n", pod("x", None, 1, 50))
    assert d.patch == () and [r.code for r in d.reasons] == ["SteerWouldPrefer"]
    big = _decide("steer s { by fragmentation }\n", pod("y", None, 8))
    assert big.patch == () and big.reasons == ()  # no node has 8 devices free: nothing to steer towards
    gang = pod("g", None, 1)
    gang["metadata"]["labels"] = {"scheduling.x-k8s.io/pod-group": "pg"}
    g = _decide("steer s { by fragmentation }\n", gang)
    assert g.patch == () and [r.code for r in g.reasons] == ["MissingGroup"]  # a gang member: never steered


def test_without_cluster_state_nothing_is_steered_and_the_explanation_says_so():
    ps, diags = lang.compile_policies([("s.policy", "steer small { by fragmentation }\n")])
    assert diags == []
    d, trace, _w = Engine(ps).explain(review(pod("x", None, 1, 50)), None, 0.0, mutate=True)
    assert d.allowed and d.patch == ()
    assert any(text == "no cluster state to score nodes on: not steered" for _b, _loc, text in trace), trace


def test_a_whole_node_pod_is_steered_too():
    # Eight GPUs: steered like a small pod (left to LeastAllocated, it takes the node with most cpu free, which a later
    # cpu-heavy 8-GPU pod needs); only the empty node takes it.
    snap = ClusterSnapshot.from_objects([node("n1", 8), node("n2", 8), node("n3", 8), node("n4", 8), pod("p1", "n1", 1, 50),
                                         pod("p2", "n2", 4), pod("p3", "n3", 1, 50), pod("p4", "n3", 1)])
    d = _decide("steer s { by fragmentation }\n", pod("y", None, 8), snap)
    (r,) = d.reasons
    assert (r.code, r.data["nodes"], r.data["feasible"]) == ("PlacementSteered", ["n4"], 1)


def test_equal_scores_go_to_a_node_in_use_before_an_untouched_one():
    # One whole GPU fragments nothing anywhere (the mix is whole GPUs): all three tie. By the name hash alone the
    # untouched c and e1 would come first; the node already in use goes first, so untouched nodes stay whole.
    snap = ClusterSnapshot.from_objects([node("c", 8), node("e1", 8), node("used", 8), pod("r", "used", 1)])
    got = Steering(PlacementIndex.from_snapshot(snap)).steer(Demand(whole=1, cpu=1000))
    assert len({c.score for c in got.choices}) == 1
    assert [c.node for c in got.choices] == ["used", "c", "e1"]


def test_past_the_node_limit_nothing_is_steered_and_the_explanation_says_why(monkeypatch):
    import policy.blocks.steer as block

    ps, diags = lang.compile_policies([("s.policy", "steer small { by fragmentation }\n")])
    assert diags == []
    engine = Engine(ps)
    monkeypatch.setattr(block, "NODE_LIMIT", 2)  # the three-node cluster stands for one past the limit
    d, trace, _w = engine.explain(review(pod("x", None, 1, 50)), cluster(), 0.0, mutate=True)
    assert d.allowed and d.patch == ()
    assert any("the cluster has 3 nodes" in text and "capped at 2" in text and text.endswith("not steered")
               for _b, _loc, text in trace), trace
    monkeypatch.setattr(block, "NODE_LIMIT", 3)
    d = engine.decide(review(pod("x", None, 1, 50)), cluster(), 0.0, mutate=True)
    assert d.patch != ()  # at the limit it steers
