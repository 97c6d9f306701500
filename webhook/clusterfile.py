"""The I/O shell around `ClusterSnapshot.from_text`: read a cluster-state file for the CLI and tests."""

from __future__ import annotations

from policy.cluster.snapshot import ClusterSnapshot, SnapshotError
from webhook.errors import UsageError


def read_text_file(path: str, what: str) -> str:
    """A UTF-8 text file the user named (`what`: cluster-state, trace, …); UsageError (one line) when unreadable."""
    try:
        with open(path, "rb") as fh:
            raw = fh.read()
    except FileNotFoundError:
        raise UsageError(f"{path}: no such {what} file") from None
    except IsADirectoryError:
        raise UsageError(f"{path}: is a directory, expected a {what} file") from None
    except OSError as exc:
        raise UsageError(f"{path}: cannot read: {exc.strerror or exc}") from None
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise UsageError(f"{path}: byte {exc.start}: not UTF-8 text") from None


def read_cluster_file(path: str) -> ClusterSnapshot:
    """The snapshot in a `kubectl get … -o yaml|json` file; UsageError (one line) when missing or malformed."""
    text = read_text_file(path, "cluster-state")
    try:
        return ClusterSnapshot.from_text(text)
    except SnapshotError as exc:
        raise UsageError(f"{path}: {exc}") from None
