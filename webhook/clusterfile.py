"""The I/O shell around `ClusterSnapshot.from_text`: read a cluster-state file for the CLI and tests."""

from __future__ import annotations

from policy.cluster.snapshot import ClusterSnapshot, SnapshotError
from webhook.errors import UsageError
from webhook.textfile import read_text


def read_text_file(path: str, what: str) -> str:
    """A UTF-8 text file the user named (`what`: cluster-state, trace, …); UsageError (one line) when unreadable."""
    return read_text(path, what)


def read_cluster_file(path: str) -> ClusterSnapshot:
    """The snapshot in a `kubectl get … -o yaml|json` file; UsageError (one line) when missing or malformed."""
    text = read_text(path, "cluster-state")
    try:
        return ClusterSnapshot.from_text(text)
    except SnapshotError as exc:
        raise UsageError(f"{path}: {exc}") from None
