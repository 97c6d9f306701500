"""Kubernetes manifests a policy set needs, read statically from its IR: webhook configurations, CEL matchConditions, PriorityClasses."""
