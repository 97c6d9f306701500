"""Escalation flags of a pod spec: privileged containers, hostPath volumes, host network."""

from __future__ import annotations

from typing import Mapping

from . import shape

_LISTS = ("containers", "initContainers", "ephemeralContainers")


def escalations(spec: Mapping, problems: list | None = None) -> tuple[bool, bool, bool]:
    """(privileged, host_path, host_network) of any container, init or ephemeral container, or volume.

    Fields of the wrong type are `problems` (a `"true"` string is not a flag Allot may read as false);
    containers and initContainers lists themselves are reported by the demand reader.
    """
    privileged = host_path = False
    for key in _LISTS:
        cs = spec.get(key)
        if cs is None:
            continue
        if type(cs) is not list:
            if key == "ephemeralContainers" and problems is not None:
                shape.items(cs, f"spec.{key}", problems)
            continue
        for c in cs:
            if type(c) is not dict:
                if key == "ephemeralContainers" and problems is not None:
                    problems.append(shape.wrong(f"spec.{key}[{cs.index(c)}]", "an object", c))
                continue
            sc = c.get("securityContext")
            if sc is None:
                continue
            if type(sc) is not dict:
                if problems is not None:
                    problems.append(shape.wrong(f"spec.{key}[{cs.index(c)}].securityContext", "an object", sc))
                continue
            p = sc.get("privileged")
            if p is True:
                privileged = True
            elif p is not None and p is not False and problems is not None:
                shape.flag(p, f"spec.{key}[{cs.index(c)}].securityContext.privileged", problems)
    volumes = spec.get("volumes")
    if volumes is not None:
        if type(volumes) is not list:
            if problems is not None:
                shape.items(volumes, "spec.volumes", problems)
        else:
            for v in volumes:
                if type(v) is not dict:
                    if problems is not None:
                        problems.append(shape.wrong(f"spec.volumes[{volumes.index(v)}]", "an object", v))
                elif v.get("hostPath") is not None:
                    host_path = True
                    break
    net = spec.get("hostNetwork")
    if net is not None and net is not True and net is not False and problems is not None:
        shape.flag(net, "spec.hostNetwork", problems)
    return privileged, host_path, net is True
