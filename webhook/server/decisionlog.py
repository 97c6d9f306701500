"""One JSON line per admission decision: enough to audit it, and with `requests=True` to replay it."""

from __future__ import annotations

import sys
from typing import IO

import orjson

FLUSH_BYTES = 64 * 1024
_NL = orjson.OPT_APPEND_NEWLINE  # no second bytes object per line
FLUSH_SECONDS = 0.25  # at most this much of the log is lost if the process is killed


class DecisionLog:
    """Writes decision records as JSON lines to a text or binary stream (None: discard)."""

    def __init__(self, stream: IO | None = sys.stdout, *, requests: bool = False, buffered: bool = False) -> None:
        self.requests = requests
        self.buffered = buffered  # lines are then written by `flush()` (a periodic task), not one syscall each
        self._pending = bytearray()
        self._write = None
        if stream is not None:
            buffer = getattr(stream, "buffer", stream)  # bytes straight to the buffer: orjson emits bytes
            self._out = buffer.write
            self._out_flush = getattr(buffer, "flush", lambda: None)
            self._write = self._emit

    def _emit(self, line: bytes) -> None:
        if self.buffered:
            self._pending += line
            if len(self._pending) >= FLUSH_BYTES:
                self.flush()
        else:
            self._out(line)
            self._out_flush()

    def flush(self) -> None:
        """Write out buffered lines; never raises."""
        if not self._pending:
            return
        data, self._pending = bytes(self._pending), bytearray()
        try:
            self._out(data)
            self._out_flush()
        except Exception:  # noqa: BLE001 - a full disk must not fail admission
            pass

    async def flush_periodically(self, interval: float = FLUSH_SECONDS) -> None:
        """Flush every `interval` seconds until cancelled, then once more."""
        import asyncio

        try:
            while True:
                await asyncio.sleep(interval)
                self.flush()
        finally:
            self.flush()

    def record(
        self,
        *,
        ts: float,
        uid: str,
        endpoint: str,
        kind: str | None,
        namespace: str | None,
        name: str | None,
        operation: str | None,
        dry_run: bool,
        allowed: bool,
        blocks: list[str],
        codes: list[str],
        duration_s: float,
        failure: str | None = None,
        request: dict | None = None,
        placement=None,
        plan=None,
        digest: str | None = None,
        ledger_attempts: int = 0,
        peer: str | None = None,
    ) -> None:
        """Write one line; never raises (a full disk must not fail admission)."""
        if self._write is None:
            return
        line = {
            "ts": round(ts, 6),
            "uid": uid,
            "endpoint": endpoint,
            "kind": kind,
            "namespace": namespace,
            "name": name,
            "operation": operation,
            "dry_run": dry_run,
            "result": "allowed" if allowed else "denied",
            "blocks": blocks,
            "codes": codes,
            "duration_ms": round(duration_s * 1000, 3),
            "digest": digest,  # the policy bundle this replica decided with
        }
        if ledger_attempts:  # holds written to the cluster ledger (more than 1: conflicts, decided again)
            line["ledger_attempts"] = ledger_attempts
        if peer is not None:  # admitted inside another replica's slice, asked over the peer channel
            line["peer"] = peer
        if placement is not None:  # where a gang was placed (and reserved, unless dry run)
            line["placement"] = {"topology": placement.topology, "level": placement.level, "value": placement.value,
                                 "reservation": placement.reservation}
        if plan is not None:  # the workloads a reclaim or preemption plan evicts or suspends (docs/reclaim.md)
            line["plan"] = plan.to_json()
        if failure:
            line["failure"] = failure
        if self.requests and request is not None:
            line["request"] = request  # the AdmissionReview `request`, so the decision can be replayed
        try:
            self._write(orjson.dumps(line, option=_NL))
        except Exception:  # noqa: BLE001 - logging is best effort by design
            pass

    def error(self, *, ts: float, uid: str | None, stage: str, message: str) -> None:
        """A line for a failure outside a decision (bad request, exception), with the uid when known."""
        if self._write is None:
            return
        try:
            self._write(orjson.dumps({"ts": round(ts, 6), "uid": uid, "error": stage, "message": message}, option=_NL))
        except Exception:  # noqa: BLE001
            pass
