"""`allot bench check`: not built yet; says so and exits 2."""

from __future__ import annotations

import sys


def add_arguments(parser) -> None:
    """No options yet."""
    parser.add_argument("rest", nargs="*")


def run(args) -> int:
    """Report that the benchmark does not exist yet."""
    print("allot bench check: not implemented yet", file=sys.stderr)
    return 2
