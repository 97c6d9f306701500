"""`allot lint --policy DIR [--cluster FILE] [--format F] [--fix [--diff|--write]] PATH…`: judge manifests in git.

PATH is a manifest file, a directory (every *.yaml/*.yml under it) or `-` for stdin
(`helm template …|allot lint --policy p -`). Every object is decided by the webhook's
engine as a CREATE by --user/--group (docs/lint.md). Exit 0 clean (warnings and notes
allowed), 1 any error finding, 2 usage errors.
"""

from __future__ import annotations

import json
import sys

FORMATS = ("text", "json", "sarif", "junit")


def add_arguments(parser) -> None:
    """Options of `allot lint`."""
    from webhook.cli.eval import DEFAULT_USER

    parser.add_argument("paths", nargs="+", metavar="PATH", help="manifest files or directories (*.yaml, *.yml), - for stdin")
    parser.add_argument("--policy", action="append", required=True, metavar="DIR", help="policy directory or file (repeatable)")
    parser.add_argument("--cluster", metavar="FILE",
                        help="`kubectl get -o yaml` dump: judge quota and placement against it (without it, capacity is not judged)")
    parser.add_argument("--user", default=DEFAULT_USER, help=f"the user each object is created by (default {DEFAULT_USER})")
    parser.add_argument("--group", action="append", metavar="G", help="that user's group (repeatable; default: what the API server gives the user)")
    parser.add_argument("--namespace", metavar="NS", help="namespace of objects that name none (default: default)")
    parser.add_argument("--format", choices=FORMATS, default="text", help="output format (default: text)")
    parser.add_argument("--fix", action="store_true", help="print each manifest with what admission would fill (rule `set`s, the default priority)")
    parser.add_argument("--diff", action="store_true", help="with --fix: print a unified diff instead")
    parser.add_argument("--write", action="store_true", help="with --fix: rewrite the files in place (stdin is printed)")
    parser.add_argument("--jobs", type=int, metavar="N", help="worker processes (default: the cores, at most 4, from 400 files on; 1 with --fix)")
    parser.add_argument("--now", type=float, metavar="T", help="decision time, Unix seconds (default: the clock)")


def run(args) -> int:
    """Lint, print in the chosen format, exit 0/1 (2 via UsageError)."""
    import math
    import time

    from webhook.cli.eval import default_groups, load_policy, load_snapshot
    from webhook.errors import UsageError
    from webhook.lint import report as fmt
    from webhook.lint.judge import Linter
    from webhook.lint.run import lint

    if (args.diff or args.write) and not args.fix:
        raise UsageError("--diff and --write go with --fix")
    if args.diff and args.write:
        raise UsageError("give --diff or --write, not both")
    if args.now is not None and not math.isfinite(args.now):
        raise UsageError(f"--now {args.now}: give a finite number of Unix seconds")
    if args.paths.count("-") > 1:
        raise UsageError("`-` (stdin) may be given once")
    snapshot = load_snapshot(args.cluster) if args.cluster else None
    policy_set = load_policy(args.policy)
    if policy_set is None:
        return 1
    groups = tuple(args.group) if args.group else default_groups(args.user)
    now = args.now if args.now is not None else time.time()
    linter = Linter(policy_set, snapshot=snapshot, user=args.user, groups=groups, now=now, namespace=args.namespace)
    if args.jobs is not None and args.jobs < 1:
        raise UsageError("--jobs must be at least 1")
    from webhook.lint.reader import expand
    from webhook.lint.run import default_jobs

    jobs = 1 if args.fix else (args.jobs if args.jobs is not None else default_jobs(len(expand(args.paths))))
    report = lint(args.paths, linter, cluster=args.cluster, jobs=jobs)
    out = sys.stdout
    if args.fix and not args.write:
        out = sys.stderr  # stdout carries the manifests or the diff
    if args.format == "json":
        print(json.dumps(fmt.to_json(report), indent=2), file=out)
    elif args.format == "sarif":
        from webhook.cli import version

        print(json.dumps(fmt.to_sarif(report, version().split()[0]), indent=2), file=out)
    elif args.format == "junit":
        print(fmt.junit(report), end="", file=out)
    else:
        print(fmt.text(report), file=out)
    if args.fix:
        _fix(report, args)
    sys.stdout.flush()
    return 1 if report.failed else 0


def _fix(report, args) -> None:
    from webhook.lint.fix import fix_file
    from webhook.lint.reader import STDIN

    by_path: dict[str, list] = {}
    for j in report.judged:
        by_path.setdefault(j.doc.path, []).append(j)
    changed = 0
    for path, text in report.texts.items():
        fixed = fix_file(path, text, by_path.get(path, []))
        for p in fixed.problems:
            print(f"allot lint: {p}", file=sys.stderr)
        if fixed.after == fixed.before and path != STDIN:
            continue
        changed += fixed.objects
        if args.diff:
            sys.stdout.write(fixed.diff())
        elif args.write and path != STDIN:
            with open(path, "w", encoding="utf-8") as fh:
                fh.write(fixed.after)
        else:
            sys.stdout.write(fixed.after if path == STDIN else f"# {path}\n{fixed.after}")
    if args.write:
        print(f"fixed {changed} object{'s' * (changed != 1)}", file=sys.stderr)
