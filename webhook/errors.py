"""`UsageError`: a bad invocation or input file, shown as one line with exit 2 — raised below the CLI too.

`warn` prints the other kind of line about input: read, but likely not what was meant
(an empty cluster file), as `allot COMMAND: warning: …` on stderr.
"""

from __future__ import annotations

import sys

_prog = ["allot"]  # the running command's name for `warn`; main() sets it once per invocation


class UsageError(Exception):
    """A bad invocation: printed as one line, exit 2."""


def name_command(command: str | None) -> None:
    """Name the running command in the lines `warn` prints."""
    _prog[0] = f"allot {command}" if command else "allot"


def warn(message: str) -> None:
    """One `allot COMMAND: warning: message` line on stderr: the input was read, the command goes on."""
    print(f"{_prog[0]}: warning: {message}", file=sys.stderr)
