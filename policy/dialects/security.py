"""Escalation flags of a pod spec: privileged containers, hostPath volumes, host network."""

from __future__ import annotations

from typing import Mapping

_LISTS = ("containers", "initContainers", "ephemeralContainers")


def escalations(spec: Mapping) -> tuple[bool, bool, bool]:
    """(privileged, host_path, host_network) of any container, init or ephemeral container, or volume."""
    privileged = False
    for key in _LISTS:
        for c in spec.get(key) or ():
            sc = c.get("securityContext") if isinstance(c, dict) else None
            if sc and sc.get("privileged") is True:
                privileged = True
                break
        if privileged:
            break
    host_path = any(isinstance(v, dict) and v.get("hostPath") is not None for v in spec.get("volumes") or ())
    return privileged, host_path, spec.get("hostNetwork") is True
