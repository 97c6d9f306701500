"""The shared reservation ledger: quota, workload and gang holds committed to ConfigMaps in the Kubernetes API (docs/ledger.md)."""
