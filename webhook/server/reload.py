"""Policy loading and hot reload: read, verify, compile off the request path, swap only a clean set.

A set with any error diagnostic, an unreadable directory or a bundle that fails
verification never replaces the running engine; the attempt is logged, counted
(`allot_policy_reloads_total{result="error"}`) and shown in `/readyz` detail.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from dataclasses import dataclass

from webhook.server.state import PolicyStatus, adopt_gangs, warm_engine

log = logging.getLogger("allot.reload")


class PolicyLoadError(Exception):
    """A policy set that must not be served; the message says why in one or a few lines."""


@dataclass(frozen=True, slots=True)
class PolicySource:
    """Where policies come from: a directory (or file) of `.policy` sources, or a signed bundle."""

    path: str
    bundle: bool = False
    trust: tuple[str, ...] = ()

    def describe(self) -> str:
        """Human-readable origin for logs and /readyz."""
        return f"bundle {self.path}" if self.bundle else self.path


def fingerprint(source: PolicySource) -> tuple:
    """Cheap change detector: (path, mtime, size) of every input file."""
    paths: list[str] = []
    if source.bundle:
        paths = [source.path, *source.trust]
    elif os.path.isdir(source.path):
        for root, dirs, files in os.walk(source.path):
            dirs[:] = sorted(d for d in dirs if not d.startswith("."))
            paths.extend(os.path.join(root, f) for f in sorted(files) if f.endswith(".policy"))
    else:
        paths = [source.path]
    out = []
    for p in paths:
        try:
            st = os.stat(p)
            out.append((p, st.st_mtime_ns, st.st_size))
        except OSError:
            out.append((p, None, None))
    return tuple(out)


def _read_sources(source: PolicySource) -> list[tuple[str, str]]:
    if source.bundle:
        try:
            from webhook import bundle
        except ImportError:  # pragma: no cover - the bundle module ships with issue 6
            raise PolicyLoadError("policy bundles are not built yet; use --policy DIR") from None
        if not source.trust:
            raise PolicyLoadError("--bundle needs at least one --trust PUBLIC_KEY")
        try:
            return bundle.load_bundle_sources(source.path, list(source.trust))
        except bundle.BundleError as exc:
            raise PolicyLoadError(f"bundle {source.path} refused: {exc}") from None
        except OSError as exc:
            raise PolicyLoadError(f"cannot read {exc.filename}: {exc.strerror}") from None
    from webhook.errors import UsageError
    from webhook.sources import read_policy_sources, relative_sources

    try:
        sources = read_policy_sources([source.path])
    except UsageError as exc:
        raise PolicyLoadError(str(exc)) from None
    if not sources:
        raise PolicyLoadError(f"{source.path}: no .policy files")
    return relative_sources(source.path, sources)  # as its bundle holds them: one digest, one set of locations


def _digest(sources: list[tuple[str, str]]) -> str:
    from webhook.bundle import compute_digest  # same digest as a bundle of these sources

    return compute_digest(sources)


def _count_blocks(policy_set) -> int:
    return sum(
        len(getattr(policy_set, name, ()))
        for name in ("gpus", "topologies", "priorities", "cohorts", "quotas", "fractions", "gangs", "agents", "rules")
    )


def _render_errors(diagnostics, limit: int = 5) -> str:
    errors = [d for d in diagnostics if getattr(d, "severity", "error") == "error"]
    lines = [str(d) for d in errors[:limit]]
    more = f" (+{len(errors) - limit} more)" if len(errors) > limit else ""
    return f"{len(errors)} error(s): " + "; ".join(lines) + more


def load_engine(source: PolicySource, *, mode: str | None, generation: int, now: float):
    """(engine, status) for the set at `source`; raises PolicyLoadError. Pure CPU + file reads: run off-loop."""
    from lang import compile_policies
    from policy.engine import Engine

    sources = _read_sources(source)
    policy_set, diagnostics = compile_policies(sources)
    if policy_set is None or any(getattr(d, "severity", "error") == "error" for d in diagnostics):
        raise PolicyLoadError(_render_errors(diagnostics) if diagnostics else "the policy set did not compile")
    engine = Engine(policy_set, mode_override=mode)
    status = PolicyStatus(
        generation=generation,
        source=source.describe(),
        digest=_digest(sources),
        blocks=_count_blocks(policy_set),
        loaded_at=now,
    )
    return engine, status


class PolicyReloader:
    """Loads the policy source into `state` at start, then on every change seen by polling."""

    def __init__(self, state, source: PolicySource, *, interval: float = 2.0) -> None:
        self.state = state
        self.source = source
        self.interval = interval
        self._seen: tuple | None = None

    def _install(self, result) -> None:
        # Warming and adopting change the snapshot's indexes: never while a decision thread uses them.
        gate = getattr(self.state, "gate", None)
        if gate is None:
            self._swap(result)
        else:
            gate.run(self._swap, result)

    def _swap(self, result) -> None:
        engine, status = result
        prev = self.state.policy
        status = PolicyStatus(**{**status.to_json(), "rejected": prev.rejected, "last_error": prev.last_error,
                                 "last_error_at": prev.last_error_at})
        # Build the new engine's indexes over the snapshot here, on the loop thread (the only
        # thread that changes the snapshot), so the first request after the swap does not pay.
        warm_engine(engine, self.state.snapshot)
        adopted = adopt_gangs(engine, self.state.engine, self.state.snapshot, time.time())
        self.state.swap_engine(engine, status)
        self.state.metrics.reloads.labels("ok").inc()
        log.info("policy set generation %d loaded from %s (%s)%s", status.generation, status.source, status.digest,
                 f"; {len(adopted)} placed gang(s) kept" if adopted else "")

    def _reject(self, exc: Exception) -> None:
        message = str(exc) if isinstance(exc, PolicyLoadError) else f"{type(exc).__name__}: {exc}"
        self.state.reject_policy(message, time.time())
        self.state.metrics.reloads.labels("error").inc()
        kept = "keeping generation %d" % self.state.policy.generation if self.state.engine else "nothing loaded"
        log.error("policy set from %s rejected (%s): %s", self.source.describe(), kept, message)

    def load_now(self) -> bool:
        """Synchronous load (at start); True if a new engine is serving."""
        self._seen = fingerprint(self.source)
        try:
            result = load_engine(self.source, mode=self.state.mode, generation=self.state.policy.generation + 1, now=time.time())
        except Exception as exc:  # noqa: BLE001 - any failure to load is a rejected set, not a crash
            self._reject(exc)
            return False
        self._install(result)
        return True

    async def check(self) -> bool | None:
        """Reload if the inputs changed: True swapped (or queued behind a deciding thread), False rejected, None unchanged."""
        seen = fingerprint(self.source)
        if seen == self._seen:
            return None
        self._seen = seen
        loop = asyncio.get_running_loop()
        gen = self.state.policy.generation + 1
        try:
            result = await loop.run_in_executor(
                None, lambda: load_engine(self.source, mode=self.state.mode, generation=gen, now=time.time())
            )
        except Exception as exc:  # noqa: BLE001
            self._reject(exc)
            return False
        self._install(result)
        return True

    async def watch(self) -> None:
        """Poll forever (cancel to stop); polling works on ConfigMap mounts where inotify misses symlink swaps."""
        while True:
            await asyncio.sleep(self.interval)
            await self.check()
