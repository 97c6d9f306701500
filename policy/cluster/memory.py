"""GPU memory per device, indexed from nodes' GFD labels, for memory-based GPU shares."""

from __future__ import annotations

from typing import Mapping

from policy.subject.dialects.common import EMPTY, MIB
from policy.subject.dialects.product import MEMORY_LABEL, PRODUCT_LABEL


def node_gpu_memory(node: Mapping) -> tuple[str | None, int | None]:
    """(product, bytes per device) from a node's GFD labels."""
    labels = (node.get("metadata") or EMPTY).get("labels") or EMPTY
    raw = labels.get(MEMORY_LABEL)
    mem = int(raw) * MIB if isinstance(raw, str) and raw.isascii() and raw.isdigit() else None
    return labels.get(PRODUCT_LABEL), mem


class GpuMemoryIndex:
    """Bytes per GPU by node, by product and cluster-wide, kept current as nodes come and go."""

    def __init__(self) -> None:
        self.by_node: dict[str, int] = {}
        self.by_product: dict[str, dict[int, int]] = {}  # product -> size -> nodes
        self.all: dict[int, int] = {}  # size -> nodes

    def add(self, name: str, node: Mapping) -> None:
        """Index a node (call `remove` with the old object first on updates)."""
        product, mem = node_gpu_memory(node)
        if mem is None:
            return
        self.by_node[name] = mem
        self.all[mem] = self.all.get(mem, 0) + 1
        if product:
            by = self.by_product.setdefault(product, {})
            by[mem] = by.get(mem, 0) + 1

    def remove(self, name: str, node: Mapping) -> None:
        """Forget a node as it was indexed."""
        product, mem = node_gpu_memory(node)
        self.by_node.pop(name, None)
        if mem is None:
            return
        _decrement(self.all, mem)
        if product and product in self.by_product:
            _decrement(self.by_product[product], mem)
            if not self.by_product[product]:
                del self.by_product[product]

    def lookup(self, product: str | None, node_name: str | None = None) -> int | None:
        """Bytes per device: of the node, else of the product(s), else the cluster's only size."""
        if node_name:
            mem = self.by_node.get(node_name)
            if mem is not None:
                return mem
        if product:
            sizes: set[int] = set()
            for p in product.split(",") if "," in product else (product,):
                by = self.by_product.get(p)
                if not by:
                    sizes = set()
                    break
                sizes.update(by)
            if len(sizes) == 1:
                return next(iter(sizes))
        if len(self.all) == 1:
            return next(iter(self.all))
        return None


def _decrement(counts: dict[int, int], key: int) -> None:
    n = counts.get(key, 0) - 1
    if n > 0:
        counts[key] = n
    else:
        counts.pop(key, None)
