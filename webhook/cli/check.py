"""`allot check [PATH…] [--cluster FILE] [--format text|json|sarif]`: parse and type-check a policy set.

With `--cluster`, also compare the declared priority classes with the cluster's live
PriorityClasses (policy/blocks/priority_drift.py): any difference is an error (exit 1).
"""

from __future__ import annotations

import json
import sys


def add_arguments(parser) -> None:
    """Paths (files or directories, default `policies`) and the output format."""
    parser.add_argument("paths", nargs="*", metavar="PATH", help="policy files or directories (default: policies)")
    parser.add_argument("--format", choices=("text", "json", "sarif"), default="text", help="output format (default: text)")
    parser.add_argument("--cluster", metavar="FILE",
                        help="`kubectl get -o yaml` dump: report declared priority classes whose live PriorityClass differs")


def run(args) -> int:
    """Exit 0 when clean (warnings allowed), 1 when any error, 2 on usage errors."""
    import lang
    from lang.diagnostics import render_all, to_sarif
    from webhook.sources import read_policy_sources

    sources = read_policy_sources(args.paths or ["policies"])
    if not sources:
        from webhook.errors import UsageError

        raise UsageError("no .policy files found in " + ", ".join(args.paths or ["policies"]))
    snapshot = None
    if args.cluster:
        from webhook.clusterfile import read_cluster_file

        snapshot = read_cluster_file(args.cluster)  # before compiling: a bad file is a usage error (exit 2)
    policy_set, diags = lang.compile_policies(sources)
    drift = []
    if snapshot is not None and policy_set is not None:
        drift = drift_diagnostics(policy_set.priorities, snapshot, args.cluster)
    everything = [*diags, *drift]
    if args.format == "json":
        print(json.dumps([d.to_json() for d in everything], indent=2))
    elif args.format == "sarif":
        print(json.dumps(to_sarif(everything), indent=2))
    else:
        if everything:
            print(render_all(everything, dict(sources)))
            print()
        print(summary(diags, drift, len(sources), args.cluster if snapshot is not None else None, policy_set is not None))
    sys.stdout.flush()
    return 1 if any(d.severity == "error" for d in everything) else 0


def summary(diags: list, drift: list, files: int, cluster: str | None, compiled: bool) -> str:
    """The one final line: every error and warning counted once, the priority class differences among the errors."""
    from lang.diagnostics import summarize

    if cluster is None:
        return summarize(diags, files)
    if not compiled:
        return f"{summarize(diags, files)}; cluster {cluster} not compared: the policy set has errors"
    errors = sum(d.severity == "error" for d in diags) + len(drift)
    warnings = sum(d.severity != "error" for d in diags)
    head = f"checked {files} file{'s' * (files != 1)} and cluster {cluster}: "
    if not errors and not warnings:
        return head + "no problems; declared priority classes match the live ones"
    counted = f"{errors} error{'s' * (errors != 1)}"
    if drift:
        counted += f" ({len(drift)} priority class difference{'s' * (len(drift) != 1)})"
    counted += f", {warnings} warning{'s' * (warnings != 1)}"
    return head + counted + ("" if drift else "; declared priority classes match the live ones")


def drift_diagnostics(priorities, snapshot, cluster_path: str) -> list:
    """`PriorityClassDrift` errors at the declaring block (or the cluster file, for an undeclared class)."""
    from lang.diagnostics import error
    from lang.span import Span
    from policy.blocks.priority_drift import priority_drift

    here = Span(cluster_path, 1, 1, 1, 1)
    return [error("PriorityClassDrift", d.message, d.span or here, d.fix) for d in priority_drift(priorities, snapshot)]
