"""Typed IR of a checked policy set: what the engine compiles into closures.

This module is the contract between `lang` (which produces it) and `policy`
(which consumes it). Every node is frozen and carries the `Span` of the source
it came from. Amounts are exact integers: GPU amounts and fractions in
milli-GPU (0.25 -> 250), memory in bytes, priorities as ints.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Literal, Union

from lang.span import Span


class Type(enum.Enum):
    """Static types of expressions."""

    STRING = "string"
    BOOL = "bool"
    INT = "int"
    GPU = "gpu amount"  # milli-GPU integer
    FRACTION = "fraction"  # milli share of one physical GPU
    BYTES = "quantity"  # bytes
    LEVEL = "topology level"  # value is (topology, level)
    MAP = "map"  # string -> string
    LIST = "list"  # of strings
    NONE = "none"


# Fields a policy expression can read (language.md, "The subject").
SUBJECT_FIELDS: dict[str, Type] = {
    "kind": Type.STRING,
    "operation": Type.STRING,
    "name": Type.STRING,
    "namespace": Type.STRING,
    "namespace.labels": Type.MAP,
    "labels": Type.MAP,
    "annotations": Type.MAP,
    "user": Type.STRING,
    "groups": Type.LIST,
    "serviceaccount": Type.STRING,
    "priority": Type.INT,
    "priority_class": Type.STRING,
    "pods": Type.INT,
    "gpus": Type.GPU,
    "total_gpus": Type.GPU,
    "fraction": Type.FRACTION,
    "gpu_memory": Type.BYTES,
    "gpu_model": Type.STRING,
    "gang": Type.STRING,
    "min_members": Type.INT,
    "topology.required": Type.LEVEL,
    "topology.preferred": Type.LEVEL,
    "agent": Type.BOOL,
    "quota.covered": Type.BOOL,  # some quota's `for` matches the workload (the engine fills it)
    "privileged": Type.BOOL,
    "host_path": Type.BOOL,
    "host_network": Type.BOOL,
    # What the object states (the workload-expression library; policy/subject/expression.py):
    "controller": Type.STRING,
    "gpu_pods": Type.INT,
    "gang_scheduler": Type.STRING,
    "gpu_memory_requested": Type.BYTES,
    "memory_share": Type.BOOL,
    "gpu_limit_mismatches": Type.INT,
    # An object of a kind Allot does not read that holds a pod template or asks an accelerator (docs/kinds.md):
    "unread": Type.BOOL,
}

Mode = Literal["enforce", "warn", "audit"]
CmpOp = Literal["==", "!=", "<", "<=", ">", ">="]


# ---- expressions -----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Lit:
    """A literal; `value` is str, bool, int (milli/bytes per `type`), (topology, level) or None."""

    value: object
    type: Type
    span: Span


@dataclass(frozen=True, slots=True)
class Field:
    """A subject field by its dotted name (a key of SUBJECT_FIELDS)."""

    name: str
    type: Type
    span: Span


@dataclass(frozen=True, slots=True)
class Index:
    """`labels["k"]`, `annotations["k"]`, `namespace.labels["k"]`: string or none."""

    target: "Expr"
    key: str
    span: Span
    type: Type = Type.STRING


@dataclass(frozen=True, slots=True)
class Compare:
    """`left op right`; both sides already coerced to one comparable type."""

    op: CmpOp
    left: "Expr"
    right: "Expr"
    span: Span
    type: Type = Type.BOOL


@dataclass(frozen=True, slots=True)
class Arith:
    """`left op right` over INT/GPU/FRACTION/BYTES (op is '+', '-' or '*')."""

    op: Literal["+", "-", "*"]
    left: "Expr"
    right: "Expr"
    type: Type
    span: Span


@dataclass(frozen=True, slots=True)
class Matches:
    """`target matches "glob-*"` (fnmatch-style: `*`, `?`, `[...]`)."""

    target: "Expr"
    pattern: str
    span: Span
    type: Type = Type.BOOL


@dataclass(frozen=True, slots=True)
class Contains:
    """`item in container`: a key of a MAP or a member of a LIST."""

    item: "Expr"
    container: "Expr"
    span: Span
    type: Type = Type.BOOL


@dataclass(frozen=True, slots=True)
class Has:
    """`has(x)`: the value is present (not none)."""

    target: "Expr"
    span: Span
    type: Type = Type.BOOL


@dataclass(frozen=True, slots=True)
class And:
    items: tuple["Expr", ...]
    span: Span
    type: Type = Type.BOOL


@dataclass(frozen=True, slots=True)
class Or:
    items: tuple["Expr", ...]
    span: Span
    type: Type = Type.BOOL


@dataclass(frozen=True, slots=True)
class Not:
    item: "Expr"
    span: Span
    type: Type = Type.BOOL


Expr = Union[Lit, Field, Index, Compare, Arith, Matches, Contains, Has, And, Or, Not]


@dataclass(frozen=True, slots=True)
class Template:
    """A message with `{field}` holes; `parts` alternates literal text and expressions."""

    parts: tuple[Union[str, Expr], ...]
    span: Span


# ---- declarations ----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GpuModel:
    """`gpu h100 { product "…" memory 80Gi }`."""

    name: str
    product: str
    memory: int  # bytes per physical device
    span: Span


@dataclass(frozen=True, slots=True)
class TopologyLevel:
    name: str
    label: str  # node label key
    span: Span


@dataclass(frozen=True, slots=True)
class Topology:
    """Placement levels, widest first."""

    name: str
    levels: tuple[TopologyLevel, ...]
    span: Span


@dataclass(frozen=True, slots=True)
class Priority:
    name: str
    value: int
    preempts: bool
    default: bool
    span: Span


# ---- governing blocks (each has an id "KIND NAME", a mode and a span) ------


@dataclass(frozen=True, slots=True)
class Quota:
    name: str
    selector: Expr | None
    cohort: str | None
    gpus: int | None  # milli-GPU nominal
    per_model: tuple[tuple[str, int], ...]  # (gpu model name, milli-GPU)
    gpu_memory: int | None  # bytes
    borrow: int | None  # milli-GPU; None = unlimited (Kueue: borrowingLimit unset)
    lend: int | None  # milli-GPU; None = all idle quota
    mode: Mode
    span: Span
    models: tuple[str, ...] = ()  # `models …`: declared GPU models its workloads may use (() = any)
    weight: int | None = None  # milli fair-sharing weight (`weight 1.5` -> 1500); None = 1 (Kueue's default)

    @property
    def id(self) -> str:
        return f"quota {self.name}"


@dataclass(frozen=True, slots=True)
class Cohort:
    """`cohort NAME { parent P  gpus N  borrow N  lend N  weight W }`: a node of a cohort tree (Kueue hierarchical cohorts).

    A cohort that quotas name without a block is the same with every field unset (no pool, no parent).
    """

    name: str
    parent: str | None
    gpus: int | None  # milli-GPU: the cohort's own nominal pool, beyond what its members lend it
    borrow: int | None  # milli-GPU it may take from its parent beyond its subtree; None = unlimited
    lend: int | None  # milli-GPU of its subtree its parent may use; None = all
    weight: int | None  # milli fair-sharing weight; None = 1
    span: Span

    @property
    def id(self) -> str:
        return f"cohort {self.name}"


@dataclass(frozen=True, slots=True)
class Fraction:
    name: str
    selector: Expr | None
    min: int | None  # milli share
    max: int | None
    memory_floor: int | None  # bytes
    per_gpu: int | None  # max pods sharing one physical GPU
    mode: Mode
    span: Span
    models: tuple[str, ...] = ()  # `models …`: declared GPU models a shared pod may use (() = any)

    @property
    def id(self) -> str:
        return f"fraction {self.name}"


@dataclass(frozen=True, slots=True)
class TopologyRequirement:
    """`require topology fabric.rack [when EXPR]`; the last matching one in source order wins."""

    topology: str
    level: str
    when: Expr | None
    span: Span


@dataclass(frozen=True, slots=True)
class Gang:
    name: str
    selector: Expr | None
    require_min_members: bool
    topology: tuple[TopologyRequirement, ...]
    on_unplaceable: Literal["deny", "warn"]
    mode: Mode
    span: Span
    models: tuple[str, ...] = ()  # `models …`: declared GPU models the gang may be placed on (() = any)

    @property
    def id(self) -> str:
        return f"gang {self.name}"


@dataclass(frozen=True, slots=True)
class AgentAllow:
    """`allow VERB… RESOURCE… [when EXPR]`; operations are CREATE/UPDATE/DELETE/CONNECT or '*'."""

    operations: frozenset[str]
    resources: frozenset[str]  # plural resource names ("pods", "pods/exec") or "*"
    when: Expr | None
    span: Span


@dataclass(frozen=True, slots=True)
class AgentDeny:
    """`deny [when EXPR] ["message"]`: beats every allow."""

    when: Expr | None
    message: Template | None
    span: Span


@dataclass(frozen=True, slots=True)
class Agents:
    name: str  # "agents" when the block is unnamed
    identity: Expr | None  # over user/groups/serviceaccount
    allows: tuple[AgentAllow, ...]
    denies: tuple[AgentDeny, ...]
    mode: Mode
    span: Span

    @property
    def id(self) -> str:
        return f"agents {self.name}"


@dataclass(frozen=True, slots=True)
class Deny:
    message: Template
    span: Span


@dataclass(frozen=True, slots=True)
class SetField:
    """`set labels["k"] = EXPR` (target map is "labels" or "annotations")."""

    target: str
    key: str
    value: Expr
    span: Span


@dataclass(frozen=True, slots=True)
class SetLimit:
    """`set limits["nvidia.com/gpu"] = requests["nvidia.com/gpu"]`: each container's unlimited GPU request becomes its limit."""

    resource: str
    span: Span


@dataclass(frozen=True, slots=True)
class Rule:
    name: str
    selector: Expr | None
    when: Expr | None
    actions: tuple[Union[Deny, SetField, SetLimit], ...]
    mode: Mode
    span: Span

    @property
    def id(self) -> str:
        return f"rule {self.name}"


PERIODS = ("day", "week", "month", "quarter")


@dataclass(frozen=True, slots=True)
class Budget:
    """`budget NAME { … }`: GPU-hours per calendar period over a selector, metered from the pods that hold GPUs."""

    name: str
    selector: Expr | None
    amount: int  # milli-GPU-seconds per period (GPU-hours x 3,600,000)
    model: str | None  # a declared gpu: only its pods are metered; None = every GPU
    period: Literal["day", "week", "month", "quarter"]
    zone: str  # IANA time zone the period's boundaries fall in
    on_spent: Literal["deny", "warn", "priority"]
    tier: str | None  # the priority class spent work moves to (`on spent priority TIER`)
    thresholds: tuple[int, ...]  # per mille of `amount` at which a warning is given (800 = 80 %), ascending
    half_life: int | None  # seconds, for decayed-usage weights (parsed and checked; fair sharing reads it)
    mode: Mode
    span: Span

    @property
    def id(self) -> str:
        return f"budget {self.name}"


STEER_BY = ("fragmentation",)  # what a steer block may score nodes by


@dataclass(frozen=True, slots=True)
class Steer:
    """`steer NAME { for; by fragmentation; nodes N; mode }`: preferred node affinity for GPU pods (not gang members) towards the nodes they fragment least."""

    name: str
    selector: Expr | None
    by: Literal["fragmentation"]
    nodes: int  # how many nodes a pod is steered towards (1..10), best first
    mode: Mode
    span: Span

    @property
    def id(self) -> str:
        return f"steer {self.name}"


Block = Union[GpuModel, Topology, Priority, Cohort, Quota, Fraction, Gang, Agents, Rule, Budget, Steer]


@dataclass(frozen=True, slots=True)
class PolicySet:
    """A checked, merged policy set. Tuples keep source order (path, then line)."""

    gpus: tuple[GpuModel, ...] = ()
    topologies: tuple[Topology, ...] = ()
    priorities: tuple[Priority, ...] = ()
    cohorts: tuple[Cohort, ...] = ()  # declared `cohort` blocks (cohorts only quotas name have none)
    quotas: tuple[Quota, ...] = ()
    fractions: tuple[Fraction, ...] = ()
    gangs: tuple[Gang, ...] = ()
    agents: tuple[Agents, ...] = ()
    rules: tuple[Rule, ...] = ()
    budgets: tuple[Budget, ...] = ()
    steers: tuple[Steer, ...] = ()
    sources: tuple[tuple[str, str], ...] = field(default=(), compare=False)  # (path, text)
