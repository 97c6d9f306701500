"""`allot place`: not built yet; says so and exits 2 instead of pretending."""

from __future__ import annotations

import sys


def add_arguments(parser) -> None:
    """No options yet."""
    parser.add_argument("rest", nargs="*")


def run(args) -> int:
    """Report that the command does not exist yet."""
    print("allot place: not implemented yet", file=sys.stderr)
    return 2
