"""The reservation ledger in the Kubernetes API: quota holds committed with a compare-and-swap before "allowed".

Each replica keeps quota holds in the snapshot's `ReservationLedger` (policy/cluster/ledger.py);
alone, that makes one process exact. With several replicas, every hold a decision
takes is also written to a ConfigMap (`allot-ledger-<root>`, one per quota root: the
cohort, or the quota id of a quota outside any cohort) with `resourceVersion` set, so
the write succeeds only if nobody changed the shard since this replica last saw it
(else 409). Every replica also WATCHES the shards, so it mirrors the other
replicas' holds into its own ledger as soon as they are written, not only after a
conflict. A decision made before a shard brought in new holds of another replica is
decided again unwritten; on a 409 the request is decided again too.
Concurrent requests' holds for one shard are grouped into a single write: one write
in flight per shard, and every hold decided meanwhile goes in the next one (the
group grows with the load, with no fixed wait).

A hold is dropped from a shard when it expires (`RESERVATION_TTL`), or once the pod
exists and has for `SETTLE` seconds (time for every replica's watch to show it).
Holds written by a replica that died stay until then: nothing is leaked past expiry.

Workload holds (`wl:ns/Kind/name`: an admitted Deployment, Job, ... holding its whole
quota until its pods come) are in the shards too, shared by every replica: any replica
answering a member pod takes the pod's share from the workload's entry in the same
compare-and-swap as the pod's own hold, as a delta applied to the entry as written
(webhook/ledger/workloads.py); a take the entry no longer covers is decided again. A
replica counts such an entry as the shard holds it plus its own changes not written
yet. Releases (scale down, DELETE, suspension) are written after the answer (releasing
late only over-counts); a release seen by the watch is remembered and the entry pruned.

`ClusterLedger` composes the package's parts, each a module: the face the server calls
(webhook/ledger/face.py), the writing side (writer.py), the API calls (shardapi.py), the
reading side (mirror.py), slices (escrow.py) and the peer channel (peers.py); this module
adds the first read and the background task.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import uuid
from typing import Any

from webhook.ledger import apiclient
from webhook.ledger.admitted import SETTLE  # noqa: F401 (re-exported: seconds a hold outlives its pod's appearance)
from webhook.ledger.escrow import Escrow
from webhook.ledger.face import Face
from webhook.ledger.mirror import Mirror, _entries, _settle, _well_formed, newer  # noqa: F401 (re-exported)
from webhook.ledger.peers import Peering
from webhook.ledger.shardapi import (  # noqa: F401 (re-exported)
    CALL_TIMEOUT,
    LABEL,
    SELECTOR,
    WATCH_SECONDS,
    ShardApi,
    _gated,
    _post,
)
from webhook.ledger.shards import (  # noqa: F401 (re-exported)
    MAX_ATTEMPTS,
    MAX_HOLDS,
    PREFIX,
    PRUNE_INTERVAL,
    Changes,
    LedgerUnavailable,
    Shard,
    quota_roots,
    shard_name,
)
from webhook.ledger.writer import Writer

log = logging.getLogger("allot.ledger")


class ClusterLedger(Face, Writer, ShardApi, Mirror, Escrow, Peering):
    """Lists and watches the shards through a `kubernetes` ApiClient, gets and writes them on the loop (apiclient.py); mirrors other replicas' holds into `holds`."""

    _new_shard = Shard

    def __init__(self, api_client: Any, namespace: str, *, state: Any, replica: str | None = None,
                 escrow: bool | None = None) -> None:
        import copy

        from kubernetes import client

        # Its own connection pool: the watcher's long-poll watches hold the shared client's
        # connections, and a ledger write must never wait for (or open) a connection.
        cfg = copy.copy(api_client.configuration)
        cfg.connection_pool_maxsize = 4
        self.core = client.CoreV1Api(client.ApiClient(cfg))
        # Shard gets and writes on this loop (webhook/ledger/apiclient.py); None: through `core` in threads.
        self.api = apiclient.for_client(self.core.api_client)
        self.namespace = namespace
        self.state = state
        self.replica = replica or uuid.uuid4().hex[:12]
        self.shards: dict[str, Shard] = {}
        self.remote: dict[str, dict[str, tuple]] = {}  # key (a slice's: key@shard) -> shard name -> (holds, expiry) of another replica
        self.sums: set[str] = set()  # the keys of `remote` that are other replicas' slice-pod sums (looked at on every keeper tick)
        self.synced = False
        self.error: str | None = None
        self.roots: dict[str, str] = {}
        self._engine = None
        self.generation = 0  # bumped whenever a read brings in another replica's holds: older decisions are stale
        self.list_rv: str | None = None  # the collection's resourceVersion the watch resumes from
        self.watch_events = 0
        self.relists = 0  # full lists of the shards: the first read, then one per expired (410) watch
        self.confirmed: float | None = None  # monotonic time the API server last proved this view current (fresh.py)
        import os

        self.escrow = os.environ.get("ALLOT_LEDGER_ESCROW", "") == "1" if escrow is None else escrow  # (serve: --ledger-escrow)
        self._escrow_setup()
        self._peering_setup()
        self.seq = 0  # numbers this replica's workload changes (an entry's `seq` shows the last one written)
        self.unlanded: dict[tuple[str, str], list] = {}  # (shard, workload key) -> [(seq, change)] not written yet
        self.deferred: set[str] = set()  # gang entries read before the cluster state was listed
        self.mirrored: dict[str, object] = {}  # gang entry key -> the plan held here as another replica wrote it
        self.clashes: set[str] = set()  # gang entries another replica wrote while this one held its own plan of the gang
        self._stopped = threading.Event()

    # -- the view --

    @property
    def holds(self):
        """The snapshot's ReservationLedger every engine decides with."""
        return self.state.snapshot.reservations

    def root_of(self, qid: str) -> str:
        """The shard a quota's holds go to (the policy can change under a reload: recomputed per engine)."""
        engine = self.state.engine
        if engine is not self._engine:
            self.roots, self._engine = quota_roots(engine), engine
        return shard_name(self.roots.get(qid, qid))

    # -- reading: the first list, then the watch (what a read brings in: mirror.py) --

    async def start(self) -> None:
        """Read every shard once (readiness waits for it), retrying until the API answers."""
        while not self.synced:
            try:
                sent = time.monotonic()
                items, rv = await asyncio.to_thread(self._list)
                _gated(self.state, self._relisted, items, rv)
                self._confirm(sent)
                self.synced, self.error = True, None
            except Exception as exc:  # noqa: BLE001 - not ready until read; retried
                self.error = f"{type(exc).__name__}: {exc}"[:300]
                log.warning("cannot read the reservation ledger: %s", self.error)
                await asyncio.sleep(1.0)

    def _confirm(self, at: float) -> None:
        """The API server proved the view current as of `at` (monotonic; run on the loop after what it proves was applied)."""
        if self.confirmed is None or at > self.confirmed:
            self.confirmed = at

    async def run(self) -> None:
        """Background task: read the shards, watch them, and prune expired and settled holds while idle."""
        await self.start()
        if self.api is not None:
            self.api.keep()  # (closed below: a ledger that never runs, or before its first read, opens a connection per request)
        loop = asyncio.get_running_loop()
        thread = threading.Thread(target=self._watch_thread, args=(loop,), name="allot-ledger-watch", daemon=True)
        thread.start()
        keeper = loop.create_task(self.keep_slices()) if self.escrow else None  # claim, renew, return slices
        try:
            while True:
                await asyncio.sleep(PRUNE_INTERVAL)
                if self.deferred and self.state.cluster.synced:
                    _gated(self.state, self._mirror_deferred)
                now = time.time()
                for shard in list(self.shards.values()):
                    if not shard.flushing and any(self._droppable(k, e, now) or self._newly_seen(k, e)
                                                  for k, e in shard.entries.items()):
                        shard.pruned_at = 0.0
                        fut = loop.create_future()
                        shard.pending.append((None, (), 0.0, fut, float("inf")))  # a prune is never stale
                        self._kick(shard)
        finally:
            self._stopped.set()
            if keeper is not None:
                keeper.cancel()
            if self.api is not None:
                await self.api.close()

