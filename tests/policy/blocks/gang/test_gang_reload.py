"""A policy reload keeps placed gangs: the engine replacing the running one takes over their domains and held slots."""

from __future__ import annotations

import asyncio
import time

from tests.policy.blocks.gang.gangs_builders import CONTRACT_GANG, DECLS, cluster, engine, kueue_member, node, rack_of, request  # noqa: E402

from lang import compile_policies  # noqa: E402
from policy.engine import Engine  # noqa: E402
from webhook.server.reload import PolicyReloader, PolicySource  # noqa: E402
from webhook.server.state import State  # noqa: E402

# Rack r1 holds 16 free GPUs (the best fit for a 2 x 8 gang), rack r2 24.
NODES = (node("n1", "r1"), node("n2", "r1"), node("n3", "r2"), node("n4", "r2"), node("n5", "r2"))
QUOTA = 'quota train { for namespace == "train" gpus 64 }\n'


def _held(eng, snap) -> dict:
    index = eng.state_for(snap).planner().index
    return {rid: sorted(node for node, _ in r.slots.values()) for rid, r in index.reservations.by_id.items()}


def _reloaded(old: Engine, snap, now: float, decls: str = DECLS) -> tuple[Engine, list]:
    policy, diags = compile_policies([("decls.policy", decls), ("gang.policy", CONTRACT_GANG + QUOTA)])
    assert policy is not None, [d.message for d in diags]
    new = Engine(policy)
    new.warm(snap)
    return new, new.adopt(old, snap, now)


def test_a_reload_keeps_the_domain_and_the_held_slots_of_a_placed_gang():
    old, snap = engine(CONTRACT_GANG + QUOTA), cluster(*NODES)
    first = old.decide(request(kueue_member("m-0", "g", 8, 2)), snap, 0.0, mutate=True)
    assert first.allowed and rack_of(first.patch) == ["r1"]
    new, adopted = _reloaded(old, snap, 10.0)
    assert adopted == ["train/g"]
    assert _held(new, snap) == _held(old, snap) == {"train/g": ["n1", "n2"]}
    # The next member joins its gang's rack; another gang cannot take the held rack.
    member = new.decide(request(kueue_member("m-1", "g", 8, 2)), snap, 20.0, mutate=True)
    assert member.allowed and rack_of(member.patch) == ["r1"]
    other = new.decide(request(kueue_member("o-0", "other", 8, 2)), snap, 20.0, mutate=True)
    assert other.allowed and rack_of(other.patch) == ["r2"]


def test_without_adoption_the_reloaded_engine_would_place_another_gang_on_the_held_rack():
    # The failure adoption prevents, shown on the same cluster: a fresh engine sees r1 free.
    old, snap = engine(CONTRACT_GANG + QUOTA), cluster(*NODES)
    assert old.decide(request(kueue_member("m-0", "g", 8, 2)), snap, 0.0, mutate=True).allowed
    fresh = engine(CONTRACT_GANG + QUOTA)
    fresh.warm(snap)
    other = fresh.decide(request(kueue_member("o-0", "other", 8, 2)), snap, 1.0, mutate=True)
    assert rack_of(other.patch) == ["r1"]


def test_expired_gangs_are_not_adopted():
    old, snap = engine(CONTRACT_GANG + QUOTA), cluster(*NODES)
    assert old.decide(request(kueue_member("m-0", "g", 8, 2)), snap, 0.0, mutate=True).allowed
    new, adopted = _reloaded(old, snap, 10_000.0)  # long past the 300 s hold
    assert adopted == [] and _held(new, snap) == {}


def test_a_gang_whose_topology_changed_meaning_re_plans():
    old, snap = engine(CONTRACT_GANG + QUOTA), cluster(*NODES)
    assert old.decide(request(kueue_member("m-0", "g", 8, 2)), snap, 0.0, mutate=True).allowed
    other_labels = DECLS.replace('rack  "topology.acme.io/rack"', 'rack  "example.com/rack"')
    new, adopted = _reloaded(old, snap, 10.0, other_labels)
    assert adopted == [] and _held(new, snap) == {}


def test_the_webhook_reloader_hands_placed_gangs_to_the_new_engine(tmp_path):
    (tmp_path / "decls.policy").write_text(DECLS)
    (tmp_path / "gang.policy").write_text(CONTRACT_GANG + QUOTA)
    state = State()
    state.swap_snapshot(cluster(*NODES), source="test", synced=True)
    reloader = PolicyReloader(state, PolicySource(str(tmp_path)), interval=3600)
    assert reloader.load_now()
    old = state.engine
    now = time.time()  # the reloader reads the clock: the hold must be live then
    assert old.decide(request(kueue_member("m-0", "g", 8, 2)), state.snapshot, now, mutate=True).allowed
    (tmp_path / "extra.policy").write_text('rule no-bad { for name == "bad" deny "bad name" }\n')
    assert asyncio.run(reloader.check()) is True
    assert state.engine is not old and state.policy.generation == 2
    assert _held(state.engine, state.snapshot) == {"train/g": ["n1", "n2"]}


def test_a_reload_keeps_the_members_each_gang_has_shown():
    """A gang's shapes learnt from its members survive a reload, so the next member still plans the whole mix."""
    old, snap = engine(CONTRACT_GANG + QUOTA), cluster(*NODES)
    old.decide(request(kueue_member("m-0", "g", 8, 3)), snap, 0.0, reserve=False)
    old.decide(request(kueue_member("m-1", "g", 4, 3)), snap, 0.0, reserve=False)
    new, _adopted = _reloaded(old, snap, 1.0)
    seen = new.state_for(snap).planner().members.of("train/g")
    assert sorted((shape.gpus, n) for _s, shape, n in seen) == [(4000, 1), (8000, 1)]
