"""`UsageError`: a bad invocation or input file, shown as one line with exit 2 — raised below the CLI too."""


class UsageError(Exception):
    """A bad invocation: printed as one line, exit 2."""
