"""The machine's own tail: a loop of fixed work timed between measured events, so an event p99 reads against it.

On a shared VM the same instructions do not take the same time: timer interrupts, the
host's other tenants and CPU speed changes put a tail on any timing. A loop whose work
never varies, timed at the same moments as the events, shows how much of an event's p99
is the machine's (the loop's own p99 / p50) and how much is the event's work.
"""

from __future__ import annotations

import time

LOOP = 400  # additions: about as long as a node event's median on this kind of machine (15-25 µs)


def spin(n: int = LOOP) -> int:
    """Work that is the same every call: `n` integer additions."""
    total = 0
    for i in range(n):
        total += i
    return total


class Floor:
    """Samples of `spin` taken between events; `figures` gives their p50, p99 and ratio."""

    def __init__(self, n: int = LOOP) -> None:
        self.n = n
        self.samples: list[int] = []

    def sample(self) -> None:
        """Time one `spin` now (call it next to each measured event)."""
        t0 = time.perf_counter_ns()
        spin(self.n)
        self.samples.append(time.perf_counter_ns() - t0)

    def figures(self) -> dict:
        """p50 / p99 in milliseconds and the loop's p99 over its p50 (1.0 on a quiet machine)."""
        if not self.samples:
            return {"runs": 0}
        ordered = sorted(self.samples)
        p50 = ordered[len(ordered) // 2] / 1e6
        p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] / 1e6
        return {"loop": self.n, "runs": len(ordered), "p50_ms": round(p50, 4), "p99_ms": round(p99, 4),
                "tail_ratio": round(p99 / p50, 2) if p50 else None}
