"""Property: re-reading a tracked node part by part (`capacity.reread`) gives the view a full read gives, at every event.

A node goes through random watch events — labels changed (the product, the memory label, a
topology label, a pool), taints (the device plugin's, blocking ones, PreferNoSchedule, odd
entries), cordon, Ready, allocatable (GPUs, cpu, gone: the count then comes from capacity),
heartbeats — each as a fresh object (a watch event decodes new dicts), or sharing the last
object's parts (as the bench's events do, so identity shortcuts are taken too). After each,
the index's view equals `read_node` of that object, and the index equals a recount.
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from tests.policy.placement.placement_builders import BLOCK, FABRIC, H100, L4, MODELS, RACK, node
from tests.policy.placement.test_properties import SETTINGS, check_aggregates

import copy

from policy.placement import PlacementIndex
from policy.placement.capacity import DEFAULT_TOLERATED, read_node

TAINTS = (
    {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"},
    {"key": "maint", "value": "true", "effect": "NoSchedule"},
    {"key": "drain", "effect": "NoExecute"},
    {"key": "soft", "effect": "PreferNoSchedule"},
    {"key": "odd", "effect": ["NoSchedule"]},
    "not a taint",
)

CHANGES = st.one_of(
    st.tuples(st.just("label"), st.sampled_from(["pool", "nvidia.com/gpu.product", "nvidia.com/gpu.memory", RACK, BLOCK]),
              st.sampled_from([None, "a", H100, L4, "40000", "b1-r2"])),
    st.tuples(st.just("taints"), st.lists(st.sampled_from(range(len(TAINTS))), max_size=3), st.booleans()),
    st.tuples(st.just("cordon"), st.sampled_from([None, True, False, "", 1])),
    st.tuples(st.just("ready"), st.sampled_from(["True", "False", "Unknown", None])),
    st.tuples(st.just("alloc"), st.sampled_from(["nvidia.com/gpu", "cpu", "memory", "pods"]), st.sampled_from([None, "0", "2", "8", "64", "100Gi", "x"])),
    st.tuples(st.just("capacity"), st.sampled_from([None, "4"])),
    st.tuples(st.just("heartbeat"), st.integers(0, 9)),
)


def _apply(obj: dict, change, fresh: bool) -> dict:
    new = copy.deepcopy(obj) if fresh else {**obj, "metadata": dict(obj["metadata"]), "spec": dict(obj["spec"]), "status": dict(obj["status"])}
    kind = change[0]
    if kind == "label":
        labels = dict(new["metadata"]["labels"])
        if change[2] is None:
            labels.pop(change[1], None)
        else:
            labels[change[1]] = change[2]
        new["metadata"]["labels"] = labels
    elif kind == "taints":
        new["spec"]["taints"] = [copy.deepcopy(TAINTS[i]) for i in change[1]] if change[2] or change[1] else None
    elif kind == "cordon":
        if change[1] is None:
            new["spec"].pop("unschedulable", None)
        else:
            new["spec"]["unschedulable"] = change[1]
    elif kind == "ready":
        new["status"]["conditions"] = [{"type": "MemoryPressure", "status": "False"}] + (
            [{"type": "Ready", "status": change[1]}] if change[1] else [])
    elif kind == "alloc":
        alloc = dict(new["status"].get("allocatable") or {})
        if change[2] is None:
            alloc.pop(change[1], None)
        else:
            alloc[change[1]] = change[2]
        new["status"]["allocatable"] = alloc
    elif kind == "capacity":
        if change[1] is None:
            new["status"].pop("capacity", None)
        else:
            new["status"]["capacity"] = {"nvidia.com/gpu": change[1]}
    else:  # a heartbeat: the Ready condition's time moves, nothing placement reads
        conditions = [dict(c) for c in new["status"].get("conditions") or []]
        for c in conditions:
            c["lastHeartbeatTime"] = f"t{change[1]}"
        new["status"]["conditions"] = conditions
    return new


@SETTINGS
@given(st.lists(st.tuples(CHANGES, st.booleans()), max_size=25), st.integers(0, 3))
def test_a_node_reread_part_by_part_equals_a_full_read(changes, which):
    nodes = [node(f"n{i}", f"b{i % 2}", f"r{i % 2}", gpus=4, cpu="16", memory="64Gi", max_pods=6, taints=[TAINTS[0]]) for i in range(4)]
    idx = PlacementIndex(FABRIC, MODELS)
    for n in nodes:
        idx.apply_node("ADDED", n)
    obj = nodes[which]
    name = obj["metadata"]["name"]
    for change, fresh in changes:
        obj = _apply(obj, change, fresh)
        idx.apply_node("MODIFIED", obj)
        want = read_node(obj, idx.topologies, idx.gpu_models, DEFAULT_TOLERATED)
        state = idx.nodes.get(name)
        got = state.spec if state is not None else None
        if want.gpus <= 0 and got is None:
            continue  # never tracked again once it lost its GPUs and held nothing
        assert got == want, change
    check_aggregates(idx)
