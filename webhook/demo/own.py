"""`allot demo --policy DIR` for a set other than the library: judge it by its own `*.test.yaml` cases.

The demo's script (webhook/demo/script.py) states what the library's policies decide
for 22 requests against the demo cluster; against another set those expectations
measure nothing (2 of 22 held for one user's set). What a platform engineer wants from
"show me my set working" is the set's own proof, so this runs its test cases exactly as
`allot test DIR` does (same runner, same engine as the webhook) and reports them.
"""

from __future__ import annotations

import json
import sys

from webhook.cli import UsageError


def run_own_tests(args) -> int:
    """Run DIR's test cases; exit 0 when at least one ran and all passed, 1 otherwise, 2 on usage errors."""
    from webhook.testing.report import text_lines
    from webhook.testing.runner import find_targets, run_targets

    flags = [f for f, given in (("--cluster", args.cluster), ("--log", args.log), ("--keep", args.keep)) if given]
    if flags:
        raise UsageError(f"{', '.join(flags)}: only for the scripted demo of the library's policies; "
                         f"{args.policy} is judged by its own test cases, which name their own cluster state")
    targets = find_targets([args.policy])  # UsageError for a path that does not exist
    if not targets:
        raise UsageError(f"{args.policy}: no *.test.yaml cases to judge this policy set by; the demo's script "
                         "describes the library's policies (policies/) only. Add test cases beside your policies "
                         "(docs/testing.md), or serve the set with `allot serve --policy DIR --cluster FILE --self-signed`")
    result = run_targets(targets)
    total = result.passed + result.failed
    if args.json:
        for o in result.outcomes:
            print(json.dumps({"case": o.id, "ok": o.result.passed, "error": o.result.error,
                              "failed": [m.field for m in o.result.mismatches]}))
        for file, message in result.file_errors:
            print(json.dumps({"case": file, "ok": False, "error": message, "failed": []}))
    else:
        print(f"allot demo: {args.policy} is not the library's policies/, which the scripted demo describes; "
              "judging it by its own test cases instead (as `allot test` does)\n")
        for block in text_lines(result, verbose=True):
            print(block)
    print(f"\n{result.passed}/{total} of the set's own test cases held", file=sys.stdout if not args.json else sys.stderr)
    return 0 if total and not result.failed else 1
