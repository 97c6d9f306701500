"""Freshness: a replica admits only from a view the API server has confirmed current within `BOUND` seconds.

A watch that looks alive proves nothing: on a half-open connection (a dropped conntrack
entry, a load balancer failover, a stuck proxy) it delivers no event and no error, for
ever. So a view is trusted only as of the last exchange that *ended* as the API server
ends it: a list (a consistent read: current as of when it was sent), or a watch that the
server closed at its `timeoutSeconds`. Watches that feed admission are short (`WINDOW`),
so a healthy one proves itself every few seconds; one that stays silent past its window
is given up and dialled again on a new connection. Times are this process's monotonic
clock, never the wall clock (a paused or resumed replica, a stepped clock).

Why a closed window proves the view: the server's timer starts when it has received the
watch, after this replica sent it at `sent`; before it ends the response it has written
every event its watch cache dispatched, so everything committed before
`sent + WINDOW - LAG` has been delivered (`LAG`: the watch cache's dispatch lag, far
below a second in every measurement, allowed a whole second here).

Why `BOUND` is 8 s: a hold is pruned `SETTLE` (15 s) after some replica's watch first
showed its pod (webhook/ledger/admitted.py). A replica whose pod and ledger views were
current within 8 s holds, for any pod, either its hold or the pod itself, as long as the
replicas' wall clocks agree within the remaining 7 s. A healthy short watch is at most
`WINDOW + LAG` plus its re-dial old, which leaves the rest for a loaded machine.
"""

from __future__ import annotations

BOUND = 8.0  # seconds: a view not confirmed within this is stale (admits nothing, /readyz fails, lends nothing)
WINDOW = 3  # seconds: the server-side timeout of a watch whose close confirms its view
LAG = 1.0  # seconds allowed for the API server's watch cache to dispatch a committed change
SILENCE = WINDOW + 2.0  # seconds without a byte after which a watch is given up (a half-open connection)
BACKOFF_MAX = 2.0  # seconds: such a watch re-dials at least this often while it fails (it must recover by itself)


def confirmed_by_window(sent: float, ended: float, window: float = WINDOW) -> float | None:
    """The monotonic time a watch sent at `sent` and closed cleanly at `ended` proves its view current as of; None if it closed early.

    A close before the window (a server shutting down, a proxy) proves only what was
    delivered, not that nothing else was committed: it confirms nothing.
    """
    if ended - sent < window - LAG:
        return None
    return sent + window - LAG


def stale_reason(streams: dict[str, float | None], now: float, bound: float = BOUND) -> str | None:
    """Why the view made of `streams` (name -> last confirmed monotonic time) cannot be trusted at `now`, or None."""
    for name, at in streams.items():
        if at is None:
            return f"the {name} has not been confirmed by the API server yet"
        age = now - at
        if age > bound:
            return (f"the {name} was last confirmed current by the API server {age:.1f} s ago "
                    f"(bound {bound:.0f} s): its connection may be half-open; admitting nothing from it")
    return None
