"""Bad input never raises: random pod-like objects through the contract policy set give a Decision."""

from __future__ import annotations

import json
import os
import pathlib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import lang
from policy.admission import respond, wrap_manifest
from policy.cluster.snapshot import ClusterSnapshot
from policy.decision import Decision
from policy.engine import Engine

ROOT = pathlib.Path(__file__).resolve().parents[3]
EXAMPLES = int(os.environ.get("ALLOT_FUZZ_EXAMPLES", "120"))
CONTRACT = [ROOT / "policies" / "cluster.policy", ROOT / "policies" / "contract" / "contract.policy"]


@pytest.fixture(scope="module")
def engine():
    assert all(p.exists() for p in CONTRACT), "the contract policies moved: this fuzz test must follow them"
    policy_set, diags = lang.compile_policies([(str(p), p.read_text()) for p in CONTRACT])
    assert policy_set is not None, [str(d) for d in diags]
    return Engine(policy_set)


junk = st.one_of(st.none(), st.booleans(), st.integers(-5, 10**12), st.text(max_size=8), st.lists(st.integers(), max_size=2), st.just({}))
quantity = st.one_of(st.sampled_from(["1", "0", "-1", "0.25", "abc", "1e3", "500m", "", "10Gi", "99999999999"]), junk)
resources = st.fixed_dictionaries(
    {},
    optional={
        "limits": st.dictionaries(st.sampled_from(["nvidia.com/gpu", "nvidia.com/gpumem", "nvidia.com/gpucores", "nvidia.com/gpumem-percentage", "nvidia.com/mig-1g.10gb", "cpu"]), quantity, max_size=3),
        "requests": st.one_of(junk, st.dictionaries(st.sampled_from(["nvidia.com/gpu", "memory"]), quantity, max_size=2)),
    },
)
container = st.fixed_dictionaries({"name": st.just("c")}, optional={"resources": st.one_of(resources, junk), "securityContext": st.one_of(junk, st.just({"privileged": True}))})
labels = st.dictionaries(
    st.sampled_from(["acme.io/workload", "agents.acme.io/state", "app.kubernetes.io/component", "team", "scheduling.x-k8s.io/pod-group", "kueue.x-k8s.io/pod-group-name"]),
    st.sampled_from(["training", "sleeping", "inference", "g", ""]),
    max_size=3,
)
annotations = st.dictionaries(
    st.sampled_from(["gpu-fraction", "gpu-memory", "acme.io/vram-floor", "kueue.x-k8s.io/pod-group-total-count", "kueue.x-k8s.io/podset-required-topology"]),
    st.one_of(st.sampled_from(["0.5", "-1", "x", "2", "topology.acme.io/rack"]), st.text(max_size=4)),
    max_size=2,
)
pods = st.builds(
    lambda ns, lab, ann, cs, extra: {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": ns, "labels": lab, "annotations": ann},
        "spec": {"containers": cs, **extra},
    },
    st.sampled_from(["team-a", "team-b", "inference-x", "agents-sandbox", "default"]),
    labels,
    annotations,
    st.lists(container, max_size=2),
    st.fixed_dictionaries({}, optional={"priorityClassName": st.one_of(st.sampled_from(["batch", "gold"]), junk), "nodeName": st.one_of(st.just("n1"), junk), "nodeSelector": st.one_of(junk, st.just({"nvidia.com/gpu.product": "NVIDIA-L4"}))}),
)
users = st.sampled_from(["alice", "system:serviceaccount:agents-1:bot"])
ops = st.sampled_from(["CREATE", "UPDATE", "DELETE", "CONNECT"])


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(pods, users, ops, st.booleans())
def test_random_pods_always_get_a_decision(engine, obj, user, op, mutate):
    req = wrap_manifest(obj, user=user, groups=[], operation=op)["request"]
    # The live pod for CONNECT only when it is loadable (the snapshot loader's own input checks are its tests').
    loadable = isinstance((obj["spec"].get("nodeName") or ""), str)
    snap = ClusterSnapshot.from_objects([obj]) if op == "CONNECT" and loadable else ClusterSnapshot()
    d = engine.decide(req, snap, 0.0, mutate=mutate)
    assert isinstance(d, Decision)
    json.dumps(respond(req, d, mutate=mutate))
    assert d.allowed is not any(r.mode == "enforce" for r in d.reasons)
