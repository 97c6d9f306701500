"""Prometheus metrics of the webhook, on a registry per server so tests and benches stay independent."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

# Admission decisions are expected in tens to hundreds of microseconds; the tail
# buckets catch placement on huge clusters and the API server's 10 s default timeout.
LATENCY_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0, 2.5, 10.0)
LAG_BUCKETS = (0.0001, 0.001, 0.01, 0.1, 0.5, 1.0, 5.0, 30.0)
disable_created_metrics()  # the *_created series double the exposition for no operational use


class Metrics:
    """Every metric the server exports; names are `allot_*`."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        r = self.registry = registry or CollectorRegistry()
        self.decisions = Counter(
            "allot_decisions", "Admission decisions by endpoint and result (allowed, denied).", ["endpoint", "result"], registry=r
        )
        self.block_findings = Counter(
            "allot_block_findings",
            "Findings by policy block, reason code and mode (enforce, warn, audit).",
            ["block", "code", "mode"],
            registry=r,
        )
        self.latency = Histogram(
            "allot_decision_duration_seconds",
            "Time from a request's body read to its encoded response.",
            ["endpoint"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.failures = Counter(
            "allot_failure_decisions",
            "Requests answered with the --on-error decision, by cause (exception, timeout, no_engine).",
            ["cause", "outcome"],
            registry=r,
        )
        self.bad_requests = Counter(
            "allot_bad_requests", "Requests rejected with HTTP 4xx before a decision, by reason.", ["reason"], registry=r
        )
        self.reloads = Counter("allot_policy_reloads", "Policy load attempts by result (ok, error).", ["result"], registry=r)
        self.policy_generation = Gauge("allot_policy_generation", "Generation of the policy set serving now.", registry=r)
        self.tls_reloads = Counter("allot_tls_reloads", "Certificate reload attempts by result.", ["result"], registry=r)
        self.watch_events = Counter(
            "allot_watch_events", "Cluster watch events applied to the snapshot.", ["kind", "type"], registry=r
        )
        self.watch_lag = Histogram(
            "allot_watch_lag_seconds",
            "Delay from a watch event's arrival to its application on the snapshot.",
            ["kind"],
            buckets=LAG_BUCKETS,
            registry=r,
        )
        self.watch_restarts = Counter(
            "allot_watch_restarts", "Watch reconnects by kind and reason (expired, error, closed).", ["kind", "reason"], registry=r
        )
        self._per_decision: dict = {}
        self._findings: dict = {}
        self.cluster_synced = Gauge("allot_cluster_synced", "1 once every watched kind finished its first list.", registry=r)

    def count_decision(self, endpoint: str, allowed: bool, seconds: float, reasons) -> None:
        """The per-request metrics in one call, with label children cached (`.labels()` costs ~10 us each)."""
        key = (endpoint, allowed)
        pair = self._per_decision.get(key)
        if pair is None:
            pair = self._per_decision[key] = (
                self.decisions.labels(endpoint, "allowed" if allowed else "denied"),
                self.latency.labels(endpoint),
            )
        pair[0].inc()
        pair[1].observe(seconds)
        for r in reasons:
            fkey = (r.block, r.code, r.mode)
            child = self._findings.get(fkey)
            if child is None:
                if len(self._findings) > 10000:  # block ids come from policy files: bounded, but be safe
                    self._findings.clear()
                child = self._findings[fkey] = self.block_findings.labels(*fkey)
            child.inc()

    def render(self) -> tuple[bytes, str]:
        """The text exposition and its content type."""
        return generate_latest(self.registry), CONTENT_TYPE_LATEST

    def value(self, name: str, labels: dict[str, str] | None = None) -> float:
        """One sample's current value (0 if absent); for tests and the demo summary."""
        got = self.registry.get_sample_value(name, labels or {})
        return 0.0 if got is None else got
