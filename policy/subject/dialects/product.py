"""GPU model a pod asks for: its node's label, nodeSelector / required affinity on the product label, HAMi type."""

from __future__ import annotations

from typing import Mapping

from .hami import USE_GPUTYPE

PRODUCT_LABEL = "nvidia.com/gpu.product"
MEMORY_LABEL = "nvidia.com/gpu.memory"  # GFD: MiB per device
COUNT_LABEL = "nvidia.com/gpu.count"


def affinity_products(spec: Mapping) -> list[str]:
    """Values of `In` expressions on the product label in required node affinity, in order, deduplicated."""
    terms = (
        (((spec.get("affinity") or {}).get("nodeAffinity") or {}).get("requiredDuringSchedulingIgnoredDuringExecution") or {})
        .get("nodeSelectorTerms")
        or ()
    )
    found: list[str] = []
    for term in terms:
        for expr in (term or {}).get("matchExpressions") or ():
            if (expr or {}).get("key") == PRODUCT_LABEL and expr.get("operator") == "In":
                for v in expr.get("values") or ():
                    if isinstance(v, str) and v not in found:
                        found.append(v)
    return found


def read_product(pod: Mapping, spec: Mapping, annotations: Mapping, snapshot) -> str | None:
    """The requested product; several acceptable products come back comma-joined (as HAMi writes them)."""
    node_name = spec.get("nodeName")
    if node_name and snapshot is not None:
        node = snapshot.node(node_name)
        if node is not None:
            value = ((node.get("metadata") or {}).get("labels") or {}).get(PRODUCT_LABEL)
            if value:
                return value
    selector = spec.get("nodeSelector")
    if selector:
        value = selector.get(PRODUCT_LABEL)
        if isinstance(value, str) and value:
            return value
        if value is not None and type(value) is not str:  # not a model to read as "none": the backstop names the field
            raise TypeError(f"nodeSelector[{PRODUCT_LABEL}] is not a string")
    if spec.get("affinity"):
        values = affinity_products(spec)
        if values:
            return ",".join(values)
    value = annotations.get(USE_GPUTYPE)
    if isinstance(value, str) and value.strip():
        return ",".join(v.strip() for v in value.split(",") if v.strip())
    return None
