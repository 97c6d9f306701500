"""`allot fmt [--check | --diff] [PATH…]`: rewrite policy files in the canonical layout (comments kept)."""

from __future__ import annotations

import difflib
import pathlib
import sys


def add_arguments(parser) -> None:
    """Paths (default `policies`) and `--check`."""
    parser.add_argument("paths", nargs="*", metavar="PATH", help="policy files or directories (default: policies)")
    parser.add_argument("--check", action="store_true", help="change nothing; list files that would change and exit 1")
    parser.add_argument("--diff", action="store_true", help="change nothing; print a unified diff of what would change and exit 1")


def unified(path: str, before: str, after: str) -> str:
    """The unified diff `fmt` would apply to `path` (`--- path`, `+++ path (formatted)`)."""
    lines = difflib.unified_diff(before.splitlines(keepends=True), after.splitlines(keepends=True), path, f"{path} (formatted)")
    return "".join(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in lines)


def run(args) -> int:
    """Exit 0 when everything is (now) formatted, 1 when --check/--diff find changes or a file has syntax errors."""
    from lang.diagnostics import render_all
    from lang.format import FormatError, format_source
    from webhook.errors import UsageError
    from webhook.sources import read_policy_sources

    sources = read_policy_sources(args.paths or ["policies"])
    if not sources:
        raise UsageError("no .policy files found in " + ", ".join(args.paths or ["policies"]))
    changed, broken = [], 0
    for path, text in sources:
        try:
            out = format_source(text, path)
        except FormatError as exc:
            broken += 1
            print(render_all(exc.diagnostics, {path: text}), file=sys.stderr)
            continue
        if out == text:
            continue
        changed.append(path)
        if args.diff:
            sys.stdout.write(unified(path, text, out))
        elif args.check:
            print(f"would reformat {path}")
        else:
            try:
                pathlib.Path(path).write_text(out, encoding="utf-8")
            except OSError as exc:
                raise UsageError(f"{path}: cannot write ({exc.strerror or exc})") from None
            print(f"reformatted {path}")
    dry = args.check or args.diff
    verb = "would be reformatted" if dry else "reformatted"
    tail = f", {broken} with syntax errors left unchanged" if broken else ""
    print(f"{len(changed)} of {len(sources)} file(s) {verb}{tail}", file=sys.stderr)
    return 1 if broken or (dry and changed) else 0
