"""Escalation flags of a pod spec: privileged containers, hostPath volumes, host network."""

from __future__ import annotations

from typing import Mapping

_LISTS = ("containers", "initContainers", "ephemeralContainers")


def escalations(spec: Mapping) -> tuple[bool, bool, bool]:
    """(privileged, host_path, host_network) of any container, init or ephemeral container, or volume."""
    privileged = host_path = False
    for key in _LISTS:
        cs = spec.get(key)
        if cs:
            for c in cs:
                sc = c.get("securityContext") if type(c) is dict else None
                if sc and sc.get("privileged") is True:
                    privileged = True
                    break
    volumes = spec.get("volumes")
    if volumes:
        for v in volumes:
            if type(v) is dict and v.get("hostPath") is not None:
                host_path = True
                break
    return privileged, host_path, spec.get("hostNetwork") is True
