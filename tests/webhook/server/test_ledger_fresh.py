"""Freshness (issue 35): a replica whose connections to the API server go half-open admits nothing from its old view.

Two `allot serve --ledger` replicas with live pod watches over the API double; replica B
reaches it through a TCP proxy that can freeze every connection open at that moment
(nothing is delivered either way, nothing is closed: a half-open connection as a dropped
conntrack entry leaves it), and optionally every connection opened later too. Admitted
pods are stored in the double as the API server would store them, so the other
replica's watch sees them and the ledger prunes their holds `SETTLE` seconds later:
exactly the moment a replica with a frozen pod watch would count neither.
"""

from __future__ import annotations

import asyncio
import contextlib
import time

from policy.cluster.snapshot import ClusterSnapshot
from tests.webhook.server import test_ledger_escrow as escrow
from tests.webhook.server.test_ledger import NS, post, until, until_ready
from tests.webhook.wh_harness import pod, review, running
from webhook.bench.apidouble import ApiDouble, api_client
from webhook.ledger import ClusterLedger, fresh
from webhook.ledger.admitted import SETTLE
from webhook.server.decisionlog import DecisionLog
from webhook.server.reload import PolicyReloader, PolicySource
from webhook.server.state import State
from webhook.server.watch import ClusterWatcher, Resource

QUOTA = escrow.QUOTA
pki, policy_dir, escrow_on = escrow.pki, escrow.policy_dir, escrow.escrow_on  # the fixtures: one 64-GPU quota, escrow on
WATCHED = (Resource("Pod", "v1", "pods"), Resource("Namespace", "v1", "namespaces"))


class FreezingProxy:
    """A loopback TCP proxy; `freeze()` makes every connection open now deliver nothing either way, without closing it."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.conns: list[dict] = []
        self.freeze_new = False  # connections accepted while set are frozen from the start (an unreachable API server)
        self.server: asyncio.base_events.Server | None = None

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self.server.sockets[0].getsockname()[1]

    def freeze(self, *, new: bool = False) -> None:
        for conn in self.conns:
            conn["frozen"] = True
        self.freeze_new = new

    async def _serve(self, reader, writer) -> None:
        conn = {"frozen": self.freeze_new, "writers": [writer]}
        self.conns.append(conn)
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            writer.close()
            return
        conn["writers"].append(up_writer)
        await asyncio.gather(self._pump(conn, reader, up_writer), self._pump(conn, up_reader, writer),
                             return_exceptions=True)

    @staticmethod
    async def _pump(conn: dict, reader, writer) -> None:
        while True:
            data = await reader.read(65536)
            if conn["frozen"]:
                await asyncio.Event().wait()  # held for ever: the peer sees silence, never a close
            if not data:
                writer.close()
                return
            writer.write(data)
            await writer.drain()

    async def stop(self) -> None:
        self.server.close()
        for conn in self.conns:
            for w in conn["writers"]:
                w.transport.abort()


def live_replica(policy_dir, url: str) -> tuple[State, ClusterWatcher]:
    """A state as `allot serve --kubeconfig … --ledger` builds it: pods and namespaces watched, holds shared."""
    state = State(on_error="deny", log=DecisionLog(None, buffered=False))
    assert PolicyReloader(state, PolicySource(str(policy_dir))).load_now()
    state.swap_snapshot(ClusterSnapshot(), source="double", synced=False)
    client = api_client(url)
    watcher = ClusterWatcher(state, client, resources=WATCHED)
    state.ledger = ClusterLedger(client, NS, state=state)
    return state, watcher


async def create(double: ApiDouble, session, url: str, name: str) -> tuple[bool, str]:
    """A 1-GPU pod CREATE judged by the replica at `url`; an admitted pod is stored, as the API server stores it."""
    obj = pod(name, gpus=1)
    status, doc = await post(session, f"{url}/validate?timeout=10s", review(obj))
    assert status == 200, doc
    response = doc["response"]
    if response["allowed"]:
        double.put("pods", obj)
    return response["allowed"], (response.get("status") or {}).get("message", "")


def stored_gpus(double: ApiDouble) -> int:
    return sum(int(p["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"]) for p in double.items("pods"))


@contextlib.asynccontextmanager
async def two_replicas(policy_dir, pki):
    """(double, proxy, (state, url, session) of A direct, of B through the proxy), both ready."""
    double = ApiDouble()
    url = await double.start()
    double.put("namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a"}})
    proxy = FreezingProxy(int(url.rsplit(":", 1)[1]))
    proxied = f"http://127.0.0.1:{await proxy.start()}"
    (a, wa), (b, wb) = live_replica(policy_dir, url), live_replica(policy_dir, proxied)
    try:
        async with running(a, pki, tasks=(wa.run, a.ledger.run)) as (ua, sa, _), \
                running(b, pki, tasks=(wb.run, b.ledger.run)) as (ub, sb, _):
            await until_ready(a)
            await until_ready(b)
            yield double, proxy, (a, ua, sa), (b, ub, sb)
    finally:
        await proxy.stop()
        await double.stop()


def test_a_half_open_replica_admits_no_pod_its_frozen_view_cannot_see_and_heals_on_new_connections(pki, policy_dir):
    """The issue's scenario: B's connections freeze, 40 creates through A, the holds of those pods are pruned, then 128 over both."""

    async def main():
        async with two_replicas(policy_dir, pki) as (double, proxy, (_, ua, sa), (b, ub, sb)):
            dialled = len(proxy.conns)
            proxy.freeze()
            first = [await create(double, sa, ua, f"a-{i}") for i in range(40)]
            assert sum(ok for ok, _ in first) == 40
            # B dials again on new connections (the old ones stay frozen) and proves its view current once more.
            frozen_at = time.monotonic()
            await until(lambda: f"B never re-dialled: {len(proxy.conns)} connections",
                        lambda: len(proxy.conns) > dialled and (b.ledger.confirmed or 0) > frozen_at
                        and (b.cluster.kinds["Pod"]["confirmed"] or 0) > frozen_at, fresh.SILENCE + 3 * fresh.WINDOW)
            await asyncio.sleep(SETTLE + 3)  # A's watch saw the 40 pods: their holds are pruned from the shard
            pending = [create(double, (sa, sb)[i % 2], (ua, ub)[i % 2], f"burst-{i}") for i in range(128)]
            answers = await asyncio.gather(*pending)
            assert stored_gpus(double) <= QUOTA, f"{stored_gpus(double)} GPUs stored against a quota of {QUOTA}"
            assert stored_gpus(double) >= QUOTA - 2, f"only {stored_gpus(double)} stored: the healed replica under-admits"
            assert sum(ok for ok, _ in answers) == stored_gpus(double) - 40

    asyncio.run(main())


def test_a_replica_cut_off_from_the_api_server_denies_with_the_reason_leaves_readyz_and_recovers_by_itself(pki, policy_dir):
    """Every connection frozen, new ones too: B is out of /readyz within the bound, denies saying why, and lends nothing."""

    async def main():
        async with two_replicas(policy_dir, pki) as (double, proxy, (_, ua, sa), (b, ub, sb)):
            proxy.freeze(new=True)
            frozen_at = time.monotonic()
            await until(lambda: b.ready()[1]["problems"], lambda: not b.ready()[0], fresh.BOUND + 2)
            out_after = time.monotonic() - frozen_at
            assert out_after <= fresh.BOUND + 1.0, out_after
            async with sb.get(f"{ub}/readyz") as resp:
                assert resp.status == 503
                assert "confirmed current" in await resp.text()
            ok, message = await create(double, sb, ub, "while-cut-off")
            assert not ok and "half-open" in message, message
            assert not b.ledger.admit_asked([], asyncio.get_running_loop()) or not b.ledger.escrow
            # The other replica still admits; the cut-off one's slices, once expired, are free for it.
            ok, _ = await create(double, sa, ua, "on-a")
            assert ok
            proxy.freeze_new = False  # the API server is reachable again: B re-dials, re-lists, and is ready
            await until(lambda: b.ready()[1]["problems"], lambda: b.ready()[0], fresh.SILENCE + 4 * fresh.WINDOW + 5)
            ok, _ = await create(double, sb, ub, "after")
            assert ok

    asyncio.run(main())
