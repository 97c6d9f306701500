"""Leader election with a `coordination.k8s.io/v1` Lease, as client-go's leaderelection does it.

The Lease names its holder (`holderIdentity`), how long a claim lasts (`leaseDurationSeconds`),
when it was last renewed (`renewTime`) and how often it changed hands (`leaseTransitions`).
Every acquire and renew is a replace conditional on the Lease's `resourceVersion`, so two
candidates never both win. A candidate judges another holder's claim expired by its own
monotonic clock — the time since it last *saw the record change* — never by comparing
`renewTime` with its wall clock (clocks of replicas may disagree). A leader that has not
renewed for `renew_deadline` seconds stops leading before its claim can expire for others.
"""

from __future__ import annotations

import datetime
import logging
import time

from webhook.ledger.apiclient import ApiError
from webhook.reclaim.kube import Kube, path

log = logging.getLogger("allot.reclaim")
LEASE_NAME = "allot-reclaim"


def micro_time(now: float) -> str:
    """A Kubernetes MicroTime (RFC 3339 with microseconds, UTC)."""
    return datetime.datetime.fromtimestamp(now, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderElector:
    """One candidate: `tick()` acquires or renews; `leading()` says whether this replica may act now."""

    def __init__(self, kube: Kube, namespace: str, identity: str, *, duration: float = 15.0, renew_deadline: float = 10.0,
                 clock=time.monotonic, wall=time.time) -> None:
        self.kube, self.namespace, self.identity = kube, namespace, identity
        self.duration, self.renew_deadline = duration, renew_deadline
        self.clock, self.wall = clock, wall
        self.renewed_at: float | None = None  # monotonic time of this replica's last successful acquire or renew
        self.observed: tuple | None = None  # (holder, renewTime, resourceVersion) last read
        self.observed_at = 0.0  # monotonic time the record last changed as seen here
        self.transitions = 0  # leaseTransitions as of this replica's claim: the epoch its writes carry

    @property
    def path(self) -> str:
        """The Lease's REST path."""
        return path("coordination.k8s.io/v1", "leases", self.namespace, LEASE_NAME)

    def leading(self) -> bool:
        """True while this replica's last renew is younger than the renew deadline."""
        return self.renewed_at is not None and self.clock() - self.renewed_at < self.renew_deadline

    def holder(self) -> str | None:
        """The holder as last read (this replica once it leads)."""
        return self.observed[0] if self.observed else None

    def _spec(self, lease: dict | None, acquire: bool) -> dict:
        spec = dict((lease or {}).get("spec") or {})
        stamp = micro_time(self.wall())
        spec.update(holderIdentity=self.identity, leaseDurationSeconds=round(self.duration), renewTime=stamp)
        if acquire:
            spec["acquireTime"] = stamp
        return spec

    async def tick(self) -> bool:
        """Acquire (no holder, or the holder's claim expired as observed here) or renew; whether this replica leads."""
        try:
            lease = await self.kube.get(self.path)
            now = self.clock()
            if lease is None:
                body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                        "metadata": {"name": LEASE_NAME, "namespace": self.namespace}, "spec": self._spec(None, True)}
                body["spec"]["leaseTransitions"] = 0
                return self._won(await self.kube.create(path("coordination.k8s.io/v1", "leases", self.namespace), body), now)
            spec = lease.get("spec") or {}
            seen = (spec.get("holderIdentity"), spec.get("renewTime"), lease["metadata"].get("resourceVersion"))
            if seen != self.observed:
                self.observed, self.observed_at = seen, now
            mine = spec.get("holderIdentity") == self.identity
            expired = not spec.get("holderIdentity") or now - self.observed_at >= float(spec.get("leaseDurationSeconds") or self.duration)
            if not mine and not expired:
                self.renewed_at = None
                return False
            body = {**lease, "spec": self._spec(lease, acquire=not mine)}
            if not mine:
                body["spec"]["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + 1
                log.info("reclaim lease %s/%s: taking over from %s (not renewed for %.1fs)", self.namespace, LEASE_NAME,
                         spec.get("holderIdentity"), now - self.observed_at)
            return self._won(await self.kube.replace(self.path, body), now)
        except ApiError as exc:
            if exc.status != 409:  # 409: another candidate wrote first; it leads, this one reads again next tick
                log.warning("reclaim lease %s/%s: %s %s", self.namespace, LEASE_NAME, exc.status, exc.reason)
        except Exception as exc:  # noqa: BLE001 - an unreachable API server: keep trying; leading() lapses by itself
            log.warning("reclaim lease %s/%s: %s: %s", self.namespace, LEASE_NAME, type(exc).__name__, str(exc)[:200])
        return self.leading()

    def _won(self, lease: dict, at: float) -> bool:
        spec = lease.get("spec") or {}
        if self.renewed_at is None or self.transitions != int(spec.get("leaseTransitions") or 0):
            log.info("reclaim lease %s/%s: %s leads (transitions %s)", self.namespace, LEASE_NAME, self.identity,
                     spec.get("leaseTransitions"))
        self.transitions = int(spec.get("leaseTransitions") or 0)
        self.observed = (spec.get("holderIdentity"), spec.get("renewTime"), lease["metadata"].get("resourceVersion"))
        self.observed_at = self.renewed_at = at
        return True

    async def release(self) -> None:
        """Give the Lease up on a clean stop (holder emptied), so a successor need not wait for it to expire."""
        if not self.leading():
            return
        try:
            lease = await self.kube.get(self.path)
            if lease is not None and (lease.get("spec") or {}).get("holderIdentity") == self.identity:
                spec = {**lease["spec"], "holderIdentity": None, "leaseDurationSeconds": 1}
                await self.kube.replace(self.path, {**lease, "spec": spec})
        except Exception as exc:  # noqa: BLE001 - it expires by itself
            log.info("reclaim lease release: %s", exc)
        self.renewed_at = None
