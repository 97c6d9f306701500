"""GPU-hour budget metering for the cluster: the API server's clock, the shared `allot-meter` ConfigMap, usage reports (docs/budgets.md)."""
