"""Prometheus metrics of the webhook, on a registry per server so tests and benches stay independent."""

from __future__ import annotations

import bisect

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics, generate_latest
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily
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
        # The three per-request metrics live in plain dicts, folded into families at scrape
        # time: prometheus-client's locked children cost ~10 us each on every request.
        self._hot = _HotPath()
        r.register(self._hot)
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
        self.policy_digest = Gauge(
            "allot_policy_digest_info", "1 for the policy bundle digest this replica serves.", ["digest"], registry=r
        )
        self.ledger_writes = Counter(
            "allot_ledger_writes", "Cluster ledger shard writes by result (ok, conflict, error, full).", ["result"], registry=r
        )
        self.ledger_write_seconds = Histogram(
            "allot_ledger_write_seconds", "Time of one successful ledger shard write (a group of holds).",
            buckets=(0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0), registry=r,
        )
        self.cluster_synced = Gauge("allot_cluster_synced", "1 once every watched kind finished its first list.", registry=r)
        # Loop-side updates (watch events, ledger mirror, reload) waiting for a decision thread to let go of the
        # gate (webhook/server/gate.py): a queue that keeps growing means a decision is hung. Set on each scrape.
        self.deferred_updates = Gauge("allot_deferred_updates", "Loop-side updates waiting for a decision thread.", registry=r)
        self.deferred_oldest = Gauge(
            "allot_deferred_oldest_seconds", "How long the oldest waiting loop-side update has waited.", registry=r)
        self.deferred_longest = Gauge(
            "allot_deferred_longest_seconds", "The longest any loop-side update has waited for a decision thread.", registry=r)
        self.priority_drift = Gauge(
            "allot_priority_class_drift",
            "1 per declared priority class whose live PriorityClass differs, by field (value, preemptionPolicy, "
            "globalDefault, missing); refreshed on each scrape and /readyz.",
            ["class", "field"],
            registry=r,
        )

    def gate(self, detail: dict) -> None:
        """Set the deferred-update gauges from DecisionGate.detail()."""
        self.deferred_updates.set(detail["deferred"])
        self.deferred_oldest.set(detail["oldest_wait_s"])
        self.deferred_longest.set(detail["longest_wait_s"])

    def count_decision(self, endpoint: str, allowed: bool, seconds: float, reasons) -> None:
        """The per-request metrics in one call (loop thread only)."""
        self._hot.count(endpoint, allowed, seconds, reasons)

    def render(self) -> tuple[bytes, str]:
        """The text exposition and its content type."""
        return generate_latest(self.registry), CONTENT_TYPE_LATEST

    def value(self, name: str, labels: dict[str, str] | None = None) -> float:
        """One sample's current value (0 if absent); for tests and the demo summary."""
        got = self.registry.get_sample_value(name, labels or {})
        return 0.0 if got is None else got


class _HotPath:
    """Decisions, block findings and latency as plain counters, exposed as standard metric families."""

    def __init__(self) -> None:
        self.decisions: dict[tuple[str, str], int] = {}
        self.findings: dict[tuple[str, str, str], int] = {}
        self.latency: dict[str, list] = {}  # endpoint -> [bucket counts..., +Inf count, sum]

    def count(self, endpoint: str, allowed: bool, seconds: float, reasons) -> None:
        """Record one answered request."""
        key = (endpoint, "allowed" if allowed else "denied")
        d = self.decisions
        d[key] = d.get(key, 0) + 1
        f = self.findings
        for r in reasons:
            fkey = (r.block, r.code, r.mode)
            f[fkey] = f.get(fkey, 0) + 1
        h = self.latency.get(endpoint)
        if h is None:
            h = self.latency[endpoint] = [0] * (len(LATENCY_BUCKETS) + 1) + [0.0]
        h[bisect.bisect_left(LATENCY_BUCKETS, seconds)] += 1
        h[-1] += seconds

    def collect(self):
        """Metric families for the registry (called at scrape time)."""
        c = CounterMetricFamily("allot_decisions", "Admission decisions by endpoint and result (allowed, denied).",
                                labels=["endpoint", "result"])
        for labels, v in list(self.decisions.items()):
            c.add_metric(list(labels), v)
        yield c
        c = CounterMetricFamily("allot_block_findings", "Findings by policy block, reason code and mode (enforce, warn, audit).",
                                labels=["block", "code", "mode"])
        for labels, v in list(self.findings.items()):
            c.add_metric(list(labels), v)
        yield c
        h = HistogramMetricFamily("allot_decision_duration_seconds", "Time from a request's body read to its encoded response.",
                                  labels=["endpoint"])
        for endpoint, counts in list(self.latency.items()):
            cumulative, buckets = 0, []
            for bound, n in zip(LATENCY_BUCKETS, counts):
                cumulative += n
                buckets.append((repr(bound), cumulative))
            buckets.append(("+Inf", cumulative + counts[len(LATENCY_BUCKETS)]))
            h.add_metric([endpoint], buckets, sum_value=counts[-1])
        yield h
