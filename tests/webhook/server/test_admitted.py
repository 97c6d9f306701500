"""Slice pods as sums (webhook/ledger/admitted.py): what a write puts in the shard, and what a reader counts of it."""

from __future__ import annotations

import pytest

from webhook.ledger import admitted

Q = "quota team-a"


def hold(milli: int) -> tuple:
    return ((Q, milli, 0, None, milli),)


def summed(entries: dict, key: str) -> int:
    return sum(h[1] for h in entries[key][1])


@pytest.mark.parametrize("case", [
    # unrecorded: pod -> (milli, expires in s); shown: pods the writer's snapshot shows
    dict(name="none shown: one unseen sum, living as long as its last hold",
         pods={"ns/a": (1000, 60), "ns/b": (2000, 30)}, shown=set(), want_unseen=3000, want_seen=0, want_settled=set()),
    dict(name="shown pods move to a seen sum and leave the writer's unrecorded",
         pods={"ns/a": (1000, 60), "ns/b": (2000, 30)}, shown={"ns/b"}, want_unseen=1000, want_seen=2000,
         want_settled={"ns/b"}),
    dict(name="an expired hold is summed nowhere (the pod never came)",
         pods={"ns/a": (1000, -1), "ns/b": (500, 30)}, shown=set(), want_unseen=500, want_seen=0, want_settled={"ns/a"}),
    dict(name="all shown: no unseen sum left",
         pods={"ns/a": (1000, 60)}, shown={"ns/a"}, want_unseen=0, want_seen=1000, want_settled={"ns/a"}),
], ids=lambda c: c["name"])
def test_write_sums_the_slice_pods_by_what_the_writer_shows(case):
    now = 1000.0
    unrecorded = {k: (hold(m), now + t) for k, (m, t) in case["pods"].items()}
    entries = {"admitted/r1/unseen-3": [now + 50, [list(hold(9000)[0])], "r1", None], "ns/x": [now + 5, [], "r2", None]}
    settled = admitted.write(entries, unrecorded, replica="r1", shows=case["shown"].__contains__, pods_rv="42", now=now,
                             settle=15.0)
    assert set(settled) == case["want_settled"]
    assert "admitted/r1/unseen-3" not in entries  # the last write's unseen sum is replaced, never added to
    assert "ns/x" in entries  # other entries are left alone
    unseen = [k for k in entries if k.startswith("admitted/r1/unseen-")]
    if case["want_unseen"]:
        assert unseen == ["admitted/r1/unseen-42"] and summed(entries, unseen[0]) == case["want_unseen"]
        live = [now + t for m, t in case["pods"].values() if t > 0]
        assert entries[unseen[0]][0] == max(live)  # counted as long as a per-pod hold would be
    else:
        assert not unseen
    if case["want_seen"]:
        assert summed(entries, "admitted/r1/seen-42") == case["want_seen"]
        assert entries["admitted/r1/seen-42"][0] == now + 15.0
    else:
        assert "admitted/r1/seen-42" not in entries


def test_seen_sums_at_one_version_merge_and_at_most_SEEN_KEEP_are_kept_without_losing_a_milli_gpu():
    now = 1000.0
    entries: dict = {}
    total = 0
    for i in range(admitted.SEEN_KEEP + 5):
        for again in range(2):  # the second write at the same pod version adds to the first's sum
            key = f"ns/p{i}-{again}"
            admitted.write(entries, {key: (hold(1000), now + 60)}, replica="r1", shows=lambda k: True,
                           pods_rv=str(100 + i), now=now, settle=15.0)
            total += 1000
    seen = {k: e for k, e in entries.items() if admitted.seen_rv(k) is not None}
    assert len(seen) == admitted.SEEN_KEEP
    assert sum(h[1] for e in seen.values() for h in e[1]) == total
    # the oldest were merged into later versions: deducted later by a reader, never earlier
    assert min(admitted.seen_rv(k) for k in seen) == 100 + 5


@pytest.mark.parametrize("key,reader_rv,want", [
    ("admitted/r1/seen-42", "42", True),
    ("admitted/r1/seen-42", "43", True),
    ("admitted/r1/seen-42", "41", False),  # the reader's watch has not reached the writer's: it may lack the pods
    ("admitted/r1/seen-42", None, False),  # no pod watch: counted
    ("admitted/r1/seen-", "99", False),  # written with no pod version: always counted
    ("admitted/r1/unseen-42", "99", False),  # unseen pods are always counted
    ("team-a/seen-42", "99", False),  # a pod's own key, whatever its name
    ("admitted/r1/x/seen-42", "99", False),  # not as Allot writes it
])
def test_a_reader_stops_counting_a_seen_sum_only_once_its_own_watch_shows_those_pods(key, reader_rv, want):
    assert admitted.shown_by(key, reader_rv) is want
