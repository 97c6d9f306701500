"""`allot test [PATH…]`: run the `*.test.yaml` cases beside the policies; exit 1 on any failure or none found."""

from __future__ import annotations

import pathlib
import sys

from webhook.errors import UsageError


def add_arguments(parser) -> None:
    """PATHs to search (default: the current directory) and report options."""
    parser.add_argument("paths", nargs="*", metavar="PATH", help="directories to search or *.test.yaml files")
    parser.add_argument("--junit", metavar="FILE", help="also write JUnit XML to FILE")
    parser.add_argument("--coverage", action="store_true", help="list governing blocks no case exercised")
    parser.add_argument("--filter", metavar="PATTERN", help="run cases whose FILE::NAME contains or globs PATTERN")
    parser.add_argument("-v", "--verbose", action="store_true", help="also list the cases that passed")


def run(args) -> int:
    """Find, run and report; the last line printed is `N passed, M failed`."""
    from webhook.testing.report import coverage_lines, junit_xml, tally, text_lines
    from webhook.testing.runner import find_targets, run_targets

    if args.junit and pathlib.Path(args.junit).is_dir():
        raise UsageError(f"--junit {args.junit}: is a directory")
    targets = find_targets(args.paths)
    result = run_targets(targets, args.filter)
    for block in text_lines(result, verbose=args.verbose):
        print(block)
    if args.junit:
        try:
            pathlib.Path(args.junit).write_text(junit_xml(result), encoding="utf-8")
        except OSError as exc:
            raise UsageError(f"--junit {args.junit}: {exc.strerror}") from None
    if args.coverage:
        print("\n".join(coverage_lines(result)))
    total = result.passed + result.failed
    if total == 0:
        where = ", ".join(args.paths) or "."
        what = f"matching {args.filter!r} " if args.filter else ""
        print(f"no test cases {what}found under {where} (*.test.yaml)", file=sys.stderr)
    print(tally(result))
    return 0 if total and not result.failed else 1
