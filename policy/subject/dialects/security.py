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
    sink = problems if problems is not None else []
    privileged = host_path = False
    for key in _LISTS:
        cs = spec.get(key)
        if cs is not None:
            if type(cs) is not list:
                if key == "ephemeralContainers":
                    shape.items(cs, f"spec.{key}", sink)
                continue
            for i, c in enumerate(cs):
                if type(c) is not dict:
                    if key == "ephemeralContainers":
                        sink.append(shape.wrong(f"spec.{key}[{i}]", "an object", c))
                    continue
                sc = c.get("securityContext")
                if sc is not None:
                    if type(sc) is not dict:
                        sink.append(shape.wrong(f"spec.{key}[{i}].securityContext", "an object", sc))
                        continue
                    p = sc.get("privileged")
                    if p is True or (p is not None and p is not False and shape.flag(p, f"spec.{key}[{i}].securityContext.privileged", sink)):
                        privileged = True
    volumes = spec.get("volumes")
    if volumes is not None:
        for i, v in enumerate(shape.items(volumes, "spec.volumes", sink) if type(volumes) is not list else volumes):
            if type(v) is not dict:
                sink.append(shape.wrong(f"spec.volumes[{i}]", "an object", v))
            elif v.get("hostPath") is not None:
                host_path = True
    net = spec.get("hostNetwork")
    return privileged, host_path, net is True or (net is not None and net is not False and shape.flag(net, "spec.hostNetwork", sink))
