"""The I/O shell around `ClusterSnapshot.from_text`: read a cluster-state file for the CLI and tests."""

from __future__ import annotations

from policy.cluster.snapshot import ClusterSnapshot, SnapshotError
from webhook.errors import UsageError, warn
from webhook.textfile import read_text


def read_text_file(path: str, what: str) -> str:
    """A UTF-8 text file the user named (`what`: cluster-state, trace, …); UsageError (one line) when unreadable."""
    return read_text(path, what)


def read_cluster_file(path: str, *, needs_nodes: str | None = None) -> ClusterSnapshot:
    """The snapshot in a `kubectl get … -o yaml|json` file; UsageError (one line) when missing or malformed.

    `needs_nodes` says why the command cannot work without Nodes: then a file holding none is
    a UsageError with that reason; otherwise a file holding no objects at all is read as an
    empty cluster, with a warning.
    """
    text = read_text(path, "cluster-state")
    try:
        snapshot = ClusterSnapshot.from_text(text)
    except SnapshotError as exc:
        raise UsageError(f"{path}: {exc}") from None
    check_cluster(path, snapshot, needs_nodes)
    return snapshot


def check_cluster(path: str, snapshot: ClusterSnapshot, needs_nodes: str | None = None) -> None:
    """Refuse a cluster without Nodes (when `needs_nodes` says why they are needed), or warn of one without objects."""
    if needs_nodes and next(iter(snapshot.nodes()), None) is None:
        raise UsageError(f"cluster {path} {held(snapshot)}: {needs_nodes}")
    if not len(snapshot):
        warn(f"cluster {path} holds no objects: read as an empty cluster (no nodes, pods or namespaces)")


def held(snapshot: ClusterSnapshot) -> str:
    """What a cluster without Nodes holds, for a message: `holds no objects` or `holds no Nodes (read 3 objects…)`."""
    count = len(snapshot)
    if not count:
        return "holds no objects"
    return f"holds no Nodes (read {count} object{'s' if count != 1 else ''}, none of them a Node)"
