"""Builders and hypothesis strategies of cluster objects with one field of the wrong type ("structured garbage")."""

from __future__ import annotations

import copy

from hypothesis import strategies as st

from tests.policy.builders import claim, device_request, gpu_container, namespace, node, pod, podgroup, priority_class, workload

GARBAGE = st.one_of(
    st.none(), st.booleans(), st.integers(-3, 2**70), st.floats(allow_nan=True), st.text(max_size=6),
    st.lists(st.integers(0, 3), max_size=2), st.just({}), st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
    st.just([{"a": 1}]), st.just({"nodeName": ["x"]}),
)


def bases() -> list[dict]:
    """One healthy object of each kind the snapshot indexes (names overlap so events replace each other)."""
    return [
        node("n1"),
        node("n2", product="NVIDIA-A100-SXM4-40GB", memory_mib="40960", labels={"topology.acme.io/rack": "r1"}),
        namespace("team-a", labels={"team": "team-a"}),
        priority_class("prod", 500),
        pod("p1", "team-a", gpus="2", node="n1", labels={"acme.io/workload": "training"}),
        pod("p2", "team-a", containers=[gpu_container("1")], node="n2", phase="Running", priorityClassName="prod"),
        podgroup("g", minMember=2),
        podgroup("v", api="scheduling.volcano.sh/v1beta1", minMember=2, minTaskMember={"worker": 2}),
        podgroup("k", api="scheduling.run.ai/v2alpha2", minMember=1, topologyConstraint={"requiredTopologyLevel": "rack"}),
        workload("w", podGroups=[{"name": "a", "policy": {"gang": {"minCount": 2}}}]),
        claim("c", requests=[device_request(count=1)]),
    ]


def _paths(obj, prefix=()):
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield prefix + (k,)
            yield from _paths(v, prefix + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield prefix + (i,)
            yield from _paths(v, prefix + (i,))


def spoiled(obj: dict, path: tuple, value) -> dict:
    """A deep copy of `obj` with the field at `path` replaced by `value`."""
    out = copy.deepcopy(obj)
    at = out
    for step in path[:-1]:
        at = at[step]
    at[path[-1]] = copy.deepcopy(value)  # st.just values are shared between examples
    return out


@st.composite
def garbage_object(draw) -> dict:
    """A healthy object, or one with a field (never kind or metadata.name) given a garbage value."""
    base = draw(st.sampled_from(bases()))
    if draw(st.booleans()):
        return copy.deepcopy(base)
    paths = [p for p in _paths(base) if p not in (("kind",), ("metadata",), ("metadata", "name"))]
    return spoiled(base, draw(st.sampled_from(paths)), draw(GARBAGE))


EVENTS = st.tuples(st.sampled_from(["ADDED", "MODIFIED", "DELETED"]), garbage_object())
