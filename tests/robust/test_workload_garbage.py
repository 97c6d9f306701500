"""Workload objects with one field of the wrong type: normalization and the engine explain, never raise."""

from __future__ import annotations


import yaml
from hypothesis import given
from hypothesis import strategies as st

from policy.admission import wrap_manifest
from policy.subject.normalize import normalize
from tests.robust.workload_fuzz import CLUSTER, ENGINE, FUZZ, REPO
from tests.robust.robust_objects import GARBAGE, _paths, spoiled

OBJECTS = [o for f in sorted((REPO / "tests/fixtures/workloads").glob("*.yaml")) for o in yaml.safe_load_all(f.read_text()) if o]


@st.composite
def spoiled_workload(draw) -> dict:
    base = draw(st.sampled_from(OBJECTS))
    # metadata.namespace becomes request.namespace, which the review envelope checks (webhook/server/review.py)
    paths = [p for p in _paths(base) if p not in (("kind",), ("apiVersion",), ("metadata",), ("metadata", "name"), ("metadata", "namespace"))]
    return spoiled(base, draw(st.sampled_from(paths)), draw(GARBAGE))


@FUZZ
@given(spoiled_workload(), st.sampled_from(["CREATE", "UPDATE"]))
def test_a_spoiled_workload_is_explained_never_raised(obj, operation):
    req = wrap_manifest(obj, user="alice", groups=["dev"], operation=operation)["request"]
    w = normalize(req, CLUSTER)
    assert w.kind == obj["kind"] and w.total_gpus >= 0 and all(ps.count >= 0 for ps in w.pod_sets)
    for mutate in (False, True):
        d = ENGINE.decide(req, CLUSTER, 0.0, mutate=mutate, reserve=False)
        assert all(r.message for r in d.reasons)
