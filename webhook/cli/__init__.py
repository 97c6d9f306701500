"""`allot`: the command-line shell around lang, policy and webhook.

Each sub-command lives in its own module of this package exposing
`add_arguments(parser)` and `run(args) -> int`; modules import their heavy
dependencies inside `run` so `allot check` never loads aiohttp.
Exit codes: 0 ok, 1 findings/failures, 2 usage errors (bad flags, missing or
unreadable files: one line on stderr), 3 denied / does not fit, 70 an internal error
(a bug: one line; ALLOT_TRACEBACK=1 shows the traceback). Input files are read by
webhook/textfile.py: one message for a file that is not text, `PATH:LINE:COL: not
UTF-8 text (byte N: 0xHH)`, with N counted from 1.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

# command -> (module under webhook.cli, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "check": ("check", "parse and type-check policy files"),
    "fmt": ("fmt", "rewrite policy files in the canonical layout"),
    "test": ("test", "run policy test cases"),
    "eval": ("eval", "decide one admission request offline"),
    "lint": ("lint", "judge Kubernetes manifests in git with the webhook's engine"),
    "place": ("place", "ask the placement evaluator where a gang fits"),
    "simulate": ("simulate", "replay a trace through a policy set and a scheduler model"),
    "usage": ("usage", "GPU-hour budgets: used, left, burn rate and run-out date"),
    "serve": ("serve", "run the admission webhook over HTTPS"),
    "demo": ("demo", "run the webhook against the embedded demo cluster"),
    "compile": ("compile", "emit webhook configurations, PriorityClasses and a bundle"),
    "certs": ("certs", "generate a CA and a serving certificate"),
    "bundle": ("bundle", "keygen / sign / verify policy bundles"),
    "bench": ("bench", "benchmarks: check, eval, place, serve, simulate, ledger, lint"),
}


from webhook.errors import UsageError, name_command  # defined below the CLI, so the libraries it calls raise it without importing the CLI


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # exit 2 with one line (the usage is one --help away), no traceback
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def version() -> str:
    """The installed distribution's version (pyproject.toml), or `unknown` when run from an uninstalled tree."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as dist_version

    try:
        return dist_version("allot")
    except PackageNotFoundError:
        return "unknown (not installed)"


def build_parser() -> argparse.ArgumentParser:
    """The full argument parser, one sub-parser per command."""
    parser = _Parser(prog="allot", description="Policy-as-code governance for GPU allocation on Kubernetes.")
    parser.add_argument("--version", action="version", version=f"allot {version()}")
    subs = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name, (module, help_text) in COMMANDS.items():
        sub = subs.add_parser(name, help=help_text, description=help_text)
        mod = importlib.import_module(f"webhook.cli.{module}")
        mod.add_arguments(sub)
        sub.set_defaults(_run=mod.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `allot` console script."""
    parser = build_parser()
    args = parser.parse_args(argv)
    args._argv = list(sys.argv[1:] if argv is None else argv)  # `serve --workers` starts its workers with these
    if not getattr(args, "_run", None):
        parser.print_help(sys.stderr)
        return 2
    name_command(args.command)
    try:
        return int(args._run(args) or 0)
    except UsageError as exc:
        print(f"allot {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0
    except RecursionError:  # a YAML/JSON input nested thousands deep: the parsers recurse per level
        print(f"allot {args.command}: error: an input is nested too deeply to read", file=sys.stderr)
        return 2
    except OSError as exc:  # a path the command opened itself: the user's to fix, like a usage error
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"allot {args.command}: error: {where}{exc.strerror or exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # noqa: BLE001 - a bug: one line for the user, the traceback on request
        if os.environ.get("ALLOT_TRACEBACK"):
            raise
        text = str(exc).splitlines()[0] if str(exc) else ""
        print(f"allot {args.command}: internal error: {type(exc).__name__}: {text} (ALLOT_TRACEBACK=1 shows where)", file=sys.stderr)
        return 70


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
