"""The normalized subject: one `Workload` view of any governed object, whatever its dialect.

Contract between normalization (`policy/subject/normalize.py`), the engine and placement.
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
    min_count: int | None = None  # the set's own minimum (Kueue minCount); None: the whole set, or the gang's minimum decides
    # policy.placement.needs.PodNeeds: cpu, memory and node filter per pod (None: none asked). Keyword-only, so
    # positional construction of the fields above (and any added after them) is unchanged.
    needs: object = field(default=None, kw_only=True)


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
    # Workload objects (Job, JobSet, Deployment, ...; policy/subject/workloads.py), not readable by policies:
    suspended: bool = False  # spec.suspend: the workload runs nothing yet (no quota, no placement)
    added_gpus: int | None = None  # milli-GPU an UPDATE adds to what the workload ran before (None: not a resize)
    template_paths: tuple = ()  # per pod set, the path of its template's pod spec in `obj` (None: no template)
    # What the object states, not only asks: filled by the engine (policy/subject/expression.py `express`) only for
    # sets that read them, so normalization alone leaves these defaults:
    controller: str | None = None  # the workload kind that runs the pods (the object's own kind, or a Pod's maker)
    gpu_pods: int = 0  # pods asking GPUs that the object stands for
    gang_scheduler: str | None = None  # who starts the pods together: kueue | coscheduling | volcano | kai | upstream
    gpu_memory_requested: int | None = None  # bytes per GPU pod the object itself asks (not implied by a model)
    memory_share: bool = False  # the pod's GPU share bounds its GPU memory (not a compute-only share)
    gpu_limit_mismatches: int = 0  # GPU resource entries whose request is unlimited or differs from its limit
    # Readable by policies (`unread`): an object of a kind Allot does not read that holds a pod template or asks an
    # accelerator (policy/subject/dialects/unread.py); its pods and GPUs are not counted.
    unread: bool = False
    quota_covered: bool = False  # some quota's `for` matches: filled by the engine, only for sets that read it


def _twin(cls):
    """A plain (unfrozen) class with `cls`'s exact slot layout, so a built twin can become a `cls`."""
    if tuple(getattr(cls, "__slots__", ())) != tuple(cls.__dataclass_fields__):
        raise TypeError(f"{cls.__name__} must be a slots dataclass without extra slots")
    return type(f"_{cls.__name__}Builder", (), {"__slots__": cls.__slots__})


def _fast_constructor(cls):
    """A builder for a frozen slots dataclass: fill a same-layout twin, then retag it as `cls`.

    The frozen `__init__` routes every field through `object.__setattr__`; on the
    admission path (budget 25 µs per decision) that alone costs several µs for
    `Workload`. Plain attribute stores on a twin with the same `__slots__` cost a
    fraction of that, and `__class__` assignment is allowed between identical
    layouts. Same fields, same defaults, same resulting (frozen) object; arguments
    may be positional in field order (faster than keywords for 35 fields).
    """
    import dataclasses

    ns: dict = {"T": _twin(cls), "C": cls}
    params, body = [], []
    for f in dataclasses.fields(cls):
        if f.default is not dataclasses.MISSING:
            ns[f"D_{f.name}"] = f.default
            params.append(f"{f.name}=D_{f.name}")
        elif f.default_factory is not dataclasses.MISSING:
            ns[f"F_{f.name}"] = f.default_factory
            params.append(f"{f.name}=None")
            body.append(f"  if {f.name} is None: {f.name} = F_{f.name}()")
        else:
            params.append(f"{f.name}")
        body.append(f"  o.{f.name} = {f.name}")
    src = f"def build({', '.join(params)}):\n  o = T.__new__(T)\n" + "\n".join(body) + "\n  o.__class__ = C\n  return o\n"
    exec(src, ns)  # noqa: S102 - generated from the dataclass's own field list, as dataclasses does
    build = ns["build"]
    build.__doc__ = f"Build a `{cls.__name__}` fast (same fields and defaults as its constructor)."
    return build


def _fast_replace(cls):
    """`dataclasses.replace` for a frozen slots dataclass: copy into a twin, apply changes, retag."""
    names = tuple(cls.__dataclass_fields__)
    ns: dict = {"T": _twin(cls), "C": cls, "NAMES": frozenset(names)}
    body = "\n".join(f"  o.{n} = w.{n}" for n in names)
    src = (
        "def replace(w, /, **changes):\n  o = T.__new__(T)\n" + body + "\n"
        "  for k, v in changes.items():\n"
        "    if k not in NAMES:\n      raise TypeError(f'unknown field {k!r}')\n"
        "    setattr(o, k, v)\n  o.__class__ = C\n  return o\n"
    )
    exec(src, ns)  # noqa: S102 - generated from the dataclass's own field list
    return ns["replace"]


make_workload = _fast_constructor(Workload)
make_podset = _fast_constructor(PodSet)
replace_workload = _fast_replace(Workload)
replace_workload.__doc__ = "`dataclasses.replace` for a Workload without the frozen `__init__` cost."
