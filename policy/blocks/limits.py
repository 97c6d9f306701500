"""The JSONPatch members of `set limits["R"] = requests["R"]`: every container with a request of R and no limit of R.

Containers are found where the subject's pod specs are: a Pod's `spec`, each template
of a workload object (`Workload.template_paths`, known per kind); a TrainJob's
per-node resources live in no pod template and are left alone. Init containers count
too (the API server validates them alike). A limit that is present is never rewritten,
even when it differs from the request: that is the author's to settle.
"""

from __future__ import annotations

from typing import Iterator

_POD_SPEC = ("spec",)


def _at(obj, path: tuple[str, ...]):
    node = obj
    for part in path:
        if type(node) is list and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        elif type(node) is dict:
            node = node.get(part)
        else:
            return None
    return node


def limit_fills(w, resource: str) -> Iterator[tuple[tuple[str, ...], object]]:
    """(path, value) of each limit to add: the request of `resource` of a container that has no limit of it."""
    if w.obj is None:
        return
    specs = (_POD_SPEC,) if w.kind == "Pod" else tuple(p for p in w.template_paths if p is not None)
    for spec_path in specs:
        spec = _at(w.obj, spec_path)
        if type(spec) is not dict:
            continue
        for field in ("initContainers", "containers"):
            containers = spec.get(field)
            if type(containers) is not list:
                continue
            for i, c in enumerate(containers):
                res = c.get("resources") if type(c) is dict else None
                if type(res) is not dict or type(res.get("requests")) is not dict or resource not in res["requests"]:
                    continue
                limits = res.get("limits")
                if limits is not None and (type(limits) is not dict or resource in limits):
                    continue
                yield (*spec_path, field, str(i), "resources", "limits", resource), res["requests"][resource]


def dotted(path: tuple[str, ...]) -> str:
    """`spec.containers[0].resources.limits['nvidia.com/gpu']` for a patch path (messages)."""
    out = ""
    for i, p in enumerate(path):
        if p.isdigit():
            out += f"[{p}]"
        elif i == len(path) - 1 and i and path[i - 1] == "limits":
            out += f"[{p!r}]"
        else:
            out += ("." if out else "") + p
    return out
