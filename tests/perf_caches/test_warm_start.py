"""The server builds the placement index before serving, and that warmed index follows the snapshot and reloads."""

from __future__ import annotations

import copy

from webhook.cli.demo import _default_cluster, _default_policy
from webhook.server.serving import ServeOptions, prepare


def _prepared(tmp_path):
    o = ServeOptions(policy=str(_default_policy()), cluster=str(_default_cluster()), self_signed=True,
                     certs_dir=str(tmp_path), host="127.0.0.1", port=0, decision_log=None)
    state, _tasks, _tls, _ca = prepare(o)
    return state


def test_placement_index_is_built_before_the_first_request(tmp_path):
    state = _prepared(tmp_path)
    snapshot_state = state.engine.state_for(state.snapshot)
    assert snapshot_state._planner is not None, "policies/ has gangs and per_gpu: the index must exist at start"


def test_warmed_index_follows_snapshot_events_and_a_new_snapshot(tmp_path):
    state = _prepared(tmp_path)
    index = state.engine.state_for(state.snapshot).planner().index
    name = next(n for n in index.nodes if index.free_gpus(n) > 0)
    node = copy.deepcopy(next(n for n in state.snapshot.nodes() if n["metadata"]["name"] == name))
    before = index.free_gpus(name)
    assert before > 0
    state.snapshot.apply("DELETED", node)
    assert name not in index.nodes or index.free_gpus(name) == 0, "a deleted node no longer offers GPUs"
    state.snapshot.apply("ADDED", node)
    assert index.free_gpus(name) == before
    # A whole new snapshot (relist) gets a fresh state and index, never the old one.
    from policy.cluster.snapshot import ClusterSnapshot

    fresh = ClusterSnapshot()
    state.swap_snapshot(fresh, source="test", synced=True)
    assert state.engine.state_for(fresh).snapshot is fresh
    assert state.engine.state_for(fresh).planner().index.nodes == {}


def test_a_reloaded_engine_builds_its_own_index(tmp_path):
    from webhook.server.reload import PolicyReloader, PolicySource

    state = _prepared(tmp_path)
    old_engine = state.engine
    old_index = old_engine.state_for(state.snapshot).planner().index
    assert PolicyReloader(state, PolicySource(str(_default_policy()))).load_now()
    assert state.engine is not old_engine
    new_index = state.engine.state_for(state.snapshot).planner().index
    assert new_index is not old_index
    assert set(new_index.nodes) == set(old_index.nodes)
