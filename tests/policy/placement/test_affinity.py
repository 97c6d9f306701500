"""Affinity patches apply cleanly (jsonpatch) and keep every member of a gang in one domain."""

from __future__ import annotations

import copy

import jsonpatch
import pytest
from tests.policy.placement.placement_builders import BLOCK, RACK, gang, index, node, pod

from policy.placement import GangPlanner, affinity_patch, reservation_patch

IN_R1 = {"key": RACK, "operator": "In", "values": ["b1-r1"]}
ZONE = {"key": "zone", "operator": "In", "values": ["z1"]}
REQ = "requiredDuringSchedulingIgnoredDuringExecution"


def _with_affinity(affinity):
    p = pod("p", None)
    if affinity is not None:
        p["spec"]["affinity"] = affinity
    return p


AFFINITY_CASES = [
    ("no affinity", None, [[IN_R1]]),
    ("pod anti-affinity only", {"podAntiAffinity": {}}, [[IN_R1]]),
    ("preferred node affinity only", {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": []}}, [[IN_R1]]),
    ("empty terms", {"nodeAffinity": {REQ: {"nodeSelectorTerms": []}}}, [[IN_R1]]),
    ("one term", {"nodeAffinity": {REQ: {"nodeSelectorTerms": [{"matchExpressions": [ZONE]}]}}}, [[ZONE, IN_R1]]),
    ("two terms each get it", {"nodeAffinity": {REQ: {"nodeSelectorTerms": [{"matchExpressions": [ZONE]}, {"matchFields": []}]}}},
     [[ZONE, IN_R1], [IN_R1]]),
    ("already there is not doubled", {"nodeAffinity": {REQ: {"nodeSelectorTerms": [{"matchExpressions": [IN_R1]}]}}}, [[IN_R1]]),
]


@pytest.mark.parametrize("name,affinity,want_terms", AFFINITY_CASES, ids=[c[0] for c in AFFINITY_CASES])
def test_affinity_patch_applies_and_ands_into_every_term(name, affinity, want_terms):
    p = _with_affinity(copy.deepcopy(affinity))
    before = copy.deepcopy(p)
    ops = affinity_patch(p, RACK, "b1-r1")
    patched = jsonpatch.apply_patch(p, ops)
    assert p == before, "the input is not mutated"
    terms = patched["spec"]["affinity"]["nodeAffinity"][REQ]["nodeSelectorTerms"]
    assert [t.get("matchExpressions") for t in terms] == want_terms
    if affinity and "podAntiAffinity" in affinity:
        assert patched["spec"]["affinity"]["podAntiAffinity"] == {}


def test_affinity_patch_on_a_pod_template():
    job = {"kind": "Job", "spec": {"template": {"spec": {"containers": []}}}}
    patched = jsonpatch.apply_patch(job, affinity_patch(job, RACK, "b1-r2", prefix="/spec/template/spec"))
    assert patched["spec"]["template"]["spec"]["affinity"]["nodeAffinity"][REQ]["nodeSelectorTerms"] == [
        {"matchExpressions": [{"key": RACK, "operator": "In", "values": ["b1-r2"]}]}
    ]


@pytest.mark.parametrize("annotations", [None, {}, {"a/b": "c"}])
def test_reservation_patch_escapes_the_key(annotations):
    p = pod("p", None, annotations=annotations)
    if annotations == {}:
        p["metadata"]["annotations"] = {}
    patched = jsonpatch.apply_patch(p, reservation_patch(p, "team-a/train"))
    assert patched["metadata"]["annotations"]["allot.dev/reservation"] == "team-a/train"
    if annotations:
        assert patched["metadata"]["annotations"]["a/b"] == "c"


def _planner():
    idx = index([node("a1", rack="r1"), node("a2", rack="r1"), node("b1", rack="r2")])
    return idx, GangPlanner(idx, ttl=60.0)


def test_planner_gives_every_member_the_same_domain_and_reserves_once():
    idx, planner = _planner()
    first = planner.plan("team-a/train", gang(3, required="rack"), now=0.0)
    assert first.fits and first.domain == "b1-r2"
    assert idx.free_gpus("b1") == 1, "the placement is held"
    again = planner.plan("team-a/train", gang(3, required="rack"), now=1.0)
    assert again is first
    assert idx.free_gpus("b1") == 1, "a second member does not reserve again"
    other = planner.plan("team-b/other", gang(3, required="rack"), now=1.0)
    assert other.domain == "b1-r1", "concurrent gangs never double-book"


def test_planner_patch_then_bound_members_release_the_hold():
    idx, planner = _planner()
    result = planner.plan("team-a/train", gang(2, required="rack"), now=0.0)
    member = pod("m0", None)
    patched = jsonpatch.apply_patch(member, planner.patch(member, "team-a/train", result))
    assert patched["metadata"]["annotations"]["allot.dev/reservation"] == "team-a/train"
    host = next(iter(result.nodes))
    free_held = idx.free_gpus(host)
    patched["spec"]["nodeName"] = host
    idx.apply_pod("ADDED", patched)
    assert idx.free_gpus(host) == free_held, "the bound member takes its own held slot, not another GPU"
    assert len(idx.reservations.get("team-a/train").slots) == 1


def test_planner_dry_run_does_not_reserve_and_expiry_frees():
    idx, planner = _planner()
    planner.plan("g", gang(4, required="host"), now=0.0, dry_run=True)
    assert idx.free_gpus("a1") + idx.free_gpus("a2") + idx.free_gpus("b1") == 12
    planner.plan("g", gang(4, required="host"), now=0.0)
    assert idx.free_gpus("a1") + idx.free_gpus("a2") + idx.free_gpus("b1") == 8
    planner.plan("h", gang(1, required="host"), now=61.0)  # g expired meanwhile
    assert idx.reservations.get("g") is None
    assert idx.free_gpus("a1") + idx.free_gpus("a2") + idx.free_gpus("b1") == 11


def test_unfit_result_gives_no_patch():
    idx, planner = _planner()
    result = planner.plan("g", gang(9, required="rack"), now=0.0)
    assert not result.fits
    assert planner.patch(pod("m", None), "g", result) == []


def _member(name, gpus=1000, dry_run=False):
    from policy.subject.model import PodSet, Workload

    obj = pod(name, None, gpus=gpus // 1000)
    own = (PodSet(name, 1, gpus),)  # normalization gives a Pod its own one-pod set
    return Workload(kind="Pod", name=name, namespace="team-a", gang="train", min_members=3, gpus=gpus, pods=1,
                    dry_run=dry_run, obj=obj, pod_sets=own)


def test_place_member_pins_all_members_to_one_domain():
    from policy.placement import place_member

    idx, planner = _planner()
    got = [place_member(planner, _member(f"m{i}"), "fabric", "rack", now=float(i)) for i in range(3)]
    assert all(m.fits for m in got)
    assert {m.placement.value for m in got} == {"b1-r2"}
    assert got[0].placement.reservation == "team-a/train"
    for m in got:
        patched = jsonpatch.apply_patch(_member("x").obj, list(m.patch))
        terms = patched["spec"]["affinity"]["nodeAffinity"][REQ]["nodeSelectorTerms"]
        assert terms == [{"matchExpressions": [
            {"key": BLOCK, "operator": "In", "values": ["b1"]},  # the wider level too: rack names may repeat
            {"key": RACK, "operator": "In", "values": ["b1-r2"]},
        ]}]
    assert idx.free_gpus("b1") == 1, "reserved once for the gang, not per member"


def test_place_member_dry_run_reserves_nothing_and_unfit_explains():
    from policy.placement import place_member

    idx, planner = _planner()
    dry = place_member(planner, _member("m0", dry_run=True), "fabric", "rack", now=0.0)
    assert dry.fits and dry.placement.reservation is None and idx.reservations.get("team-a/train") is None
    big = place_member(planner, _member("m0", gpus=4000), "fabric", "host", now=0.0)
    assert not big.fits and big.patch == () and "no host" in big.reason
    gang3 = place_member(planner, _member("m1", gpus=4000), "fabric", "block", now=0.0)
    assert gang3.fits and dict(gang3.result.nodes) == {"a1": 1, "a2": 1, "b1": 1}, "the gang is 3 members, not 1"


def test_affinity_names_every_level_when_rack_names_repeat_across_blocks():
    a = node("a1", block="b1", rack="r1")
    b = node("c1", block="b2", rack="r1")
    for n in (a, b):
        n["metadata"]["labels"][RACK] = "r1"  # same rack value in both blocks
    idx = index([a, b], [pod("busy", "a1", gpus=2)])
    planner = GangPlanner(idx)
    result = planner.plan("g", gang(3, required="rack"), now=0.0)
    assert result.fits and result.path == ((BLOCK, "b2"), (RACK, "r1"))
    patched = jsonpatch.apply_patch(pod("m", None), planner.patch(pod("m", None), "g", result))
    exprs = patched["spec"]["affinity"]["nodeAffinity"][REQ]["nodeSelectorTerms"][0]["matchExpressions"]
    assert {e["key"]: e["values"] for e in exprs} == {BLOCK: ["b2"], RACK: ["r1"]}


def test_members_arriving_keep_the_reservation_alive():
    idx, planner = _planner()
    planner.plan("g", gang(4, required="host"), now=0.0)
    planner.plan("g", gang(4, required="host"), now=50.0)  # a member at t=50 extends the hold to t=110
    planner.plan("other", gang(1, required="host"), now=100.0)
    assert idx.reservations.get("g") is not None
    planner.plan("other2", gang(1, required="host"), now=111.0)
    assert idx.reservations.get("g") is None


def test_place_member_uses_the_pods_tolerations():
    from policy.placement import place_member
    from policy.subject.model import PodSet, Workload

    taint = {"key": "dedicated", "value": "training", "effect": "NoSchedule"}
    idx = index([node("t1", taints=[taint]), node("t2", taints=[taint])])
    planner = GangPlanner(idx)

    def member(tolerations):
        obj = pod("m", None, gpus=4)
        if tolerations:
            obj["spec"]["tolerations"] = tolerations
        return Workload(kind="Pod", name="m", namespace="ns", gang="g", min_members=2, gpus=4000, obj=obj,
                        pod_sets=(PodSet("m", 1, 4000),))

    refused = place_member(planner, member(None), "fabric", "rack", now=0.0)
    assert not refused.fits and "dedicated=training:NoSchedule (2)" in " ".join(r.message for r in refused.result.reasons)
    allowed = place_member(planner, member([{"key": "dedicated", "operator": "Equal", "value": "training"}]), "fabric", "rack", now=0.0)
    assert allowed.fits and dict(allowed.result.nodes) == {"t1": 1, "t2": 1}


def test_a_tolerating_member_s_query_is_re_used_while_the_index_is_unchanged():
    # GPU pods carry `nvidia.com/gpu: Exists` (ExtendedResourceToleration): as dicts the query was unhashable.
    from policy.placement.member import gang_request
    from policy.subject.model import PodSet, Workload

    idx = index([node("n1"), node("n2")])
    obj = pod("m", None, gpus=4)
    obj["spec"]["tolerations"] = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
                                  {"key": "odd", "value": ["not", "a", "string"]}]
    w = Workload(kind="Pod", name="m", namespace="ns", gang="g", min_members=2, gpus=4000, obj=obj, pod_sets=(PodSet("m", 1, 4000),))
    first, second = gang_request(w, "fabric", "rack"), gang_request(w, "fabric", "rack")
    assert first == second and hash(first) == hash(second)
    assert dict(first.tolerations[0]) == {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    answer = idx.query(first)
    assert answer.fits and idx.query(second) is answer  # the same answer object: re-used, not recomputed
    idx.apply_node("MODIFIED", node("n3"))
    assert idx.query(second) is not answer  # a change to the index asks again
