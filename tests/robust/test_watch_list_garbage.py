"""A relist holding one malformed object applies the rest, marks the kind synced, and counts the refusal."""

from __future__ import annotations

from policy.cluster.snapshot import ClusterSnapshot
from tests.policy.builders import pod
from tests.robust.robust_objects import spoiled
from webhook.server.state import State
from webhook.server.watch import RESOURCES, ClusterWatcher, resource_id


def test_one_bad_list_item_is_skipped_and_the_kind_syncs():
    state = State(snapshot=ClusterSnapshot())
    pods = next(r for r in RESOURCES if r.kind == "Pod")
    watcher = ClusterWatcher(state, api_client=None, resources=(pods,))
    bad = spoiled(pod("bad", gpus="1", node="n1"), ("spec", "nodeName"), ["n1"])
    watcher._apply_list(pods, [pod("a", gpus="1", node="n1"), bad, pod("b", gpus="1", node="n1")], "7")
    assert sorted(p["metadata"]["name"] for p in state.snapshot.pods_on("n1")) == ["a", "b"]
    assert state.snapshot.rejected == 1
    assert state.cluster.kinds[resource_id(pods)]["synced"] is True
    assert ("team-a", "bad") not in watcher.known[resource_id(pods)]
