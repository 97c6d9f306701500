"""The shared reservation ledger: quota, workload and gang holds committed to ConfigMaps in the Kubernetes API (docs/ledger.md).

The server builds one `ClusterLedger` and calls only its face (webhook/ledger/face.py).
"""

from webhook.ledger.cluster import ClusterLedger

__all__ = ["ClusterLedger"]
