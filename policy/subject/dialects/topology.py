"""Topology requests: Kueue and KAI pod annotations; group objects carry theirs in `GroupInfo`."""

from __future__ import annotations

from typing import Mapping

KUEUE_REQUIRED = "kueue.x-k8s.io/podset-required-topology"
KUEUE_PREFERRED = "kueue.x-k8s.io/podset-preferred-topology"
KAI_REQUIRED = "kai.scheduler/topology-required-placement"
KAI_PREFERRED = "kai.scheduler/topology-preferred-placement"


def pod_topology(annotations: Mapping) -> tuple[str | None, str | None]:
    """(required, preferred) node label keys a pod's annotations ask for."""
    if not annotations:
        return None, None
    required = annotations.get(KUEUE_REQUIRED) or annotations.get(KAI_REQUIRED) or None
    preferred = annotations.get(KUEUE_PREFERRED) or annotations.get(KAI_PREFERRED) or None
    return required, preferred
