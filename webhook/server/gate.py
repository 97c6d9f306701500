"""Mutual exclusion for decision state: decisions and loop-side updates never interleave.

Decisions mutate shared state (quota holds, placement counts: read-modify-write ints
the GIL can split). A decision thread holds `lock` while it decides. The loop never
blocks on it: an inline decision only try-acquires (else it goes to a thread), and a
loop-side update (watch event, ledger mirror, engine swap) runs now if the lock is free
and nothing is queued, else waits in a FIFO drained, in order, when the lock is let go.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import logging
import threading
import time

log = logging.getLogger("allot.gate")
FAIR_WAIT = 1.0  # seconds a decision thread lets queued loop updates go first (they are drained on every release)


class DecisionGate:
    """One lock over decision state, with a FIFO of loop-side updates that found it taken."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.queue: collections.deque = collections.deque()  # (fn, enqueued perf_counter)
        self.empty = threading.Event()
        self.empty.set()
        self.loop: asyncio.AbstractEventLoop | None = None
        self.deferred_total = 0
        self.inside = False  # the loop holds the lock now (an update or inline decision): nested updates run at once
        self.longest_wait = 0.0  # the longest any drained update waited, seconds

    # -- loop side --

    def run(self, fn, *args, **kwargs) -> None:
        """Apply `fn(*args)` now if the lock is free and nothing waits before it, else queue it (loop thread only)."""
        call = functools.partial(fn, *args, **kwargs) if args or kwargs else fn
        if self.inside:  # called from an update or decision already holding the lock on this thread
            call()
            return
        if not self.queue and self.lock.acquire(blocking=False):
            self.inside = True
            try:
                call()
            finally:
                self.inside = False
                self.lock.release()
            if self.queue:  # a nested or posted update found it taken meanwhile
                self.drain()
            return
        self.queue.append((call, time.perf_counter()))
        self.deferred_total += 1
        self.empty.clear()
        self.drain()  # the lock may be free with a queue left behind: keep the order, but go now

    def drain(self) -> None:
        """Run queued updates in order while the lock is free (loop thread only; scheduled on every thread release)."""
        while self.queue:
            if self.inside or not self.lock.acquire(blocking=False):
                return  # the holder's release schedules the next drain
            self.inside = True
            try:
                while self.queue:
                    call, since = self.queue.popleft()
                    self.longest_wait = max(self.longest_wait, time.perf_counter() - since)
                    try:
                        call()
                    except Exception:  # noqa: BLE001 - one bad update must not strand the ones behind it
                        log.exception("deferred update %r failed", call)
            finally:
                self.inside = False
                self.lock.release()
        self.empty.set()

    def try_enter(self) -> bool:
        """For an inline decision on the loop: True holding the lock (queued updates applied first), False if a thread has it."""
        if self.inside:  # a decision inside a loop update (none today): it already holds the lock
            return False
        if self.queue:  # updates that arrived first are applied first
            self.drain()
            if self.queue:
                return False
        if not self.lock.acquire(blocking=False):
            return False
        self.inside = True
        return True

    def leave(self) -> None:
        """Release after an inline decision (and apply what queued meanwhile)."""
        self.inside = False
        self.lock.release()
        if self.queue:
            self.drain()

    async def turn(self) -> None:
        """Wait (without blocking the loop) until every update queued so far is applied."""
        pause = 0.001
        while self.queue:
            await asyncio.sleep(pause)
            pause = min(pause * 2, 0.05)
            self.drain()

    # -- thread side --

    def decide(self, fn, *args):
        """Run `fn(*args)` in a decision thread holding the lock; queued loop updates go first, then are drained on release."""
        self.empty.wait(FAIR_WAIT)
        try:
            with self.lock:
                return fn(*args)
        finally:
            self._wake()

    def _wake(self) -> None:
        loop = self.loop
        if loop is not None and self.queue:  # (an update queued after this check found the lock free itself)
            try:
                loop.call_soon_threadsafe(self.drain)
            except RuntimeError:  # the loop closed: shutting down
                pass

    # -- health --

    def detail(self) -> dict:
        """For /readyz and /metrics: how many updates wait, how long the oldest has, the longest any waited."""
        queue = self.queue
        oldest = time.perf_counter() - queue[0][1] if queue else 0.0
        return {"busy": self.lock.locked(), "deferred": len(queue), "oldest_wait_s": round(oldest, 6),
                "longest_wait_s": round(max(self.longest_wait, oldest), 6), "deferred_total": self.deferred_total}
