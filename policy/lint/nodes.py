"""Whole-GPU pods no node of the cluster could ever hold: a count kube-scheduler would leave Pending forever.

`allot lint --cluster` reports them (`NoNodeHolds`); the decision itself does not, since a
quota's arithmetic is judged the same whatever the nodes (docs/lint.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping

from policy.subject.dialects.kaito import node_gpus
from policy.subject.dialects.product import PRODUCT_LABEL

CODE = "NoNodeHolds"


@dataclass(frozen=True, slots=True)
class Unholdable:
    """A pod set whose pods each ask `gpus` whole GPUs (milli) where the largest fitting node has `largest` (milli)."""

    pod_set: str
    gpus: int
    largest: int
    product: str | None

    def message(self) -> str:
        """The finding's words: what is asked, what the largest node has, what follows."""
        of = f" {self.product}" if self.product else ""
        return (f"pod set {self.pod_set} asks {self.gpus // 1000} whole{of} GPUs per pod; the largest{of} GPU node of the "
                f"cluster has {self.largest // 1000}: no node can ever hold such a pod (it would stay Pending)")


def largest_gpus(nodes: Iterable[Mapping]) -> dict[str | None, int]:
    """The most whole GPUs (milli) one node offers, per GPU product label and over all GPU nodes (key None)."""
    largest: dict[str | None, int] = {}
    for node in nodes:
        n = node_gpus(node) * 1000
        if not n:
            continue
        meta = node.get("metadata") if type(node.get("metadata")) is dict else {}
        labels = meta.get("labels") if type(meta.get("labels")) is dict else {}
        product = labels.get(PRODUCT_LABEL)
        largest[None] = max(largest.get(None, 0), n)
        if type(product) is str:
            largest[product] = max(largest.get(product, 0), n)
    return largest


def find_unholdable(w, largest: Mapping[str | None, int]) -> list[Unholdable]:
    """The pod sets of `w` asking more whole GPUs per pod than any GPU node (of their product, where named) offers.

    Nothing is said without GPU nodes (no cluster to judge by), nor for shared GPUs (a fraction fits on one device).
    """
    if not largest:
        return []
    out = []
    for ps in w.pod_sets:
        if not ps.count or ps.fraction is not None or ps.gpus < 1000:
            continue
        key = ps.gpu_product if ps.gpu_product in largest else None
        if ps.gpus > largest[key]:
            out.append(Unholdable(ps.name, ps.gpus, largest[key], ps.gpu_product if key else None))
    return out
