"""Pure decision layer: IR + subject + cluster state -> Decision (no I/O, no clock).

Pipeline verbs, top-down: `compile_engine(policy_set)` once, then
`engine.decide(request, snapshot, now, mutate=…)` per AdmissionReview request;
`policy.admission` wraps requests and responses. Imports are lazy to keep
`import policy` cheap for commands that only need the subject types.
"""

from __future__ import annotations


def compile_engine(policy_set, *, mode_override: str | None = None):
    """Compile a checked `lang.ir.PolicySet` into an `Engine` (alias of `Engine(...)`)."""
    from policy.engine import Engine

    return Engine(policy_set, mode_override=mode_override)


def __getattr__(name: str):
    # Re-exports resolved on first use so `import policy` stays cheap.
    if name == "Engine":
        from policy.engine import Engine

        return Engine
    if name in ("Decision", "Reason", "Placement"):
        from policy import decision

        return getattr(decision, name)
    if name in ("parse_review", "respond", "wrap_manifest", "ReviewError"):
        from policy import admission

        return getattr(admission, name)
    raise AttributeError(f"module 'policy' has no attribute {name!r}")


__all__ = ["compile_engine", "Engine", "Decision", "Reason", "Placement", "parse_review", "respond", "wrap_manifest", "ReviewError"]
