"""Cluster state: the snapshot cache of Kubernetes objects, its text reader, shape checks, GPU memory index and quota ledger."""
