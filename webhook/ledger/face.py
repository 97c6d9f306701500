"""The ledger's face: the calls the HTTP server makes, and the protocol that commits one decision.

The server (webhook/server/) holds one `ClusterLedger` as `state.ledger` and calls only
the names of `Face` (tests/webhook/server/test_ledger_face.py checks it): commit a
decision's holds before its "allowed" leaves, forget the holds of one never answered,
whether this replica's view may admit at all (`stale`), readiness and the detail it shows,
the peer channel's holder side, start and stop. What is behind it (the writer, the
escrow, the peer client, the mirror, the API calls) the server never names.
"""

from __future__ import annotations

import asyncio
import time

from policy.cluster.ledger import RELEASES, WorkloadChange
from webhook.ledger import fresh
from webhook.ledger.shardapi import _gated
from webhook.ledger.shards import MAX_ATTEMPTS, LedgerUnavailable

# Besides `Face`'s methods, the server reads these of `ClusterLedger`: the view a decision is made on
# (`review.view`: a decision older than a shard's last foreign read is decided again), whether slices are
# kept (`--ledger-escrow`, logged at start), and the background task.
ATTRIBUTES = ("generation", "escrow", "run")


class Face:
    """The calls the server makes on `state.ledger` (a `ClusterLedger`: this is its first part, mixed in)."""

    # -- the request path --

    def involves(self, review, decision) -> bool:
        """Whether `decision` must pass through the ledger before it is answered: it took holds, or escrow may lift its denial."""
        taken = review.taken
        return bool(taken) or (taken is not None and self.escrow and not decision.allowed)

    async def commit_decision(self, review, decision, doc, cause, *, mutate: bool, state, budget_end: float, redo, fail):
        """Commit the holds `decision` took before its "allowed" is sent; decide again on a conflict or a stale view.

        `redo()` decides again (with a fresh `review.taken`); `budget_end` is the perf_counter
        deadline; `fail(cause, message)` is the server's (decision, doc) for a request the
        ledger cannot answer (`--on-error`). Returns (decision, doc, cause, attempts).
        """
        entered = time.perf_counter()
        try:
            return await _committed(self, review, decision, doc, cause, mutate=mutate, state=state,
                                    budget_end=budget_end, redo=redo, fail=fail)
        finally:
            if self.escrow:
                self.escrow_metrics.request.observe(time.perf_counter() - entered)

    def forget(self, taken: list) -> None:
        """A decision that will not be answered "allowed" here: its holds and workload changes stop counting (through the gate)."""
        _gated(self.state, self.undo, taken)

    def stale(self) -> str | None:
        """Why this replica's view cannot be proven current (it then admits nothing from it), or None.

        The one place the freshness bound lives (webhook/ledger/fresh.py): `commit` (every
        admission, in a slice or by a write), `admit_asked` (a peer's ask), the keeper (it
        claims nothing and returns its slices) and readiness all ask it. The view is the
        ledger's watch and, with a live cluster, the pod watch: each must have been confirmed
        by the API server (a list, or a watch it closed at its window) within `fresh.BOUND`.
        """
        if not self.synced:
            return "the reservation ledger has not been read yet" + (f": {self.error}" if self.error else "")
        streams = {"reservation ledger's watch": self.confirmed}
        pods = self.state.cluster.kinds.get("Pod") if getattr(self.state, "cluster", None) is not None else None
        if pods is not None:  # a live cluster (a file snapshot has no watch to go stale)
            streams["pod watch"] = pods.get("confirmed")
        return fresh.stale_reason(streams, time.monotonic())

    # -- readiness and what is held --

    def not_ready(self) -> str | None:
        """The readiness problem of the ledger, or None."""
        if not self.synced:
            return "reservation ledger not read yet" + (f": {self.error}" if self.error else "")
        return self.stale()

    def detail(self) -> dict:
        """What `/readyz` shows of the ledger."""
        return {"namespace": self.namespace, "replica": self.replica, "synced": self.synced,
                "shards": len(self.shards), "error": self.error,
                "watch_events": self.watch_events, "relists": self.relists,
                "confirmed_ago": None if self.confirmed is None else round(time.monotonic() - self.confirmed, 3),
                "peer": self.peer_key}  # the peer channel's entry (webhook/ledger/peers.py), or None

    # -- the peer channel's holder side (POST /peer/...) --

    def peer_channel(self) -> bool:
        """Whether this replica answers peers' asks."""
        return self.peer_keys is not None

    def peer_ask(self, headers, path: str, body: bytes, now: float) -> tuple[str, float] | None:
        """(the asker's policy digest, seconds it allows) of a signed ask; None if not signed with this replica set's key.

        Raises ValueError when the budget header is not a number.
        """
        from webhook.ledger import peers

        digest, allowance = headers.get(peers.DIGEST, ""), headers.get(peers.BUDGET, "")
        if not self.peer_keys.current().verify(headers.get(peers.SIGNATURE), path, digest, allowance, body, now):
            return None
        try:
            return digest, min(float(allowance), peers.ASK_MAX)
        except ValueError:
            raise ValueError(f"{peers.BUDGET} is not a number") from None

    def decline_peer(self) -> dict:
        """The reply to an ask this replica will not decide (another policy digest): what its slices have left."""
        return self.peer_reply(False)

    def answer_peer(self, review, decision, doc, cause) -> tuple[bool, dict]:
        """A peer's request decided here: (admitted, the reply). Admitted only inside this replica's slices; else its holds are forgotten."""
        loop = asyncio.get_running_loop()
        admitted = decision.allowed and cause is None and (not review.taken or self.admit_asked(review.taken, loop))
        if not admitted and review.taken:
            self.forget(review.taken)
        return admitted, self.peer_reply(admitted, doc, decision)

    # -- start and stop --

    def enable_peer_channel(self, hostport: str, tls) -> None:
        """Advertise `hostport` (this process's peer listener) and ask holders, keyed by the serving TLS files `tls`."""
        from webhook.ledger.peers import PeerKeys

        self.enable_peers(hostport, PeerKeys(tls))

    async def close(self) -> None:
        """Close the peer channel's connections (the background task `run` ends with its cancellation)."""
        if self.peers is not None:
            await self.peers.close()


async def _committed(ledger, review, decision, doc, cause, *, mutate: bool, state, budget_end: float, redo, fail):
    """`Face.commit_decision`: the protocol's loop (slices first, then a commit; a conflict decides again)."""
    attempts = 0
    if ledger.escrow and not decision.allowed and cause is None:  # denied only because of other replicas' slices?
        decision, doc, cause = await _slices_wait(ledger, review, decision, doc, cause, mutate=mutate, state=state,
                                                  budget_end=budget_end, redo=redo)
    while review.taken and decision.allowed and cause is None:
        taken = review.taken
        if any(type(t) is WorkloadChange and t.op in RELEASES for t in taken):
            ledger.submit([t for t in taken if type(t) is WorkloadChange and t.op in RELEASES])  # not awaited
            taken = review.taken = [t for t in taken if type(t) is not WorkloadChange or t.op not in RELEASES]
            if not taken:
                break
        attempts += 1
        left = budget_end - time.perf_counter()
        try:
            if left <= 0:
                raise asyncio.TimeoutError
            if await ledger.commit(taken, left, review.view):
                return decision, doc, cause, attempts
            outcome = "conflict"
        except (asyncio.TimeoutError, LedgerUnavailable) as exc:
            outcome = "timeout" if isinstance(exc, asyncio.TimeoutError) else "unavailable"
            message = str(exc) or f"the reservation ledger was not written within {max(left, 0):.2f}s"
        _gated(state, ledger.undo, taken)  # never answered "allowed": its holds and workload changes must not count here
        if outcome != "conflict":
            return (*fail(f"ledger_{outcome}", message), f"ledger_{outcome}", attempts)
        if attempts >= MAX_ATTEMPTS:
            msg = f"{attempts} conflicting writes to the reservation ledger"
            return (*fail("ledger_conflict", msg), "ledger_conflict", attempts)
        decision, doc, cause = await _redone(redo())
        if ledger.escrow and not decision.allowed and cause is None:
            decision, doc, cause = await _slices_wait(ledger, review, decision, doc, cause, mutate=mutate, state=state,
                                                      budget_end=budget_end, redo=redo)
    return decision, doc, cause, attempts


async def _slices_wait(ledger, review, decision, doc, cause, *, mutate: bool, state, budget_end: float, redo):
    """A denial other replicas' slices may lift: ask their holders over the peer channel, else wait for them (a want)."""
    from policy.decision import Decision

    if ledger.peers is not None:
        asked, sent = await ledger.ask_holders(review, decision, mutate=mutate, digest=state.policy.digest,
                                               budget_end=budget_end)
        response = (asked or {}).get("doc", {}).get("response")
        if isinstance(response, dict) and response.get("uid") == review.uid and response.get("allowed") is True:
            review.peer = str(asked.get("by") or "")
            if review.taken:  # (a denial holds nothing; were it to, the holder's admission replaces it)
                _gated(state, ledger.undo, review.taken)
            review.taken = []
            blocks = asked.get("blocks")
            return Decision(allowed=True, blocks=tuple(b for b in blocks if isinstance(b, str)) if isinstance(blocks, list) else ()), \
                asked["doc"], None
        if sent:  # the view moved while the holders were asked (a slice returned, say): what it shows now decides
            decision, doc, cause = await _redone(redo())
            if decision.allowed or cause is not None:
                return decision, doc, cause
    return await ledger.slices_back(decision, redo, budget_end) or (decision, doc, cause)


async def _redone(answer):
    """`redo()`'s answer, awaited when it decides off the loop."""
    return await answer if asyncio.iscoroutine(answer) or isinstance(answer, asyncio.Future) else answer

