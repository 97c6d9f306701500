"""`allot bench check|eval|place|serve|simulate|fidelity|ledger|lint|budget|steer`: benchmark commands that print figures and baseline ratios.

Each benchmark lives in `webhook/bench/<name>.py` with `add_arguments` and `run`.
"""

from __future__ import annotations

import importlib

BENCHES = {
    "check": "parse and check a generated policy set of N blocks",
    "eval": "per-decision latency, side by side with cedarpy",
    "place": "gang queries and events on a synthetic hypercluster",
    "serve": "webhook req/s and p99 against a bare aiohttp TLS floor",
    "simulate": "allot simulate over the openb trace and a 100,000-pod synthetic trace",
    "fidelity": "allot simulate --method artifact against the FGD paper's published curves, per openb variant",
    "ledger": "admitted pods/s and added p99 of 2 replicas sharing one quota through the API ledger",
    "reclaim": "reclaim plan computation on 1,000 nodes running 10,000 pods (budget p99 <= 5 ms)",
    "lint": "allot lint over a generated repository of 5,000 manifests, beside allot check on the same policy set",
    "budget": "budget metering cost per pod event at 100,000 live pods and 1,000 budgets",
    "steer": "one fragmentation-steering decision on openb's 1,213 GPU nodes and larger synthetic clusters, beside unmemoised scoring",
}


def add_arguments(parser) -> None:
    """One sub-parser per benchmark."""
    subs = parser.add_subparsers(dest="bench", metavar="BENCH", parser_class=type(parser))
    for name, help_text in BENCHES.items():
        sub = subs.add_parser(name, help=help_text, description=help_text)
        mod = importlib.import_module(f"webhook.bench.{name}")
        mod.add_arguments(sub)
        sub.set_defaults(_bench=mod.run)


def run(args) -> int:
    """Dispatch to the chosen benchmark."""
    if not getattr(args, "_bench", None):
        from webhook.errors import UsageError

        raise UsageError("name a benchmark: " + ", ".join(BENCHES))
    return args._bench(args)
