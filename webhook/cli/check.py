"""`allot check [PATH…] [--format text|json|sarif]`: parse and type-check a policy set."""

from __future__ import annotations

import json
import sys


def add_arguments(parser) -> None:
    """Paths (files or directories, default `policies`) and the output format."""
    parser.add_argument("paths", nargs="*", metavar="PATH", help="policy files or directories (default: policies)")
    parser.add_argument("--format", choices=("text", "json", "sarif"), default="text", help="output format (default: text)")


def run(args) -> int:
    """Exit 0 when clean (warnings allowed), 1 when any error, 2 on usage errors."""
    import lang
    from lang.diagnostics import render_all, summarize, to_sarif
    from webhook.sources import read_policy_sources

    sources = read_policy_sources(args.paths or ["policies"])
    if not sources:
        from webhook.errors import UsageError

        raise UsageError("no .policy files found in " + ", ".join(args.paths or ["policies"]))
    _, diags = lang.compile_policies(sources)
    if args.format == "json":
        print(json.dumps([d.to_json() for d in diags], indent=2))
    elif args.format == "sarif":
        print(json.dumps(to_sarif(diags), indent=2))
    else:
        if diags:
            print(render_all(diags, dict(sources)))
            print()
        print(summarize(diags, len(sources)))
    sys.stdout.flush()
    return 1 if any(d.severity == "error" for d in diags) else 0
