"""The API server's time, read from the `Date` header of its answers: the budget meter's reference, not the replica's clock."""

from __future__ import annotations

import email.utils
import statistics
import time

SAMPLES = 15  # offsets kept; the median rides out one slow answer


class ServerClock:
    """UTC ms of the API server now: the local clock plus the offset its `Date` headers show (±1 s: Date has whole seconds)."""

    def __init__(self) -> None:
        self.offsets: list[int] = []
        self.offset = 0  # ms; 0 until the first answer (the replica's own clock)

    def observe(self, date: str | None, sent: float, received: float) -> None:
        """Fold one answer's `Date` (sent between local `sent` and `received`, seconds) into the offset."""
        if not date:
            return
        try:
            server = email.utils.parsedate_to_datetime(date).timestamp()
        except (TypeError, ValueError, IndexError):
            return
        # Date truncates to the second: the server's clock was in [server, server + 1) at some point of the round trip.
        local_mid = (sent + received) / 2
        self.offsets.append(int((server + 0.5 - local_mid) * 1000))
        del self.offsets[:-SAMPLES]
        self.offset = int(statistics.median(self.offsets))

    def now_ms(self) -> int:
        """The API server's time now, in UTC ms."""
        return int(time.time() * 1000) + self.offset
