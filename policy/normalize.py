"""Normalization of admission requests and live objects into the `Workload` subject."""

from __future__ import annotations

from policy.demand import pod_demand, read_demand

__all__ = ["pod_demand", "read_demand"]
