"""Workload changes applied to a shard entry (webhook/ledger/workloads.py), and garbled entries read without a crash."""

from __future__ import annotations

from dataclasses import dataclass

import orjson
import pytest
from hypothesis import given, settings, strategies as st

from policy.cluster.ledger import WorkloadChange
from webhook.ledger import gangs as ledger_gangs
from webhook.ledger import workloads as ledger_ops
from webhook.ledger.cluster import _entries

Q = "quota team-a"


def entry(milli: int, *, uid="u1", demand=(4000, 0), seq=None) -> list:
    return [100.0, [[Q, milli, 0, None, milli]], "ra", None, {"uid": uid, "demand": list(demand), "seq": dict(seq or {})}]


def held(e) -> int | None:
    return None if e is None else sum(h[1] for h in e[1])


def h(milli: int) -> tuple:
    return ((Q, milli, 0, None, milli),)


@dataclass
class Case:
    name: str
    entry: list | None
    change: WorkloadChange
    strict: bool = True
    want_held: int | None = 0  # milli-GPU left in the entry (0: an entry taken whole); None: no entry
    want_fail: bool = False
    want_uid: str | None = "u1"
    want_demand: list | None = None


CASES = [
    Case("an admitted workload makes the entry", None, WorkloadChange("hold", "k", h(4000), 100.0, "u1", (4000, 0)),
         want_held=4000, want_demand=[4000, 0]),
    Case("a scale up adds to it", entry(3000), WorkloadChange("hold", "k", h(2000), 120.0, "u1", (6000, 0)),
         want_held=5000, want_demand=[6000, 0]),
    Case("a new object of that name replaces it", entry(3000), WorkloadChange("hold", "k", h(1000), 120.0, "u2", (1000, 0)),
         want_held=1000, want_uid="u2", want_demand=[1000, 0]),
    Case("a covered take subtracts", entry(3000), WorkloadChange("take", "k", h(1000), pod="ns/p"), want_held=2000),
    Case("a take not covered fails", entry(500), WorkloadChange("take", "k", h(1000), pod="ns/p"), want_fail=True),
    Case("replayed, a take is capped", entry(500), WorkloadChange("take", "k", h(1000)), strict=False, want_held=0),
    Case("a take of a gone hold fails", None, WorkloadChange("take", "k", h(1000)), want_fail=True),
    Case("a give adds back", entry(500), WorkloadChange("give", "k", h(1000)), want_held=1500),
    Case("a give to a gone hold makes none", None, WorkloadChange("give", "k", h(1000)), want_held=None),
    Case("a shrink releases the entry's demand minus the new", entry(3000, demand=(4000, 0)),
         WorkloadChange("shrink", "k", h(9999), demand=(1000, 0)), want_held=0, want_demand=[1000, 0]),
    Case("the same shrink again releases nothing", entry(1000, demand=(1000, 0)),
         WorkloadChange("shrink", "k", h(3000), demand=(1000, 0)), want_held=1000, want_demand=[1000, 0]),
    Case("a drop of the hold's object", entry(3000), WorkloadChange("drop", "k", uid="u1"), want_held=None),
    Case("a drop of an older object leaves a newer one", entry(3000, uid="u2"), WorkloadChange("drop", "k", uid="u1"),
         want_held=3000, want_uid="u2"),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_apply(case):
    out = ledger_ops.apply(case.entry, case.change, "rb", 7, case.strict)
    if case.want_fail:
        assert out is ledger_ops.FAIL
        return
    assert out is not ledger_ops.FAIL
    assert held(out) == case.want_held
    if out is not None and out is not case.entry:
        meta = ledger_ops.meta_of(out)
        assert meta["uid"] == case.want_uid and meta["seq"]["rb"] == 7
        if case.want_demand is not None:
            assert meta["demand"] == case.want_demand
    if case.entry is not None:
        assert held(case.entry) is not None and "rb" not in ledger_ops.meta_of(case.entry)["seq"]  # never changed in place


def test_replay_adds_only_the_changes_the_shard_does_not_show():
    written = entry(3000, seq={"rb": 5})  # rb's change 5 is in the shard already
    pending = [(5, WorkloadChange("take", "k", h(1000)), None), (6, WorkloadChange("take", "k", h(500)), None)]
    assert held(ledger_ops.replay(written, pending, "rb")) == 2500  # only change 6 is added
    assert held(ledger_ops.replay(written, pending, "rc")) == 1500  # another replica's numbers are its own


JSONISH = st.recursive(st.none() | st.booleans() | st.integers(-2**40, 2**40) | st.floats(allow_nan=False) | st.text(max_size=8),
                       lambda inner: st.lists(inner, max_size=6) | st.dictionaries(st.text(max_size=8), inner, max_size=6),
                       max_leaves=30)


@settings(max_examples=200, deadline=None)
@given(fifth=JSONISH, plan=JSONISH, holds=JSONISH)
def test_garbled_workload_and_gang_entries_are_ignored_never_a_crash(fifth, plan, holds):
    text = orjson.dumps({"wl:ns/Deployment/d": [1e12, holds, "r", None, fifth],
                         "gang:ns/g": [1e12, [], "r", None, {"gang": plan}]}).decode()
    entries = _entries(text)
    for key, e in entries.items():
        if key.startswith("gang:"):
            assert ledger_gangs.decode(key, e) is None or ledger_gangs.decode(key, e)[0].id == "ns/g"
        else:
            ledger_ops.replay(e, [(1, WorkloadChange("take", key, h(1)), None)], "r")  # a well-formed entry replays
