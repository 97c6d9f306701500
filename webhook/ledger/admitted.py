"""Pods a replica admitted inside its escrow slices, written to their shard as a few sums instead of one entry per pod.

A slice's pods must stay counted by every other replica until each replica's watch shows
them. Written one entry per pod, a burst's shard grew to thousands of entries and every
write and watch event carried them all (the tail of `allot bench ledger`). Instead each
replica writes, per shard, at most:

- `admitted/<replica>/unseen-<rv>`: the sum of its slice pods its own snapshot did not
  show when its pod watch was at resourceVersion `<rv>`; it expires with the last of
  their holds (`RESERVATION_TTL`), so a replica that dies leaves them counted exactly as
  long as per-pod holds would be. A reader whose pod watch is past `<rv>` may show some
  of them already (counted twice, until the writer's next write moves them to a seen
  sum): only that reader waits for the writer before it denies;
- `admitted/<replica>/seen-<rv>`: the sum of those it saw appear by the time its pod watch
  was at resourceVersion `<rv>`; it expires `SETTLE` seconds after that write (as a
  per-pod hold of a shown pod does). A reader whose own pod watch is at `<rv>` or later
  shows every one of those pods itself, so it does not count the entry (they would be
  counted twice); a reader behind it counts it.

Both are plain four-field entries: a reader that knows nothing of them counts them whole,
which is only more careful. The keys have two slashes, so they are never a pod's key.
"""

from __future__ import annotations

from collections.abc import Callable

PREFIX = "admitted/"
SETTLE = 15.0  # seconds a hold outlives the pod's appearance: every replica's watch shows the pod by then
SEEN_KEEP = 16  # seen entries kept per replica and shard; the oldest merges into the next (deducted later: only more careful)


def _rv_of(key: str, kind: str) -> int | None:
    if not key.startswith(PREFIX):
        return None
    head, sep, tail = key.rpartition(f"/{kind}-")
    if not sep or not tail.isdigit() or "/" in head[len(PREFIX):]:
        return None
    return int(tail)


def seen_rv(key: str) -> int | None:
    """The pod resourceVersion of a seen entry's key; None for any other key (or one not as Allot writes it)."""
    return _rv_of(key, "seen")


def unseen_rv(key: str) -> int | None:
    """The pod resourceVersion of an unseen entry's key; None for any other key, or one written with no pod watch."""
    return _rv_of(key, "unseen")


def is_unseen(key: str) -> bool:
    """Whether `key` is some replica's unseen sum."""
    return key.startswith(PREFIX) and "/unseen-" in key


def shown_by(key: str, pods_rv: str | None) -> bool:
    """Whether a reader whose pod watch is at `pods_rv` shows every pod of seen entry `key` itself (so does not count it)."""
    at = seen_rv(key)
    if at is None or pods_rv is None:
        return False
    try:
        return at <= int(pods_rv)
    except ValueError:
        return False


def _add(sums: dict, holds) -> None:
    for qid, milli, memory, model, model_milli in holds:
        s = sums.setdefault((qid, model), [0, 0, 0])
        s[0], s[1], s[2] = s[0] + milli, s[1] + memory, s[2] + model_milli


def _rows(sums: dict) -> list:
    return [[qid, s[0], s[1], model, s[2]] for (qid, model), s in sorted(sums.items(), key=lambda kv: (kv[0][0], kv[0][1] or ""))]


def write(entries: dict, unrecorded: dict, *, replica: str, shows: Callable[[str], bool], pods_rv: str | None,
          now: float, settle: float) -> dict:
    """Put `replica`'s sums of `unrecorded` (pod key -> (holds, expires_at)) into `entries`; returns the pods they no longer need to carry.

    Those are the pods `shows` (the writer's snapshot shows them: now in a seen entry for
    `settle` seconds) and those whose hold expired (the pod never came).
    """
    unseen: dict = {}
    seen: dict = {}
    settled: dict = {}
    last = 0.0
    for key, held in unrecorded.items():
        holds, expires_at = held
        if expires_at <= now:
            settled[key] = held
        elif shows(key):
            _add(seen, holds)
            settled[key] = held
        else:
            _add(unseen, holds)
            last = max(last, expires_at)
    rv = pods_rv if pods_rv is not None and pods_rv.isdigit() else ""  # (not an etcd revision: never deducted, never waited on)
    for key in [k for k in entries if k.startswith(f"{PREFIX}{replica}/unseen-")]:
        del entries[key]
    if unseen:
        entries[f"{PREFIX}{replica}/unseen-{rv}"] = [last, _rows(unseen), replica, None]
    if seen:
        key = f"{PREFIX}{replica}/seen-{rv}"
        old = entries.get(key)
        if old is not None and old[0] > now:  # the pod watch did not move since the last write that saw pods
            _add(seen, [tuple(h) for h in old[1]])
        entries[key] = [now + settle, _rows(seen), replica, None]
    _cap(entries, replica, now)
    return settled


def _cap(entries: dict, replica: str, now: float) -> None:
    """At most SEEN_KEEP live seen entries of `replica`: the oldest merge into the next one."""
    mine = sorted((at, key) for key in entries if key.startswith(f"{PREFIX}{replica}/")
                  and (at := seen_rv(key)) is not None and entries[key][0] > now)
    while len(mine) > SEEN_KEEP:
        (_, oldest), (_, into) = mine[0], mine[1]
        sums: dict = {}
        _add(sums, [tuple(h) for h in entries[oldest][1]])
        _add(sums, [tuple(h) for h in entries[into][1]])
        entries[into] = [max(entries[oldest][0], entries[into][0]), _rows(sums), replica, None]
        del entries[oldest]
        mine.pop(0)
