"""What a pod asks of a node besides GPUs: effective requests as the scheduler computes them, and node filters."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from tests.policy.placement.placement_builders import index, node, pod

from policy.placement import GangRequest
from policy.placement.needs import PodNeeds, node_filter, pod_needs, pod_requests
from policy.subject.model import PodSet

REQ = "requiredDuringSchedulingIgnoredDuringExecution"


def c(cpu=None, memory=None, *, limits=None, restart=None):
    """A container requesting cpu/memory (and with `limits`, only limits)."""
    res = {}
    if cpu or memory:
        res["requests"] = {k: v for k, v in (("cpu", cpu), ("memory", memory)) if v}
    if limits:
        res["limits"] = limits
    out = {"name": "c", "resources": res}
    if restart:
        out["restartPolicy"] = restart
    return out


@dataclass
class Req:
    name: str
    spec: dict
    want_cpu: int
    want_memory: int


REQUESTS = [
    Req("containers sum", {"containers": [c("1", "1Gi"), c("500m", "512Mi")]}, 1500, 3 * 2**29),
    Req("a limit without a request is the request", {"containers": [c(limits={"cpu": "2", "memory": "4Gi"})]}, 2000, 4 * 2**30),
    Req("an init container larger than the sum wins", {"initContainers": [c("4", "1Gi")], "containers": [c("1", "2Gi")]}, 4000, 2 * 2**30),
    Req("a sidecar adds to the containers and to later init containers",
        {"initContainers": [c("1", "1Gi", restart="Always"), c("2", "1Gi")], "containers": [c("500m", "1Gi")]}, 3000, 2 * 2**30),
    Req("pod overhead is added", {"containers": [c("1", "1Gi")], "overhead": {"cpu": "250m", "memory": "128Mi"}}, 1250, 2**30 + 2**27),
    Req("no requests", {"containers": [{"name": "c"}]}, 0, 0),
    Req("odd input counts nothing", {"containers": [None, {"resources": "x"}, c("abc")]}, 0, 0),
    Req("negative and boolean amounts count nothing", {"containers": [{"resources": {"requests": {"cpu": -3, "memory": True}}}],
                                                       "overhead": {"cpu": -1}}, 0, 0),
]


@pytest.mark.parametrize("case", REQUESTS, ids=lambda r: r.name)
def test_effective_requests(case):
    assert pod_requests(case.spec) == (case.want_cpu, case.want_memory)


def _terms(*terms):
    return {"affinity": {"nodeAffinity": {REQ: {"nodeSelectorTerms": list(terms)}}}}


def expr(key, op, *values):
    """One matchExpressions entry."""
    return {"key": key, "operator": op, **({"values": list(values)} if values else {})}


LABELS = {"pool": "a", "tier": "5"}


@dataclass
class Match:
    name: str
    spec: dict
    want: bool


MATCHES = [
    Match("nodeSelector equal", {"nodeSelector": {"pool": "a"}}, True),
    Match("nodeSelector differs", {"nodeSelector": {"pool": "b"}}, False),
    Match("In", _terms({"matchExpressions": [expr("pool", "In", "b", "a")]}), True),
    Match("NotIn", _terms({"matchExpressions": [expr("pool", "NotIn", "a")]}), False),
    Match("NotIn a missing label holds", _terms({"matchExpressions": [expr("zone", "NotIn", "z1")]}), True),
    Match("Exists", _terms({"matchExpressions": [expr("tier", "Exists")]}), True),
    Match("DoesNotExist", _terms({"matchExpressions": [expr("tier", "DoesNotExist")]}), False),
    Match("Gt is strict", _terms({"matchExpressions": [expr("tier", "Gt", "5")]}), False),
    Match("Gt", _terms({"matchExpressions": [expr("tier", "Gt", "4")]}), True),
    Match("Lt is strict", _terms({"matchExpressions": [expr("tier", "Lt", "5")]}), False),
    Match("Lt", _terms({"matchExpressions": [expr("tier", "Lt", "10")]}), True),
    Match("Gt on a non-integer label", _terms({"matchExpressions": [expr("pool", "Gt", "1")]}), False),
    Match("expressions are ANDed", _terms({"matchExpressions": [expr("pool", "In", "a"), expr("tier", "In", "6")]}), False),
    Match("terms are ORed", _terms({"matchExpressions": [expr("pool", "In", "b")]}, {"matchExpressions": [expr("tier", "In", "5")]}), True),
    Match("an empty term matches nothing", _terms({}), False),
    Match("matchFields metadata.name", _terms({"matchFields": [expr("metadata.name", "In", "n1")]}), True),
    Match("matchFields NotIn", _terms({"matchFields": [expr("metadata.name", "NotIn", "n1")]}), False),
    Match("nodeSelector and affinity both hold", {"nodeSelector": {"pool": "a"}, **_terms({"matchExpressions": [expr("tier", "Exists")]})}, True),
    Match("an unknown operator selects nothing", _terms({"matchExpressions": [expr("pool", "Near", "a")]}), False),
]


@pytest.mark.parametrize("case", MATCHES, ids=lambda m: m.name)
def test_node_filter_matches_as_kubernetes(case):
    flt = node_filter(case.spec)
    assert flt is not None and flt.matches("n1", LABELS) is case.want


def _nodes(**alloc):
    ns = [node(f"n{i}", "b1", f"r{i // 2}", gpus=8, labels={"pool": "a" if i < 2 else "b"}) for i in range(4)]
    for n in ns:
        n["status"]["allocatable"].update(alloc)
    return ns


def _gang(count, *, gpus=8000, spec=None, required="rack"):
    return GangRequest((PodSet("w", count, gpus, needs=pod_needs(spec or {"containers": []})),), topology="fabric", required=required)


@dataclass
class Place:
    name: str
    alloc: dict
    bound: list
    gang: GangRequest
    want_fits: bool
    want_code: str
    want_in: str


PLACES = [
    Place("96 cpus per pod on 64-core nodes", {"cpu": "64", "memory": "512Gi", "pods": "110"}, [],
          _gang(2, spec={"containers": [c("96")]}), False, "InsufficientResource",
          "cpu: 96 requested per pod, the best node with room for its GPUs has 64 free"),
    Place("memory runs out", {"cpu": "64", "memory": "512Gi"}, [], _gang(1, spec={"containers": [c("1", "600Gi")]}), False,
          "InsufficientResource", "memory: 600Gi requested per pod, the best node with room for its GPUs has 512Gi free"),
    Place("memory in decimal units, shown in binary ones", {"cpu": "64", "memory": "512Gi"}, [],
          _gang(1, spec={"containers": [c("1", "600G")]}), False, "InsufficientResource",
          "memory: 558.8Gi requested per pod, the best node with room for its GPUs has 512Gi free"),
    Place("memory rounded alike: the exact bytes show the shortfall", {"cpu": "64", "memory": "7730000000"}, [],
          _gang(1, spec={"containers": [c("1", "7731000000")]}), False, "InsufficientResource",
          "memory: 7731000000 requested per pod, the best node with room for its GPUs has 7730000000 free"),
    Place("bound pods' requests count", {"cpu": "64"}, [pod(f"x{i}", f"n{i}", gpus=0, cpu="40") for i in range(4)],
          _gang(2, gpus=1000, spec={"containers": [c("20")]}, required="host"), False, "NoDomainFits", "no host"),
    Place("the pod limit", {"pods": "1"}, [pod("x0", "n0", gpus=0), pod("x1", "n1", gpus=0), pod("x2", "n2", gpus=0), pod("x3", "n3", gpus=0)],
          _gang(1, gpus=1000), False, "InsufficientResource", "pods: 1 requested per pod, the best node with room for its GPUs has 0 free"),
    Place("a selector no node passes", {}, [], _gang(1, spec={"containers": [], "nodeSelector": {"pool": "c"}}), False,
          "NodeSelectorMismatch", "matches nodeSelector pool=c"),
    Place("a selector some nodes pass", {}, [], _gang(2, spec={"containers": [], "nodeSelector": {"pool": "b"}}), True, "Fits", "rack b1-r1"),
    Place("cpu cuts the room below the gang", {"cpu": "64"}, [], _gang(5, gpus=1000, spec={"containers": [c("40")]}, required="block"),
          False, "InsufficientCapacity", "room for 4 of 5 pods"),
]


@pytest.mark.parametrize("case", PLACES, ids=lambda p: p.name)
def test_placement_counts_what_the_scheduler_counts(case):
    idx = index(_nodes(**case.alloc), case.bound)
    got = idx.query(case.gang)
    assert got.fits is case.want_fits, got.reasons
    assert got.reasons[0].code == case.want_code, got.reasons
    assert case.want_in in got.reasons[0].message, got.reasons[0].message


def test_held_slots_hold_cpu_and_memory():
    idx = index(_nodes(cpu="64"))
    gang = _gang(2, gpus=4000, spec={"containers": [c("40")]}, required="rack")
    first = idx.query(gang)
    assert first.fits
    idx.reserve("g1", first, expires_at=100.0)
    for name in first.nodes:
        assert idx.nodes[name].free_cpu() == 24000, "the held slot charges its 40 cpus"
    idx.release("g1")
    assert all(idx.nodes[name].free_cpu() == 64000 for name in first.nodes)


def test_a_selector_every_node_passes_keeps_the_fast_path():
    idx = index(_nodes())
    plain, selected = _gang(1), _gang(1, spec={"containers": [], "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}})
    assert idx.query(plain).nodes == idx.query(selected).nodes
    assert pod_needs({"containers": []}) is None and PodNeeds() == PodNeeds(0, 0, None)


def test_a_limit_short_of_the_gang_is_ranked_after_the_capacity_with_both_numbers():
    idx = index(_nodes(cpu="64"))
    got = idx.query(_gang(5, gpus=1000, spec={"containers": [c("40")]}, required="block"))
    limit = next(r for r in got.reasons if r.code == "ResourcesLimit")
    assert limit.data["by_gpus"] == 32 and limit.data["fits"] == 4
    assert "with cpu and pod slots counted" in limit.message


from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

JUNK = st.recursive(st.one_of(st.none(), st.booleans(), st.integers(-3, 10**6), st.text(max_size=6),
                              st.sampled_from(["1", "500m", "2Gi", "-1", "1e3", "x"])),
                    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.sampled_from(
                        ["cpu", "memory", "resources", "requests", "limits", "restartPolicy", "key", "operator", "values",
                         "nodeSelectorTerms", "matchExpressions", "matchFields", "nodeAffinity", REQ]), inner, max_size=3)),
                    max_leaves=12)
SPECS = st.fixed_dictionaries({}, optional={k: JUNK for k in ("containers", "initContainers", "overhead", "nodeSelector", "affinity")})


@settings(max_examples=int(__import__("os").environ.get("ALLOT_FUZZ_EXAMPLES", "60")), deadline=None)
@given(SPECS)
def test_odd_pod_specs_never_raise(spec):
    needs = pod_needs(spec)
    cpu, memory = pod_requests(spec)
    assert cpu >= 0 and memory >= 0
    if needs is not None and needs.node_filter is not None:
        hash(needs)
        assert needs.node_filter.matches("n1", LABELS) in (True, False)
        needs.node_filter.describe()
