"""The running server's state: the current compiled engine, the cluster snapshot, and their health.

Everything here is read by request handlers on the event loop and replaced whole
(one attribute assignment) by the reloader and the watcher, so a request sees
either the old engine or the new one, never a mix.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from webhook.server.decisionlog import DecisionLog
from webhook.server.gate import DecisionGate
from webhook.server.metrics import Metrics

ON_ERROR = ("allow", "deny")
DEFAULT_MAX_BODY = 7 * 1024 * 1024  # object + oldObject of up to 3 MiB each (etcd's limit) plus envelope
# A decision runs inline on the loop (cheap) only when the slowest recent one is far
# below the time left; otherwise it runs in a thread so the timeout can still be met.
INLINE_HEADROOM = 8
PROBATION = 16  # decisions a fresh engine runs off-loop before it is trusted inline
DECAY = 0.99


@dataclass(frozen=True, slots=True)
class PolicyStatus:
    """What is loaded (generation, source, digest) and the last rejected attempt, for /readyz."""

    generation: int = 0
    source: str = ""
    digest: str = ""
    blocks: int = 0
    loaded_at: float | None = None
    last_error: str | None = None
    last_error_at: float | None = None
    rejected: int = 0

    def to_json(self) -> dict:
        """A JSON-ready dict."""
        return {
            "generation": self.generation,
            "source": self.source,
            "digest": self.digest,
            "blocks": self.blocks,
            "loaded_at": self.loaded_at,
            "last_error": self.last_error,
            "last_error_at": self.last_error_at,
            "rejected": self.rejected,
        }


@dataclass
class ClusterStatus:
    """Where the snapshot comes from and whether every watched kind finished its first list."""

    source: str = ""
    synced: bool = False
    kinds: dict[str, dict] = field(default_factory=dict)  # kind -> {"synced", "resource_version", "restarts", "error"}

    def to_json(self) -> dict:
        """A JSON-ready dict."""
        return {"source": self.source, "synced": self.synced, "kinds": {k: dict(v) for k, v in self.kinds.items()}}


class DecisionTimer:
    """Tracks how slow the current engine's decisions are, to choose inline or off-loop execution."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        """Forget history: a new engine starts on probation."""
        self.count = 0
        self.slowest = 0.0

    def observe(self, seconds: float) -> None:
        """Record one decision's duration into a decaying maximum (halves in about 70 decisions)."""
        self.count += 1
        decayed = self.slowest * DECAY
        self.slowest = seconds if seconds > decayed else decayed

    def inline_ok(self, budget: float) -> bool:
        """True if running on the loop cannot plausibly overrun `budget` seconds."""
        return self.count >= PROBATION and self.slowest * INLINE_HEADROOM < budget


class State:
    """The mutable heart of one server process; handlers read, reloader and watcher replace."""

    def __init__(
        self,
        *,
        engine: Any = None,
        snapshot: Any = None,
        admission: Any = None,
        on_error: str = "deny",
        mode: str | None = None,
        metrics: Metrics | None = None,
        log: DecisionLog | None = None,
        max_body: int = DEFAULT_MAX_BODY,
        default_timeout: float = 10.0,
    ) -> None:
        if on_error not in ON_ERROR:
            raise ValueError(f"on_error must be one of {ON_ERROR}, not {on_error!r}")
        if admission is None:
            from policy import admission as admission_module  # the engine's envelope parser/encoder

            admission = admission_module
        self.admission = admission
        self.on_error = on_error
        self.mode = mode
        self.metrics = metrics or Metrics()
        self.log = log or DecisionLog(None)
        self.max_body = max_body
        self.default_timeout = default_timeout  # the API server's own default is 10 s
        self.timer = DecisionTimer()
        self.gate = DecisionGate()  # decisions and loop-side updates of decision state never interleave (gate.py)
        self.policy = PolicyStatus()
        self.cluster = ClusterStatus()
        self.tls: dict = {}
        self.engine = None
        self.snapshot = snapshot
        self.ledger: Any = None  # webhook/ledger ClusterLedger when holds are shared through the API; only its face is called (webhook/ledger/face.py)
        self.reclaim: Any = None  # webhook/reclaim ReclaimController with --reclaim on|audit: records admitted plans, the leader carries them out
        self.meter: Any = None  # webhook/meter MeterService when budgets are metered through the API; rebound on every swap
        if engine is not None:
            self.swap_engine(engine, PolicyStatus(generation=1, source="(given)"))

    # -- swaps: single assignments, so readers on the loop never see half an update --

    def swap_engine(self, engine: Any, status: PolicyStatus) -> None:
        """Install a compiled engine and its status; the decision timer restarts on probation."""
        self.timer.reset()
        self.engine = engine
        self.policy = status
        self.metrics.policy_generation.set(status.generation)
        self.metrics.policy_digest.clear()
        self.metrics.policy_digest.labels(status.digest).set(1)
        self._rebind_meter()

    def reject_policy(self, message: str, now: float) -> None:
        """Record a policy set that failed to load; the running engine stays."""
        self.policy = replace(
            self.policy, last_error=message, last_error_at=now, rejected=self.policy.rejected + 1
        )

    def swap_snapshot(self, snapshot: Any, *, source: str, synced: bool) -> None:
        """Install a whole new cluster snapshot (file load or full relist)."""
        self.snapshot = snapshot
        self.cluster.source = source
        self.cluster.synced = synced
        self._rebind_meter()

    def _rebind_meter(self) -> None:
        """The budget meter follows the engine and snapshot serving now (its use carried over: webhook/meter/service.py)."""
        if self.meter is not None:
            self.meter.bind()

    # -- health --

    def ready(self) -> tuple[bool, dict]:
        """(ready, detail): ready once a policy set is loaded and the cluster is fully synced."""
        problems = []
        if self.engine is None:
            problems.append("no policy set loaded" + (f": {self.policy.last_error}" if self.policy.last_error else ""))
        if self.snapshot is None or not self.cluster.synced:
            problems.append("cluster state not synced yet")
        problem = None if self.ledger is None else self.ledger.not_ready()
        if problem is not None:
            problems.append(problem)
        detail = {
            "ready": not problems,
            "priority_classes": {"drift": [d.to_json() for d in self.priority_drift()]},
            "problems": problems,
            "policy": self.policy.to_json(),
            "cluster": self.cluster.to_json(),
            "tls": dict(self.tls),
            "on_error": self.on_error,
            "mode": self.mode,
            "digest": self.policy.digest,
            "decisions": self.gate.detail(),  # updates waiting on a decision thread: a hung one shows here
            "ledger": None if self.ledger is None else self.ledger.detail(),
            "reclaim": None if self.reclaim is None else self.reclaim.detail(),
        }
        return not problems, detail

    def priority_drift(self) -> list:
        """Declared priority classes whose live PriorityClass differs (policy/blocks/priority_drift.py); updates the metric.

        Reported, not a readiness problem: the patch already carries the live values, and
        a replica going unready would not make the classes agree.
        """
        policy_set = getattr(self.engine, "policy_set", None)  # stand-in engines have none
        drift = []
        if policy_set is not None and self.snapshot is not None and self.cluster.synced:
            from policy.blocks.priority_drift import priority_drift

            drift = priority_drift(policy_set.priorities, self.snapshot)
        gauge = self.metrics.priority_drift
        gauge.clear()
        for d in drift:
            gauge.labels(d.name, d.field).set(1)
        return drift


def warm_engine(engine: Any, snapshot: Any) -> None:
    """Build an engine's indexes over the snapshot (quota ledger, placement index) before it serves.

    Tens of milliseconds for gangs and per_gpu at demo scale, seconds at hypercluster
    scale: that must never land inside the first admission request after a start or reload.
    """
    warm = getattr(engine, "warm", None) or getattr(engine, "state_for", None)  # stand-ins have neither
    if warm is not None and snapshot is not None:
        warm(snapshot)
        meter_at = getattr(getattr(engine, "state_for", lambda s: None)(snapshot), "meter_at", None)
        if meter_at is not None:  # budgets: the meter reads every live pod once, here rather than in a request
            import time

            meter_at(int(time.time() * 1000))


def adopt_gangs(engine: Any, previous: Any, snapshot: Any, now: float) -> list[str]:
    """Hand the running engine's placed gangs (domains, held slots) to the engine replacing it; their keys."""
    adopt = getattr(engine, "adopt", None)  # stand-ins have none
    if adopt is None or previous is None or snapshot is None:
        return []
    return adopt(previous, snapshot, now)
