"""The peer channel: a request that only another replica's slice denies is decided by that replica, over HTTPS, with no API write.

Without it such a denial writes a `want` into the API and waits for the holder's answer
there (webhook/ledger/escrow.py): two writes and two watch deliveries, the slowest
requests of a burst's end. With it the replica sends the AdmissionReview itself to the
slice's holder (`POST /peer/validate` or `/peer/mutate`), which decides it as its own
request and answers "admitted" only if its holds fit inside its own slice (no write: the
pod becomes one of that slice's pods, charged by the holder's next write like the rest).
Otherwise the holder says how much of its slice is left, which counts as its `left`
answer in the want object would; the asking replica then goes on as without the channel.
So the channel only ever adds admissions a slice already covers, and a peer that cannot
be reached, refuses or is late changes nothing but the time taken.

Who may ask: the request carries an HMAC (SHA-256) of its path, policy digest, budget,
time and body, keyed by the serving private key (every replica of a Deployment mounts the
same Secret); who answers: the asking side pins the serving certificate's SHA-256, so a
peer address taken over by anything else is not believed. Where: a replica with
`--peer-address HOST` listens on HOST at a port of its own (one per process, `--workers`
too) and writes `peer/<replica>/<host:port>` next to its slice in the same shard write,
expiring with it (docs/escrow.md, "The peer channel").
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import time

import orjson

PEER_PREFIX = "peer/"
SIGNATURE = "X-Allot-Peer"  # "<unix time>:<hex HMAC>"
DIGEST = "X-Allot-Digest"  # the asker's policy digest: a holder serving another policy declines
BUDGET = "X-Allot-Budget"  # seconds the holder has to decide
CONTEXT = b"allot-peer/1\n"
SKEW = 30.0  # seconds a signature is accepted either side of the holder's clock
TRIES = 2  # holders asked per request, the roomiest first
PARALLEL = 4  # asks in flight per holder and shard; later ones look at the answers first (a spent slice is asked once)
CONNECT_TIMEOUT = 0.2
ASK_MAX = 0.5  # seconds one ask may take at most (a peer that is gone costs no more)


class PeerKeys:
    """The proof between replicas: an HMAC key derived from the serving key, and the serving certificate's SHA-256 pin."""

    def __init__(self, tls) -> None:
        self.tls = tls  # a ReloadingTLS: followed when it reloads the files
        self.generation = -1
        self.mac = self.pin = b""
        self.fingerprint = None  # one aiohttp Fingerprint per pin: the pool reuses a connection only for the same object
        self.current()

    def pinned(self):
        """The aiohttp `ssl=` value that accepts only the serving certificate (the same object while it is unchanged)."""
        import aiohttp

        if self.fingerprint is None:
            self.fingerprint = aiohttp.Fingerprint(self.pin)
        return self.fingerprint

    def current(self) -> PeerKeys:
        """These keys, loaded again if the serving certificate was reloaded (a failed load keeps the old ones)."""
        if self.tls.generation != self.generation:
            from cryptography import x509
            from cryptography.hazmat.primitives import serialization

            try:
                with open(self.tls.key_path, "rb") as fh:
                    key = serialization.load_pem_private_key(fh.read(), password=None)
                with open(self.tls.cert_path, "rb") as fh:
                    cert = x509.load_pem_x509_certificate(fh.read())
            except (OSError, ValueError, TypeError):
                return self  # mid-rotation: the TLS reload retries too
            der = key.private_bytes(serialization.Encoding.DER, serialization.PrivateFormat.PKCS8,
                                    serialization.NoEncryption())  # one form, however the PEM was written
            self.mac = hashlib.sha256(CONTEXT + der).digest()
            self.pin = hashlib.sha256(cert.public_bytes(serialization.Encoding.DER)).digest()
            self.fingerprint = None
            self.generation = self.tls.generation
        return self

    def _mac(self, stamp: str, path: str, digest: str, budget: str, body: bytes) -> str:
        head = f"{stamp}\n{path}\n{digest}\n{budget}\n".encode()
        return hmac.new(self.mac, head + body, hashlib.sha256).hexdigest()

    def sign(self, path: str, digest: str, budget: str, body: bytes, now: float) -> str:
        """The signature header of one ask."""
        stamp = f"{now:.3f}"
        return f"{stamp}:{self._mac(stamp, path, digest, budget, body)}"

    def verify(self, signature: str | None, path: str, digest: str, budget: str, body: bytes, now: float) -> bool:
        """Whether `signature` was made with this key over these parts, within SKEW of `now`."""
        stamp, _, mac = (signature or "").partition(":")
        try:
            at = float(stamp)
        except ValueError:
            return False
        if not abs(at - now) <= SKEW or len(mac) != 64:
            return False
        return hmac.compare_digest(mac, self._mac(stamp, path, digest, budget, body))


class PeerClient:
    """Asks holders over one keep-alive pool; any failure is None (the caller goes on without the peer)."""

    def __init__(self, keys: PeerKeys) -> None:
        self.keys = keys
        self._session = None
        self.opened = 0  # connections opened (each a TLS handshake): a handful per peer, not one per ask

    async def ask(self, url: str, endpoint: str, body: bytes, digest: str, budget: float) -> dict | None:
        """POST the review `body` to the peer at `url`; its JSON answer, or None (unreachable, refused, not pinned, late)."""
        import aiohttp

        keys = self.keys.current()
        path = f"/peer/{endpoint}"
        allowance = f"{budget:.3f}"
        headers = {SIGNATURE: keys.sign(path, digest, allowance, body, time.time()), DIGEST: digest, BUDGET: allowance,
                   "Content-Type": "application/json"}
        try:
            async with self._pool().post(url + path, data=body, headers=headers, ssl=keys.pinned(),
                                          timeout=aiohttp.ClientTimeout(total=budget, sock_connect=CONNECT_TIMEOUT)) as resp:
                if resp.status != 200:
                    return None
                answer = orjson.loads(await resp.read())
        except (aiohttp.ClientError, asyncio.TimeoutError, TimeoutError, orjson.JSONDecodeError, ValueError, OSError):
            return None
        return answer if isinstance(answer, dict) else None

    def _pool(self):
        import aiohttp

        if self._session is None:  # keep-alive as long as the holder's server keeps it (aiohttp's 75 s)
            trace = aiohttp.TraceConfig()

            async def opened(*_) -> None:
                self.opened += 1

            trace.on_connection_create_end.append(opened)
            self._session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=64, limit_per_host=PARALLEL,
                                                                                 keepalive_timeout=70),
                                                  trace_configs=[trace])
        return self._session

    async def warm(self, url: str) -> None:
        """Open the pinned connections to a newly seen peer ahead of the first asks (TLS handshakes off the requests' path)."""
        import aiohttp

        async def one() -> None:
            try:
                async with self._pool().get(url + "/healthz", ssl=self.keys.current().pinned(),
                                            timeout=aiohttp.ClientTimeout(total=2.0)) as resp:
                    await resp.read()
            except (aiohttp.ClientError, asyncio.TimeoutError, TimeoutError, ValueError, OSError):
                pass  # asked anyway when needed; a failure there falls back

        await asyncio.gather(*(one() for _ in range(PARALLEL)))  # at once: one connection each

    async def close(self) -> None:
        """Close the pool."""
        if self._session is not None:
            await self._session.close()
            self._session = None


def address_of(key: str) -> tuple[str, str] | None:
    """(replica, "https://host:port") of a `peer/<replica>/<host:port>` entry key; None if not one."""
    parts = key.split("/", 2)
    if len(parts) != 3 or parts[0] + "/" != PEER_PREFIX or not parts[1] or not parts[2]:
        return None
    return parts[1], f"https://{parts[2]}"


class Peering:
    """The peer channel's part of `ClusterLedger` (mixed in, beside Escrow): advertise, ask holders, admit what peers ask."""

    def _peering_setup(self) -> None:
        """Per-ledger peer state: off until `enable_peers`."""
        self.peer_key: str | None = None
        self.peers: PeerClient | None = None
        self.peer_keys: PeerKeys | None = None
        # (shard, replica, slice expiry) -> milli-GPU: a holder's answer over the channel, as binding as one in the want object
        self.peer_answers: dict[tuple[str, str, float], int] = {}
        self._ask_gates: dict[tuple[str, str], asyncio.Semaphore] = {}  # (shard, holder) -> asks in flight
        self._warmed: set[str] = set()  # peer URLs a connection was opened to

    def enable_peers(self, hostport: str, keys: PeerKeys) -> None:
        """Advertise `hostport` (the peer listener) next to every slice and ask holders with `keys`."""
        self.peer_key = f"{PEER_PREFIX}{self.replica}/{hostport}"
        self.peer_keys = keys
        self.peers = PeerClient(keys)

    def _advertise(self, entries: dict, exp: float) -> None:
        """In a shard write: this replica's peer entry beside its slice (expiring with it), or none without a slice."""
        mine = f"{PEER_PREFIX}{self.replica}/"
        for key in [k for k in entries if k.startswith(mine) and k != self.peer_key]:
            del entries[key]
        if self.peer_key is None:
            return
        if exp:
            entries[self.peer_key] = [exp, [], self.replica, None]
        else:
            entries.pop(self.peer_key, None)

    def _peer_urls(self, shard, now: float) -> dict[str, str]:
        """Replica -> peer URL of the live peer entries in `shard` (other replicas only)."""
        out = {}
        for key, entry in shard.entries.items():
            if key.startswith(PEER_PREFIX) and entry[0] > now and entry[2] != self.replica:
                found = address_of(key)
                if found is not None and found[0] == entry[2]:
                    out[found[0]] = found[1]
        return out

    def warm_peers(self, shard, loop) -> None:
        """After a read of `shard`: open a connection to each peer newly advertised there (in the background)."""
        if self.peers is None:
            return
        for url in self._peer_urls(shard, time.time()).values():
            if url not in self._warmed and len(self._warmed) < 256:
                self._warmed.add(url)
                loop.create_task(self.peers.warm(url))

    def _peer_left(self, name: str, now: float) -> dict[tuple[str, float], int]:
        """(replica, slice expiry) -> milli-GPU those holders said over the channel can still come back in shard `name`."""
        out = {}
        for (shard, who, exp), left in list(self.peer_answers.items()):
            if exp <= now:
                del self.peer_answers[(shard, who, exp)]
            elif shard == name:
                out[(who, exp)] = left
        return out

    def peer_reply(self, admitted: bool, doc: dict | None = None, decision=None) -> dict:
        """A holder's answer to an ask: the answer document when admitted; always what is left of each of its slices."""
        left = {name: [s.slice_exp, self.unspent(s)] for name, s in self.shards.items() if s.slice}
        if not admitted:
            return {"admitted": False, "left": left}
        return {"admitted": True, "by": self.replica, "doc": doc, "left": left,
                "blocks": list(decision.blocks) if decision is not None else []}

    def admit_asked(self, taken: list, loop) -> bool:
        """A peer's request decided here: True if its holds fit inside this replica's slices (admitted, no write)."""
        if not self.escrow or self.stale() is not None:  # a peer is lent only from a view this replica can vouch for
            return False
        by_shard, changes, gangs = self._parts(taken)
        if changes or gangs or any(name not in self.shards for name in by_shard):
            return False  # a workload or gang change, or a shard never read here: only a write could hold it
        now = time.time()
        for name in by_shard:
            self.shards[name].used_at = now
        return self._in_slices(by_shard, now, loop) is None

    async def ask_holders(self, review, decision, *, mutate: bool, digest: str, budget_end: float) -> tuple[dict | None, bool]:
        """Send a request only other replicas' slices deny to the roomiest holders; (the admitting answer or None, whether it waited).

        A holder that declines says what its slices have left; that is kept as its answer
        (`_answers`), so a denial its slice cannot lift is final without a want. When it
        waited (for an ask, or for the asks before it) and nothing admitted, the caller
        decides again: the view may have moved meanwhile (a slice returned, say), and a
        denial decided on the old view must not be judged on the new one.
        """
        if self.peers is None or getattr(review, "body", None) is None:
            return None, False
        wanted = self.returnable(decision)
        if not wanted or len(wanted) != 1:
            return None, False  # nothing to ask for, or a request over several shards: the want path
        (name, qid), need = next(iter(wanted.items()))
        shard = self.shards[name]
        urls = self._peer_urls(shard, time.time())
        metrics = self.escrow_metrics
        start = time.perf_counter()
        result = "none"  # (an ask cut short by an exception is not observed as any ending)
        try:
            answer, asked, result = await self._ask_roomiest(review, shard, qid, need, urls, mutate, digest, budget_end)
            return answer, asked
        finally:
            if result != "none":
                metrics.peer_wait.labels(result).observe(time.perf_counter() - start)

    async def _ask_roomiest(self, review, shard, qid: str, need: int, urls: dict, mutate: bool, digest: str,
                            budget_end: float) -> tuple[dict | None, bool, str]:
        """`ask_holders`' loop over the holders: (admitting answer or None, whether it waited, how it ended)."""
        metrics = self.escrow_metrics
        name = shard.name
        asked, result = False, "none"
        for who in self._roomiest(shard, qid, urls)[:TRIES]:
            asked = True  # (from here on the loop may wait: the caller decides again, on the view it then has)
            result = "skipped" if result == "none" else result
            gate = self._ask_gates.setdefault((name, who), asyncio.Semaphore(PARALLEL))
            async with gate:  # (a holder's answer to the asks before may show its slice cannot help)
                if self._room_of(shard, qid, who) < need:
                    continue
                budget = min(ASK_MAX, budget_end - time.perf_counter() - max(0.05, 4 * shard.write_s))
                if budget < 0.01:
                    break
                answer = await self.peers.ask(urls[who], "mutate" if mutate else "validate", review.body, digest, budget)
            if answer is None:
                metrics.peer.labels("unanswered").inc()
                result = "unanswered"
                continue
            self._keep_left(who, answer.get("left"))
            if answer.get("admitted") is True and isinstance(answer.get("doc"), dict):
                metrics.peer.labels("admitted").inc()
                return answer, True, "admitted"
            metrics.peer.labels("declined").inc()
            result = "declined"
        return None, asked, result

    def _room_of(self, shard, qid: str, who: str) -> int:
        """Milli-GPU of `qid` that `who`'s live slices in `shard` may still admit: each whole, or what its holder said is left."""
        now = time.time()
        answers = self._answers(shard, now)
        return sum(min(m, answers.get((w, exp), m)) for m, exp, w in self._foreign(shard, now)[1].get(qid, ()) if w == who)

    def _roomiest(self, shard, qid: str, urls: dict) -> list[str]:
        """The holders of `qid`'s slices in `shard` with a peer address, the most room first."""
        return sorted((who for who in urls if self._room_of(shard, qid, who) > 0),
                      key=lambda who: -self._room_of(shard, qid, who))

    def _keep_left(self, who: str, left) -> None:
        """Keep a holder's `left` ({shard: [slice expiry, milli-GPU]}) as its answers; anything else is ignored."""
        if not isinstance(left, dict):
            return
        for name, pair in left.items():
            if (isinstance(name, str) and isinstance(pair, list) and len(pair) == 2
                    and isinstance(pair[0], (int, float)) and type(pair[1]) is int and pair[1] >= 0):
                key = (name, who, float(pair[0]))
                self.peer_answers[key] = min(pair[1], self.peer_answers.get(key, pair[1]))
