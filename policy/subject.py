"""The normalized subject: one `Workload` view of any governed object, whatever its dialect.

Contract between normalization (`policy/normalize.py`), the engine and placement.
Amounts are exact: GPU amounts and fractions in milli-GPU, memory in bytes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterator, Mapping


class _EmptyMapping(Mapping):
    """An immutable, hashable empty map: dataclasses reject unhashable defaults such as `{}`."""

    __slots__ = ()

    def __getitem__(self, key: str) -> str:
        raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        return iter(())

    def __len__(self) -> int:
        return 0

    def __hash__(self) -> int:
        return 0

    def __repr__(self) -> str:
        return "{}"


EMPTY: Mapping[str, str] = _EmptyMapping()


@dataclass(frozen=True, slots=True)
class Problem:
    """Something normalization could not read: explained by the engine, never an exception."""

    code: str  # PascalCase, e.g. "MalformedQuantity", "UnknownGpuDialectValue", "MissingGroup"
    message: str  # names the field path and the bad value


@dataclass(frozen=True, slots=True)
class PodSet:
    """`count` pods each asking `gpus` milli-GPU (and `gpu_memory` bytes) of `gpu_product`."""

    name: str
    count: int
    gpus: int
    fraction: int | None = None  # milli share of one device when the pod shares a GPU
    gpu_memory: int | None = None
    gpu_product: str | None = None


@dataclass(frozen=True, slots=True)
class Workload:
    """Fields of language.md's subject table; dotted names use `_` (namespace.labels -> namespace_labels)."""

    kind: str
    operation: str = "CREATE"
    name: str | None = None
    namespace: str | None = None
    namespace_labels: Mapping[str, str] = EMPTY
    labels: Mapping[str, str] = EMPTY
    annotations: Mapping[str, str] = EMPTY
    user: str | None = None
    groups: tuple[str, ...] = ()
    serviceaccount: str | None = None
    priority: int | None = None
    priority_class: str | None = None
    pods: int = 1
    gpus: int = 0  # milli-GPU per pod: whole devices * 1000 + fractional share
    total_gpus: int = 0  # pods * gpus
    fraction: int | None = None  # milli share of one physical GPU, when shared
    gpu_memory: int | None = None  # bytes per pod
    gpu_product: str | None = None  # raw requested product (node label value / HAMi type)
    gpu_model: str | None = None  # declared `gpu` name it resolves to (engine fills)
    gang: str | None = None
    min_members: int | None = None
    topology_required: str | None = None  # requested node label key, as the dialect said it
    topology_preferred: str | None = None
    agent: bool = False  # engine fills from `agents` identities / labels
    privileged: bool = False
    host_path: bool = False
    host_network: bool = False
    # Not readable by policies; used by the engine for patches, placement and accounting.
    resource: str = "pods"
    subresource: str | None = None
    uid: str | None = None
    dry_run: bool = False
    pod_sets: tuple[PodSet, ...] = ()
    problems: tuple[Problem, ...] = ()
    obj: Mapping | None = field(default=None, compare=False, repr=False)
    old_obj: Mapping | None = field(default=None, compare=False, repr=False)
