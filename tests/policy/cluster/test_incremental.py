"""Property: any sequence of watch events leaves the snapshot's indexes equal to a snapshot rebuilt from scratch."""

import os

from hypothesis import given, settings, strategies as st

from policy.cluster.snapshot import ClusterSnapshot
from tests.policy.builders import node, pod, podgroup

FUZZ = int(os.environ.get("ALLOT_FUZZ_EXAMPLES", "40"))

NODES = [node("n0"), node("n1", "NVIDIA-L4", "23034", "4"), node("n1", memory_mib=None), node("n2", product=None)]
PODS = [pod("p0", node="n0", gpus="1"), pod("p0", node="n1", gpus="2"), pod("p1", "team-b", node="n1"), pod("p1", "team-b")]
GROUPS = [podgroup("g", minMember=2), podgroup("g", minMember=3), podgroup("g", api="scheduling.volcano.sh/v1beta1", minMember=4)]
event = st.tuples(st.sampled_from(["ADDED", "MODIFIED", "DELETED"]), st.sampled_from(NODES + PODS + GROUPS))


def view(s: ClusterSnapshot) -> dict:
    """Everything the indexes answer, in comparable form."""
    return {
        "pods_on": {n: sorted(p["metadata"]["name"] for p in s.pods_on(n)) for n in ("n0", "n1", "n2")},
        "groups": sorted((g.family, g.name, g.min_members) for g in s.groups()),
        "mem": [s.gpu_memory(p) for p in (None, "NVIDIA-L4", "NVIDIA-H100-80GB-HBM3")],
        "node_mem": [s.node_gpu_memory(n) for n in ("n0", "n1", "n2")],
        "size": len(s),
    }


@settings(max_examples=FUZZ, deadline=None)
@given(st.lists(event, max_size=25))
def test_events_keep_indexes_equal_to_a_rebuild(events):
    live = ClusterSnapshot()
    changes = []
    live.subscribe(lambda ev, old, new: changes.append(ev))
    applied = 0
    for ev, obj in events:
        applied += live.apply(ev, obj)
    rebuilt = ClusterSnapshot.from_objects(
        [*live.nodes(), *live.pods(), *(g.obj for g in live.groups())]
    )
    assert view(live) == view(rebuilt)
    assert live.resource_version == applied == len(changes)
