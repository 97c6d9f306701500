"""The peer channel: a denial only another replica's slice stands behind, decided by that replica over real HTTPS.

Replicas as in tests/webhook/server/test_ledger_escrow.py (the API double through the real
`kubernetes` client, escrow on), each also serving the peer routes on its listener.
"""

from __future__ import annotations

import asyncio
import contextlib
import time

import orjson
import pytest

from tests.webhook.server.test_ledger import NS, SHARD, post, until, until_ready
from tests.webhook.server.test_ledger import replica as plain_replica
from tests.webhook.server.test_ledger_escrow import (QUOTA, VersionedDouble, assert_every_version_fits, charged,
                                                     shard_entries, slices_held, wave)
from tests.webhook.server.test_ledger_escrow import escrow_on, pki, policy_dir  # noqa: F401 (the same fixtures)
from tests.webhook.wh_harness import make_pki, pod, review, running
from webhook.ledger import peers
from webhook.ledger.escrow import WANT_SUFFIX
from webhook.ledger.peers import PeerKeys


@pytest.fixture(scope="module")
def other_pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("other-pki"))


class FakeTLS:
    """The three attributes PeerKeys follows, over files a test rewrites."""

    def __init__(self, pki) -> None:
        self.cert_path, self.key_path, self.generation = str(pki["cert"]), str(pki["key"]), 1


def enable(state, url: str, reloading) -> None:
    """Advertise the replica's own listener as its peer address (serve gives the channel a listener of its own)."""
    state.ledger.enable_peers(url.removeprefix("https://"), PeerKeys(reloading))


@contextlib.asynccontextmanager
async def two_replicas(double, url, policy_dir, pki_a, pki_b, *, with_peers=True, lines=None):
    """Replicas a and b over the double, serving HTTPS (a with `pki_a`), ready, their slices (and peer entries) out.

    Yields (a, its URL, b, its URL, a session to b).
    """
    a, b = plain_replica(policy_dir, url, lines), plain_replica(policy_dir, url)
    async with running(a, pki_a, tasks=(a.ledger.run,)) as (ua, _, ta), \
            running(b, pki_b, tasks=(b.ledger.run,)) as (ub, sb, tb):
        if with_peers:
            enable(a, ua, ta)
            enable(b, ub, tb)
        await until_ready(a)
        await until_ready(b)
        await until("idle replicas to claim slices ahead of demand", lambda: len(slices_held(double)) == 2, 15.0)
        if with_peers:
            await until("the replicas to advertise their peer addresses beside their slices",
                        lambda: len([k for k in shard_entries(double) if k.startswith(peers.PEER_PREFIX)]) == 2, 15.0)
        yield a, ua, b, ub, sb


def asks(state, result: str) -> float:
    return state.ledger.escrow_metrics.peer.labels(result)._value.get()


# -- the proof between replicas --

SIGNED = ("/peer/validate", "digest-1", "0.500", b'{"x": 1}')


@pytest.mark.parametrize("name,change,want_ok", [
    ("as signed", {}, True),
    ("another body", {"body": b'{"x": 2}'}, False),
    ("another path", {"path": "/peer/mutate"}, False),
    ("another policy digest", {"digest": "digest-2"}, False),
    ("another budget", {"budget": "9.000"}, False),
    ("31 s later", {"now": 31.0}, False),
    ("29 s earlier", {"now": -29.0}, True),
])
def test_a_signature_holds_only_for_what_was_signed_and_only_for_a_while(pki, name, change, want_ok):
    keys = PeerKeys(FakeTLS(pki))
    now = 1_800_000_000.0
    signature = keys.sign(*SIGNED, now)
    path, digest, budget, body = (change.get(k, v) for k, v in zip(("path", "digest", "budget", "body"), SIGNED))
    assert keys.verify(signature, path, digest, budget, body, now + change.get("now", 0.0)) is want_ok, name


@pytest.mark.parametrize("signature", [None, "", "garbage", "1800000000.000:", "nan:" + "0" * 64, "1800000000.000:" + "0" * 64])
def test_a_missing_or_malformed_signature_is_refused(pki, signature):
    assert not PeerKeys(FakeTLS(pki)).verify(signature, *SIGNED, 1_800_000_000.0)


def test_another_serving_key_cannot_sign_and_a_reloaded_pair_replaces_the_keys(pki, other_pki, tmp_path):
    now = 1_800_000_000.0
    ours, theirs = PeerKeys(FakeTLS(pki)), PeerKeys(FakeTLS(other_pki))
    assert not ours.verify(theirs.sign(*SIGNED, now), *SIGNED, now)
    assert ours.pin != theirs.pin
    tls = FakeTLS(pki)
    tls.cert_path, tls.key_path = str(tmp_path / "tls.crt"), str(tmp_path / "tls.key")
    (tmp_path / "tls.crt").write_bytes(pki["cert"].read_bytes())
    (tmp_path / "tls.key").write_bytes(pki["key"].read_bytes())
    rotating = PeerKeys(tls)
    assert rotating.pin == ours.pin and rotating.verify(ours.sign(*SIGNED, now), *SIGNED, now)
    (tmp_path / "tls.crt").write_bytes(other_pki["cert"].read_bytes())
    (tmp_path / "tls.key").write_bytes(other_pki["key"].read_bytes())
    assert rotating.current().pin == ours.pin  # the TLS reload has not happened: the keys follow it, not the files
    tls.generation += 1
    assert rotating.current().pin == theirs.pin and rotating.verify(theirs.sign(*SIGNED, now), *SIGNED, now)


def test_a_peer_entry_key_names_its_replica_and_address():
    assert peers.address_of("peer/r1/10.0.0.5:40123") == ("r1", "https://10.0.0.5:40123")
    assert peers.address_of("peer/r1/[fd00::5]:40123") == ("r1", "https://[fd00::5]:40123")
    for key in ("peer/", "peer/r1", "peer/r1/", "peer//10.0.0.5:1", "escrow/r1", "team-a/p"):
        assert peers.address_of(key) is None, key


# -- over HTTPS, between replicas --

def test_a_denial_behind_an_idle_replicas_slice_is_admitted_by_its_holder_with_no_want(pki, policy_dir):
    """All requests to b: past what b can hold, a's idle slice admits b's pods when b asks; the quota is exact."""

    async def scenario():
        double = VersionedDouble()
        url = await double.start()
        lines: list = []
        try:
            async with two_replicas(double, url, policy_dir, pki, pki, lines=lines) as (a, _, b, ub, sb):
                got = 0
                for w in range(QUOTA // 8 + 1):  # waves of 8 pods, all to b
                    got += await wave([(ub, sb)], [f"b{w}-{i}" for i in range(8)])
                    assert got <= QUOTA
                assert got == QUOTA
                assert asks(b, "admitted") >= 1 and a.ledger.slice_admits >= asks(b, "admitted")
                # The admissions a made for b are a's slice pods: a's next writes charge them in its sums.
                await until("pods admitted for a peer to be charged", lambda: charged(double) == QUOTA * 1000, 15.0)
                assert_every_version_fits(double, QUOTA * 1000)
                peer_lines = [x for x in lines if x.get("endpoint") == "peer" and x.get("result") == "allowed"
                              and "failure" not in x]
                assert len(peer_lines) >= asks(b, "admitted")  # a logged what it decided for b, as "peer"
                declined = [x for x in lines if x.get("endpoint") == "peer" and x.get("failure") == "peer_declined"]
                assert all(x["result"] == "denied" for x in declined)  # what b was told: not here
                status, doc = await post(sb, f"{ub}/validate?timeout=10s", review(pod("one-more", gpus=1)))
                assert status == 200 and doc["response"]["allowed"] is False  # and the quota stays exact
        finally:
            await double.stop()

    asyncio.run(scenario())


def test_without_peers_the_same_burst_needs_a_want_and_with_them_it_needs_none(pki, policy_dir):
    """The channel is what removed the want: the same scenario with it off writes the want object."""

    async def scenario(with_peers: bool) -> tuple[int, bool, float]:
        double = VersionedDouble()
        url = await double.start()
        try:
            async with two_replicas(double, url, policy_dir, pki, pki, with_peers=with_peers) as (_, _, b, ub, sb):
                got = await wave([(ub, sb)], [f"b{i}" for i in range(QUOTA + 4)])
                wanted = any(o["metadata"]["name"] == SHARD + WANT_SUFFIX
                             and any(k.startswith("want/") for k in orjson.loads(o["data"].get("holds") or "{}"))
                             for o in double.items("configmaps", NS))
                wanted = wanted or b.ledger.escrow_metrics.want.labels("admitted")._sum.get() > 0
                # Every one of those requests had its ledger time observed once, whichever way it went.
                assert b.metrics.value("allot_ledger_request_seconds_count") == QUOTA + 4
                return got, wanted, asks(b, "admitted")
        finally:
            await double.stop()

    off = asyncio.run(scenario(False))
    on = asyncio.run(scenario(True))
    assert off[0] == on[0] == QUOTA
    assert off[1] and off[2] == 0
    assert on[2] >= 1


def test_asks_that_are_not_signed_with_the_serving_key_change_nothing(pki, other_pki, policy_dir):
    async def scenario():
        double = VersionedDouble()
        url = await double.start()
        try:
            a = plain_replica(policy_dir, url)
            async with running(a, pki, tasks=(a.ledger.run,)) as (ua, sa, ta):
                enable(a, ua, ta)
                await until_ready(a)
                await until("a slice to be claimed", lambda: len(slices_held(double)) == 1, 15.0)
                body = orjson.dumps(review(pod("x", gpus=1)))
                digest = a.policy.digest

                async def ask(signer, path="/peer/validate", dig=digest, budget="0.500", data=body, sign_path=None):
                    headers = {peers.DIGEST: dig, peers.BUDGET: budget, "Content-Type": "application/json"}
                    if signer is not None:
                        headers[peers.SIGNATURE] = signer.sign(sign_path or path, dig, budget, data, time.time())
                    async with sa.post(ua + path, data=data, headers=headers) as resp:
                        return resp.status, orjson.loads(await resp.read())

                ours, theirs = PeerKeys(ta), PeerKeys(FakeTLS(other_pki))
                assert (await ask(None))[0] == 403
                assert (await ask(theirs))[0] == 403
                assert (await ask(ours, sign_path="/peer/mutate"))[0] == 403  # signed for another route
                status, doc = await ask(ours, dig="another-policy")
                assert status == 200 and doc["admitted"] is False and doc["left"]  # declines, says what is left
                assert (await ask(ours, budget="soon"))[0] == 400
                assert (await ask(ours, data=b"not json"))[0] == 400
                assert (await ask(ours, path="/peer/elsewhere"))[0] == 404
                assert a.ledger.slice_admits == 0  # nothing above admitted anything
                status, doc = await ask(ours)
                assert status == 200 and doc["admitted"] is True and doc["doc"]["response"]["allowed"] is True
                assert a.ledger.slice_admits == 1
                # Asks reuse their connections: a TLS handshake per ask cost ~3 ms each and made asks queue.
                client = peers.PeerClient(ours)
                try:
                    for _ in range(20):
                        got = await client.ask(ua, "validate", orjson.dumps(review(pod("y", namespace="elsewhere"))),
                                               digest, 0.5)
                        assert got is not None and got["admitted"] is True  # (no quota there: nothing spent)
                    assert client.opened == 1
                    await asyncio.gather(*(client.ask(ua, "validate", body, digest, 0.5) for _ in range(12)))
                    assert client.opened <= peers.PARALLEL  # concurrent asks share at most PARALLEL connections
                finally:
                    await client.close()
        finally:
            await double.stop()

    asyncio.run(scenario())


def test_a_holder_that_cannot_be_reached_or_shows_another_certificate_only_costs_time(pki, other_pki, policy_dir):
    """b asks a, whose listener is another certificate's (not pinned): unanswered, then the want path; still exact."""

    async def scenario():
        double = VersionedDouble()
        url = await double.start()
        try:
            async with two_replicas(double, url, policy_dir, other_pki, pki) as (a, _, b, ub, sb):
                got = await wave([(ub, sb)], [f"b{i}" for i in range(QUOTA + 4)])
                assert got == QUOTA
                assert asks(b, "unanswered") >= 1 and asks(b, "admitted") == 0
                assert a.ledger.slice_admits == 0
                assert_every_version_fits(double, QUOTA * 1000)
        finally:
            await double.stop()

    asyncio.run(scenario())


# -- sizing by demand --

def test_with_the_channel_a_replica_spending_fast_claims_past_its_fair_share_and_the_quota_stays_exact(pki, policy_dir):
    """A measured rate sizes the next slice up to all the free capacity outside a's slice; without the channel it cannot."""

    async def scenario():
        double = VersionedDouble()
        url = await double.start()
        try:
            async with two_replicas(double, url, policy_dir, pki, pki) as (a, _, b, ub, sb):
                shard, now = b.ledger.shards[SHARD], time.time()
                a_slice = slices_held(double)[f"escrow/{a.ledger.replica}"]
                assert shard.rate == 0.0
                fair = b.ledger._slice_for(shard, now)  # nothing measured yet: the fair share
                shard.rate = 1e9  # milli-GPU/s: far more than the shard has
                eager = b.ledger._slice_for(shard, now)
                channel, b.ledger.peers = b.ledger.peers, None
                without = b.ledger._slice_for(shard, now)
                b.ledger.peers = channel
                free = QUOTA * 1000 - a_slice  # what b's view counts as used: a's slice (b's own is b's to spend)
                assert list(eager.values()) == [free - free % 1000]
                assert without == fair and list(fair.values()) == [(free + a_slice) // 4 // 1000 * 1000]
                # Then the burst, all to b: b's slices grow with its rate, a lends what it holds; exactly the quota.
                got = await wave([(ub, sb)], [f"b{i}" for i in range(QUOTA + 4)])
                assert got == QUOTA
                assert shard.rate > 0
                await until("admitted pods to be charged", lambda: charged(double) == QUOTA * 1000, 15.0)
                assert_every_version_fits(double, QUOTA * 1000)
        finally:
            await double.stop()

    asyncio.run(scenario())
