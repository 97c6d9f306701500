"""Type-check one AST expression and lower it to a typed `lang.ir` expression, collecting diagnostics.

Numeric literals take the type of the side they are compared with: `gpus <= 0.25`
becomes 250 milli-GPU, `gpu_memory >= 10Gi` becomes bytes. A literal alone is an INT.
"""

from __future__ import annotations

import difflib
import functools
from dataclasses import dataclass, field
from fractions import Fraction

from lang import ast, ir, quantity
from lang.absent import show
from lang.diagnostics import Diagnostic, error
from lang.ir import Type
from lang.span import Span

def an(t: Type) -> str:
    """`a gpu amount`, `an int`: the type with its article, for messages."""
    return ("an " if t.value[0] in "aeiou" else "a ") + t.value


NUMERIC = {Type.INT, Type.GPU, Type.FRACTION, Type.BYTES}
_BINARY_UNITS = ("Ki", "Mi", "Gi", "Ti", "Pi", "Ei")


@dataclass
class Scope:
    """Names an expression may refer to besides subject fields."""

    gpus: set[str] = field(default_factory=set)
    topologies: dict[str, tuple[str, ...]] = field(default_factory=dict)  # name -> level names
    fields: dict[str, Type] = field(default_factory=lambda: dict(ir.SUBJECT_FIELDS))
    unparsed: set[tuple[str, str]] = field(default_factory=set)  # (kind, name) of declarations with syntax errors

    def broken(self, kind: str, name: str) -> bool:
        """Declared in a block that did not parse: a reference to it is not reported as unknown."""
        return (kind, name) in self.unparsed


@dataclass(frozen=True, slots=True)
class _Num:
    """A numeric literal whose type the context decides."""

    text: str
    span: Span
    negative: bool = False
    type: Type = Type.NONE


@functools.lru_cache(maxsize=4096)
def _exact(text: str):
    """The exact value of a literal (cached: policy sets repeat the same few numbers), or None."""
    if text.isascii() and text.isdigit():
        return Fraction(int(text))
    try:
        return quantity.parse(text)
    except quantity.QuantityError:
        return None


# The largest literal each type takes: past it no cluster has that much, and the number is a typo.
# GPUs: 2^31 GPU-equivalents (2^31 * 1000 milli-GPU stays far inside int64); bytes: 8Ei, about the int64
# of Kubernetes quantities; counts and priorities: int32, as the Kubernetes fields they compare with.
LIMITS = {Type.GPU: (2**31, "2147483648 (2^31) GPUs"), Type.FRACTION: (2**31, "2147483648 (2^31) GPUs"),
          Type.BYTES: (2**63, "8Ei (2^63 bytes, about what the int64 of a Kubernetes quantity holds)"),
          Type.INT: (2**31 - 1, "2147483647 (int32, as Kubernetes counts and priorities)")}


def _out_of_range(text: str, value, typ: Type, span: Span) -> Diagnostic | None:
    """E0305 for a literal past what its type can mean (`gpus 1e400`, a 32-digit count)."""
    limit = LIMITS.get(typ)
    if limit is None or abs(value) <= limit[0]:
        return None
    shown = text if len(text) <= 16 else quantity.compact(value)
    why = ": no cluster holds that much" if typ is not Type.INT else ""
    return error("E0305", f"`{shown}` is out of range{why}", span, f"at most {limit[1]}")


def coerce_number(text: str, typ: Type, span: Span, negative: bool = False) -> tuple[int | None, Diagnostic | None]:
    """The exact integer of a literal for a field of type `typ` (milli-GPU, bytes or plain int)."""
    value = _exact(text)
    if value is None:
        return None, error("E0202", f"`{text}` is not a number or quantity", span)
    if negative:
        value = -value
    too_big = _out_of_range(text, value, typ, span)
    if too_big is not None:
        return None, too_big
    has_binary = text.endswith(_BINARY_UNITS)
    if typ in (Type.GPU, Type.FRACTION):
        if has_binary:
            return None, error("E0201", f"`{text}` is a memory size, but {an(typ)} is expected", span, "GPU amounts are plain numbers like `8`, `0.25` or `500m`")
        milli = value * 1000
        if milli.denominator != 1:
            return None, error("E0202", f"`{text}` is finer than one thousandth of a GPU", span, "GPU amounts are exact to 1m (0.001)")
        return int(milli), None
    if typ is Type.BYTES:
        if value != 0 and not has_binary and not text[-1].isalpha():
            return None, error("E0202", f"`{text}` has no unit; memory sizes need one", span, f"write `{text}Gi` or `{text}Mi`")
        if value.denominator != 1:
            return None, error("E0202", f"`{text}` is not a whole number of bytes", span)
        return int(value), None
    if typ is Type.INT:
        if value.denominator != 1 or has_binary:
            return None, error("E0202", f"`{text}` is not a whole number", span)
        return int(value), None
    return None, error("E0201", f"a number cannot be compared with {an(typ)}", span)


class ExprLowerer:
    """Lowers expressions against a Scope, appending diagnostics to `diags`."""

    def __init__(self, scope: Scope, diags: list[Diagnostic]):
        self.scope = scope
        self.diags = diags

    def err(self, code: str, message: str, span: Span, help: str | None = None) -> None:
        self.diags.append(error(code, message, span, help))

    # ---- entry points ------------------------------------------------------

    def condition(self, e: ast.Expr) -> ir.Expr | None:
        """A boolean expression (`for`, `when`, `identity`)."""
        out = self.settle(self.lower(e))
        if out is not None and out.type is not Type.BOOL:
            self.err("E0203", f"this condition is {an(out.type)}, not a boolean", e.span, "compare it, e.g. `gpus > 0`")
            return None
        return out

    def value(self, e: ast.Expr) -> ir.Expr | None:
        """Any expression, numeric literals defaulting to INT."""
        return self.settle(self.lower(e))

    def settle(self, x):
        if isinstance(x, _Num):
            return self.literal(x, Type.INT)
        return x

    def literal(self, n: _Num, typ: Type) -> ir.Lit | None:
        value, diag = coerce_number(n.text, typ, n.span, n.negative)
        if diag:
            self.diags.append(diag)
            return None
        return ir.Lit(value, typ, n.span)

    # ---- per node ----------------------------------------------------------

    def lower(self, e: ast.Expr):
        method = getattr(self, "_" + type(e).__name__)
        return method(e)

    def _Paren(self, e: ast.Paren):
        return self.lower(e.item)

    def _Str(self, e: ast.Str):
        return ir.Lit(e.value, Type.STRING, e.span)

    def _Num(self, e: ast.Num):
        return _Num(e.text, e.span)

    def _Const(self, e: ast.Const):
        return ir.Lit(e.value, Type.NONE if e.value is None else Type.BOOL, e.span)

    def _Path(self, e: ast.Path):
        name = e.dotted
        if name in self.scope.fields:
            return ir.Field(name, self.scope.fields[name], e.span)
        if e.parts[0] in self.scope.topologies and len(e.parts) == 2:
            levels = self.scope.topologies[e.parts[0]]
            if e.parts[1] not in levels:
                self.err("E0104", f"topology `{e.parts[0]}` has no level `{e.parts[1]}`", e.span, "levels: " + ", ".join(levels))
                return None
            return ir.Lit((e.parts[0], e.parts[1]), Type.LEVEL, e.span)
        if len(e.parts) == 1 and (name in self.scope.gpus or self.scope.broken("gpu", name)):
            return ir.Lit(name, Type.STRING, e.span)  # `gpu_model == h100` reads as the model's name
        if len(e.parts) == 2 and self.scope.broken("topology", e.parts[0]):
            return None  # its levels are unknown until its syntax error is fixed
        self.err("E0101", f"unknown field `{name}`", e.span, self._suggest(name))
        return None

    def _suggest(self, name: str) -> str | None:
        if "-" in name and name.split("-")[0] in self.scope.fields:
            return "to subtract, put spaces around `-`: " + " - ".join(name.split("-"))
        close = difflib.get_close_matches(name, list(self.scope.fields) + list(self.scope.topologies), n=1)
        return f"did you mean `{close[0]}`?" if close else None

    def _IndexExpr(self, e: ast.IndexExpr):
        target = self.settle(self.lower(e.target))
        if target is None:
            return None
        if target.type is not Type.MAP:
            self.err("E0204", f"only maps can be indexed; this is {an(target.type)}", e.target.span)
            return None
        return ir.Index(target, e.key.value, e.span)

    def _HasExpr(self, e: ast.HasExpr):
        target = self.settle(self.lower(e.target))
        return None if target is None else ir.Has(target, e.span)

    def _NotExpr(self, e: ast.NotExpr):
        item = self._bool(e.item)
        return None if item is None else ir.Not(item, e.span)

    def _BoolOp(self, e: ast.BoolOp):
        items = [self._bool(i) for i in e.items]
        if any(i is None for i in items):
            return None
        flat: list[ir.Expr] = []
        cls = ir.And if e.op == "and" else ir.Or
        for i in items:  # `a and (b and c)` is one And: the engine short-circuits over a flat tuple
            flat.extend(i.items if isinstance(i, cls) else (i,))
        return cls(tuple(flat), e.span)

    def _bool(self, e: ast.Expr):
        x = self.settle(self.lower(e))
        if x is not None and x.type is not Type.BOOL:
            self.err("E0203", f"expected a boolean here, found {an(x.type)}", e.span)
            return None
        return x

    def _NegExpr(self, e: ast.NegExpr):
        x = self.lower(e.item)
        if isinstance(x, _Num):
            return _Num(x.text, e.span, not x.negative)
        if x is None:
            return None
        if x.type not in NUMERIC:
            self.err("E0204", f"`-` needs a number, found {an(x.type)}", e.span)
            return None
        return ir.Arith("-", ir.Lit(0, x.type, e.span), x, x.type, e.span)

    def _pair(self, left, right):
        """Coerce numeric literals on either side to the other side's type."""
        if isinstance(left, _Num) and isinstance(right, _Num):
            return self.literal(left, Type.INT), self.literal(right, Type.INT)
        if isinstance(left, _Num):
            return (self.literal(left, right.type) if right is not None else None), right
        if isinstance(right, _Num):
            return left, (self.literal(right, left.type) if left is not None else None)
        return left, right

    def bare_word(self, e: ast.Expr) -> bool:
        """A name that is no field, model or level: most likely text the author forgot to quote."""
        if not isinstance(e, ast.Path) or e.dotted in self.scope.fields:
            return False
        if len(e.parts) == 1:
            return e.dotted not in self.scope.gpus and not self.scope.broken("gpu", e.dotted)
        return not (len(e.parts) == 2 and (e.parts[0] in self.scope.topologies or self.scope.broken("topology", e.parts[0])))

    def _quote_it(self, word: ast.Path, other, text: str) -> None:
        """E0101 (E0102 beside `gpu_model`) for a bare word compared with a string: say to quote it."""
        if isinstance(other, ir.Field) and other.name == "gpu_model":
            known = ", ".join(sorted(self.scope.gpus)) or "none"
            self.err("E0102", f"unknown GPU model `{word.dotted}`", word.span, f"declared models: {known}")
            return
        self.err("E0101", f"unknown field `{word.dotted}`", word.span, f"to compare with the text, quote it: `{text}`")

    def _CompareExpr(self, e: ast.CompareExpr):
        bare_right = self.bare_word(e.right)
        if bare_right != self.bare_word(e.left):  # `namespace == vision`
            word, other = (e.right, e.left) if bare_right else (e.left, e.right)
            o = self.settle(self.lower(other))
            if o is not None and o.type is Type.STRING and not isinstance(o, ir.Lit):  # beside a literal it is a misspelt field
                quoted = f'"{word.dotted}"'
                self._quote_it(word, o, f"{show(o)} {e.op} {quoted}" if word is e.right else f"{quoted} {e.op} {show(o)}")
            else:
                self.lower(word)  # the usual unknown-field diagnostic
            return None
        left, right = self._pair(self.lower(e.left), self.lower(e.right))
        if left is None or right is None:
            return None
        if Type.NONE in (left.type, right.type):
            return ir.Compare(e.op, left, right, e.span)  # always false; the folder reports it
        if left.type is not right.type:
            self.err("E0201", f"cannot compare {an(left.type)} with {an(right.type)}", e.span, _compare_help(left, right))
            return None
        self._check_model(left, right)
        if e.op not in ("==", "!=") and left.type not in NUMERIC:
            self.err("E0204", f"`{e.op}` needs numbers; {an(left.type)} can only be tested with `==` or `!=`", e.span)
            return None
        if left.type in (Type.MAP, Type.LIST):
            self.err("E0204", f"{an(left.type)} cannot be compared; use `\"k\" in …`", e.span)
            return None
        return ir.Compare(e.op, left, right, e.span)

    def _check_model(self, left, right) -> None:
        """`gpu_model == "a100"` names a model no `gpu` block declares: it could never match."""
        for a, b in ((left, right), (right, left)):
            if isinstance(a, ir.Field) and a.name == "gpu_model" and isinstance(b, ir.Lit) and isinstance(b.value, str):
                if b.value not in self.scope.gpus and not self.scope.broken("gpu", b.value):
                    known = ", ".join(sorted(self.scope.gpus)) or "none"
                    self.err("E0102", f"unknown GPU model {b.value!r}", b.span, f"declared models: {known}")

    def _ArithExpr(self, e: ast.ArithExpr):
        left, right = self.lower(e.left), self.lower(e.right)
        if e.op == "*":  # a scale: one side must be a plain integer
            left = self.literal(left, Type.INT) if isinstance(left, _Num) else left
            right = self.literal(right, Type.INT) if isinstance(right, _Num) else right
        else:
            left, right = self._pair(left, right)
        if left is None or right is None:
            return None
        for side in (left, right):
            if side.type not in NUMERIC:
                self.err("E0204", f"`{e.op}` needs numbers, found {an(side.type)}", side.span)
                return None
        if e.op == "*":
            if Type.INT not in (left.type, right.type):
                self.err("E0204", f"cannot multiply {an(left.type)} by {an(right.type)}", e.span, "multiply by a whole number")
                return None
            typ = right.type if left.type is Type.INT else left.type
        elif left.type is not right.type:
            self.err("E0201", f"cannot {'add' if e.op == '+' else 'subtract'} {an(right.type)} {'to' if e.op == '+' else 'from'} {an(left.type)}", e.span)
            return None
        else:
            typ = left.type
        return ir.Arith(e.op, left, right, typ, e.span)

    def _MatchesExpr(self, e: ast.MatchesExpr):
        target = self.settle(self.lower(e.target))
        if target is None:
            return None
        if target.type is not Type.STRING:
            self.err("E0204", f"`matches` needs a string, found {an(target.type)}", e.target.span)
            return None
        return ir.Matches(target, e.pattern.value, e.span)

    def _InExpr(self, e: ast.InExpr):
        if self.bare_word(e.item):  # `admins in groups`
            container = self.settle(self.lower(e.container))
            if container is not None and container.type in (Type.MAP, Type.LIST):
                self._quote_it(e.item, None, f'"{e.item.dotted}" in {show(container)}')
            else:
                self.lower(e.item)
            return None
        item = self.settle(self.lower(e.item))
        container = self.settle(self.lower(e.container))
        if item is None or container is None:
            return None
        if container.type not in (Type.MAP, Type.LIST):
            self.err("E0204", f"`in` needs a map or a list on its right, found {an(container.type)}", e.container.span)
            return None
        if item.type is not Type.STRING:
            self.err("E0201", f"`in` looks up a string, found {an(item.type)}", e.item.span)
            return None
        return ir.Contains(item, container, e.span)


def _compare_help(left, right) -> str | None:
    types = {left.type, right.type}
    if Type.STRING in types and types & NUMERIC:
        return "numbers and quantities are written without quotes: `gpus > 8`"
    return None
