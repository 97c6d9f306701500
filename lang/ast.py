"""Frozen syntax tree of one `.policy` file: what the parser builds and the checker/formatter read.

Lark types stop at `lang/parser.py`; everything here is plain data with spans.
Literals keep their source text so the formatter can print them back unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Union

from lang.span import Span

# ---- expressions -----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Path:
    """A dotted name: a subject field (`namespace.labels`) or a level (`fabric.rack`)."""

    parts: tuple[str, ...]
    span: Span

    @property
    def dotted(self) -> str:
        """The name as written, parts joined by dots."""
        return ".".join(self.parts)


@dataclass(frozen=True, slots=True)
class Str:
    """A double-quoted string; `value` is unescaped, `raw` is the source text with quotes."""

    value: str
    raw: str
    span: Span


@dataclass(frozen=True, slots=True)
class Num:
    """A number or quantity as written (`8`, `0.25`, `500m`, `80Gi`); typed by the checker."""

    text: str
    span: Span


@dataclass(frozen=True, slots=True)
class Const:
    """`true`, `false` or `none`."""

    value: bool | None
    span: Span


@dataclass(frozen=True, slots=True)
class IndexExpr:
    """`target["key"]`."""

    target: "Expr"
    key: Str
    span: Span


@dataclass(frozen=True, slots=True)
class HasExpr:
    """`has(x)`."""

    target: "Expr"
    span: Span


@dataclass(frozen=True, slots=True)
class NotExpr:
    """`not x`."""

    item: "Expr"
    span: Span


@dataclass(frozen=True, slots=True)
class NegExpr:
    """`-x`."""

    item: "Expr"
    span: Span


@dataclass(frozen=True, slots=True)
class BoolOp:
    """`a and b and …` / `a or b or …` (flattened)."""

    op: str  # "and" | "or"
    items: tuple["Expr", ...]
    span: Span


@dataclass(frozen=True, slots=True)
class CompareExpr:
    """`left op right` with op one of == != < <= > >=."""

    op: str
    left: "Expr"
    right: "Expr"
    span: Span


@dataclass(frozen=True, slots=True)
class ArithExpr:
    """`left op right` with op one of + - *."""

    op: str
    left: "Expr"
    right: "Expr"
    span: Span


@dataclass(frozen=True, slots=True)
class MatchesExpr:
    """`target matches "glob"`."""

    target: "Expr"
    pattern: Str
    span: Span


@dataclass(frozen=True, slots=True)
class InExpr:
    """`item in container`."""

    item: "Expr"
    container: "Expr"
    span: Span


@dataclass(frozen=True, slots=True)
class Paren:
    """`( x )`, kept so the formatter prints the author's grouping back."""

    item: "Expr"
    span: Span


Expr = Union[Path, Str, Num, Const, IndexExpr, HasExpr, NotExpr, NegExpr, BoolOp, CompareExpr, ArithExpr, MatchesExpr, InExpr, Paren]

# ---- statements ------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Ident:
    """A declared or referenced name with its own span."""

    name: str
    span: Span


@dataclass(frozen=True, slots=True)
class Setting:
    """A keyword statement with one literal argument: `product "…"`, `memory 80Gi`, `gpus 16 of h100`,
    `cohort research`, `mode warn`, `min 0.1`, `memory at least 10Gi`, `per_gpu at most 4`,
    `on unplaceable deny`, `require min_members`; `key` names which (see KEYWORDS in format.py)."""

    key: str
    value: Union[Str, Num, Ident, None]
    span: Span
    of: Ident | None = None  # `gpus N of MODEL`


@dataclass(frozen=True, slots=True)
class Level:
    """`rack "topology.acme.io/rack"` inside a topology block."""

    name: Ident
    label: Str
    span: Span


@dataclass(frozen=True, slots=True)
class Cond:
    """`for EXPR`, `when EXPR`, `identity EXPR`."""

    key: str
    expr: Expr
    span: Span


@dataclass(frozen=True, slots=True)
class RequireTopology:
    """`require topology T.LEVEL [when EXPR]`."""

    topology: Ident
    level: Ident
    when: Expr | None
    span: Span


@dataclass(frozen=True, slots=True)
class Allow:
    """`allow VERB, … RESOURCE, … [when EXPR]`."""

    verbs: tuple[Ident, ...]
    resources: tuple[Ident, ...]
    when: Expr | None
    span: Span


@dataclass(frozen=True, slots=True)
class DenyStmt:
    """`deny [when EXPR] ["message"]`."""

    when: Expr | None
    message: Str | None
    span: Span


@dataclass(frozen=True, slots=True)
class SetStmt:
    """`set labels["k"] = EXPR`."""

    target: Ident
    key: Str
    value: Expr
    span: Span


@dataclass(frozen=True, slots=True)
class Models:
    """`models h100, h200`: the declared GPU models a gang, quota or fraction block's workloads may use."""

    names: tuple[Ident, ...]
    span: Span
    key: ClassVar[str] = "models"


@dataclass(frozen=True, slots=True)
class GpuHours:
    """`gpu_hours 20000 [of h100]`: a budget's GPU-hours per period, of one model or of all."""

    amount: Num
    model: Ident | None
    span: Span
    key: ClassVar[str] = "gpu_hours"


@dataclass(frozen=True, slots=True)
class Period:
    """`period month [in "Europe/Berlin"]`: the calendar period a budget renews on, in an IANA time zone."""

    unit: Ident
    zone: Str | None
    span: Span
    key: ClassVar[str] = "period"


@dataclass(frozen=True, slots=True)
class OnSpent:
    """`on spent deny`, `on spent warn`, `on spent priority batch`."""

    action: Ident
    tier: Ident | None
    span: Span
    key: ClassVar[str] = "on spent"


@dataclass(frozen=True, slots=True)
class Thresholds:
    """`warn at 80%, 100%`: shares of a budget that warn when its use reaches them."""

    values: tuple[Num, ...]
    span: Span
    key: ClassVar[str] = "warn at"


@dataclass(frozen=True, slots=True)
class HalfLife:
    """`half_life 7 days`: the decay of a budget's usage weight (for fair sharing)."""

    amount: Num
    unit: Ident
    span: Span
    key: ClassVar[str] = "half_life"


BUDGET_STMTS = (GpuHours, Period, OnSpent, Thresholds, HalfLife)

Stmt = Union[Setting, Level, Cond, RequireTopology, Allow, DenyStmt, SetStmt, Models, GpuHours, Period, OnSpent, Thresholds, HalfLife]


@dataclass(frozen=True, slots=True)
class Block:
    """A top-level declaration: `KIND [NAME] { stmts }`; `kind` is gpu/topology/quota/fraction/gang/agents/rule/budget/steer."""

    kind: str
    name: Ident | None
    stmts: tuple[Stmt, ...]
    span: Span


@dataclass(frozen=True, slots=True)
class PriorityDecl:
    """`priority NAME VALUE [preempts] [default]`."""

    name: Ident
    value: Num
    negative: bool
    preempts: bool
    default: bool
    span: Span
    kind: str = "priority"


Decl = Union[Block, PriorityDecl]


@dataclass(frozen=True, slots=True)
class Comment:
    """`# text` at a line and column (kept by the formatter)."""

    text: str
    span: Span


@dataclass(frozen=True, slots=True)
class File:
    """One parsed file: its declarations in source order and its comments."""

    path: str
    decls: tuple[Decl, ...]
    comments: tuple[Comment, ...]
    text: str = ""
    # (kind, name) read from the first line of each declaration with a syntax error: the checker
    # then does not call references to those names unknown (the syntax error is the one to fix)
    unparsed: tuple[tuple[str, str], ...] = ()
    # spans of declarations parsed with their bad statements blanked: checked for the errors of the rest,
    # but a statement found missing there may be the one that did not parse
    partial: tuple[Span, ...] = ()
