"""`set limits["R"] = requests["R"]`: the one `set` that writes inside pod specs, and only where the value is forced.

Kubernetes accepts an extended resource (every GPU resource) only with its limit equal
to its request, and reads a limit alone as the request too. A container that asks
`requests["nvidia.com/gpu"]` without a limit therefore has exactly one valid limit: the
request. That is the fill; a limit that differs from the request is ambiguous (which did
the author mean?) and is never rewritten. cpu and memory limits are choices, not fills:
only GPU resources (`nvidia.com/…`, `amd.com/…`) may be named.
"""

from __future__ import annotations

from lang import ast, ir

GPU_PREFIXES = ("nvidia.com/", "amd.com/")


def lower_set_limit(low, s: ast.SetStmt) -> ir.SetLimit | None:
    """Check `set limits["R"] = requests["R"]` and lower it; E0112 for any other shape."""
    key = s.key.value
    if not key.startswith(GPU_PREFIXES) or key in GPU_PREFIXES:
        low.err("E0112", f"`set limits[{s.key.raw}]` names no GPU resource", s.key.span,
                "only GPU resources (`nvidia.com/…`, `amd.com/…`) must have limits equal to requests; a cpu or memory limit is a choice, not a fill")
        return None
    v = s.value
    same = isinstance(v, ast.IndexExpr) and isinstance(v.target, ast.Path) and v.target.parts == ("requests",) and v.key.value == key
    if not same:
        low.err("E0112", f"a limit can only be set to its own request: `requests[{s.key.raw}]`", v.span,
                f"write `set limits[{s.key.raw}] = requests[{s.key.raw}]`: each container's request of {key} without a limit becomes its limit")
        return None
    return ir.SetLimit(key, s.span)
