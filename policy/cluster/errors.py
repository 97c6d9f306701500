"""`SnapshotError`: cluster state that cannot be loaded, raised by the text reader and the snapshot alike."""


class SnapshotError(ValueError):
    """Cluster state that cannot be loaded; the message is one located line."""
