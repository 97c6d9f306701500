"""Parser callbacks: lark applies these inline during the LALR parse, so rules become frozen AST nodes
directly (no lark trees). Tokens arrive as `str` subclasses with `type`, `line`, `column`, `end_line`,
`end_column`; this module needs no lark import. Expressions arrive as a flat operand/operator list
and are shaped here by precedence climbing.
"""

from __future__ import annotations

from lang import ast
from lang.diagnostics import error
from lang.span import Span


class _Inline:
    """Stand-in for a lark tree of an inlined `_rule`: the parser only reads `.children`."""

    __slots__ = ("data", "children")

    def __init__(self, data, children):
        self.data = data
        self.children = children


def _start(x) -> tuple[int, int]:
    if isinstance(x, str):
        return x.line, x.column
    if isinstance(x, tuple):
        return _start(x[0])
    return x.span.line, x.span.col


def _end(x) -> tuple[int, int]:
    if isinstance(x, str):
        return x.end_line, x.end_column
    if isinstance(x, tuple):
        return _end(x[-1])
    return x.span.end_line, x.span.end_col


MAX_DEPTH = 64  # expression nesting; deeper would exhaust Python's stack in the checker


class BuildError(Exception):
    """A syntax error found while building the AST (operator misuse, absurd nesting)."""

    def __init__(self, code: str, message: str, span: Span, help: str | None = None):
        super().__init__(message)
        self.diagnostic = error(code, message, span, help)


# Binary operators: token type -> (precedence, AST builder name); higher binds tighter.
_BINARY = {"OR": 1, "AND": 2, "CMP": 4, "MATCHES": 4, "IN": 4, "PLUS": 5, "MINUS": 5, "STAR": 6}
_NOT_PREC = 3  # `not` applies to a whole comparison: `not a == b` is `not (a == b)`


class Builder:
    """Applied inline by the LALR parser: lark trees are never built; rules become AST nodes."""

    file = "<input>"  # not `path`: that name is the grammar rule of dotted names
    depth: dict[int, int] = {}  # id(expression node) -> nesting depth, reset per parse

    def nest(self, node, *children):
        """Record the node's depth; refuse absurd nesting before any recursive pass sees it."""
        d = 1 + max((self.depth.get(id(c), 0) for c in children), default=0)
        if d > MAX_DEPTH:
            raise BuildError("E0006", f"expression nested more than {MAX_DEPTH} levels deep", node.span, "split it into several rules or `when` lines")
        self.depth[id(node)] = d
        return node

    def __default__(self, data, children, meta):  # inlined helper rules (`_decl`, …): lark splices `.children`
        return _Inline(data, children)

    def sp(self, kids) -> Span:
        return Span(self.file, *_start(kids[0]), *_end(kids[-1]))

    def tok(self, t) -> Span:
        return Span(self.file, t.line, t.column, t.end_line, t.end_column)

    def ident(self, t) -> ast.Ident:
        return ast.Ident(str(t), self.tok(t))

    def str_(self, t) -> ast.Str:
        return ast.Str(unescape(str(t)), str(t), self.tok(t))

    def start(self, kids):
        return kids

    # ---- declarations ------------------------------------------------------

    def _block(self, kids):
        kind = str(kids[0])
        name = self.ident(kids[1]) if isinstance(kids[1], str) and kids[1].type == "NAME" else None
        stmts = tuple(k for k in kids[1:-1] if not isinstance(k, str))
        return ast.Block(kind, name, stmts, self.sp(kids))

    gpu_block = topology_block = cohort_block = quota_block = fraction_block = gang_block = agents_block = rule_block = budget_block = steer_block = _block

    def priority_decl(self, kids):
        types = [k.type for k in kids]
        number = kids[types.index("NUMBER")]
        return ast.PriorityDecl(
            name=self.ident(kids[1]),
            value=ast.Num(str(number), self.tok(number)),
            negative="MINUS" in types,
            preempts="PREEMPTS" in types,
            default="DEFAULT" in types,
            span=self.sp(kids),
        )

    # ---- statements --------------------------------------------------------

    def level_stmt(self, kids):
        return ast.Level(self.ident(kids[0]), self.str_(kids[1]), self.sp(kids))

    def _cond(self, kids):
        return ast.Cond(str(kids[0]), kids[1], self.sp(kids))

    for_stmt = when_stmt = identity_stmt = _cond

    def require_members_stmt(self, kids):
        return ast.Setting("require min_members", None, self.sp(kids))

    def require_topology_stmt(self, kids):
        when = kids[3] if len(kids) > 3 else None
        return ast.RequireTopology(self.ident(kids[1]), self.ident(kids[2]), when, self.sp(kids))

    def models_stmt(self, kids):
        return ast.Models(tuple(self.ident(k) for k in kids[1:]), self.sp(kids))

    def verbs(self, kids):
        return tuple(kids)

    resources = verbs

    def verb(self, kids):
        return self.ident(kids[0])

    def resource(self, kids):
        names = [str(k) for k in kids if k.type != "SLASH"]
        sub = [str(kids[-1])] if len(kids) > 1 and kids[-2].type == "SLASH" else []
        text = "/".join([".".join(names[: len(names) - len(sub)]), *sub])
        return ast.Ident(text, self.sp(kids))

    def allow_stmt(self, kids):
        when = kids[3] if len(kids) > 3 else None
        return ast.Allow(kids[1], kids[2], when, self.sp(kids))

    def deny_stmt(self, kids):
        msg = self.str_(kids[-1]) if isinstance(kids[-1], str) and kids[-1].type == "STRING" else None
        when = kids[1] if len(kids) > 1 and not isinstance(kids[1], str) else None
        return ast.DenyStmt(when, msg, self.sp(kids))

    def set_stmt(self, kids):
        return ast.SetStmt(self.ident(kids[1]), self.str_(kids[2]), kids[3], self.sp(kids))

    def _setting(self, kids):
        key = _SETTING_KEYS[kids[0].type]
        value = kids[1]
        lit = self.str_(value) if value.type == "STRING" else ast.Num(str(value), self.tok(value)) if value.type == "NUMBER" else self.ident(value)
        of = self.ident(kids[2]) if len(kids) > 2 else None
        return ast.Setting(key, lit, self.sp(kids), of)

    product_stmt = memory_stmt = cohort_stmt = gpus_stmt = gpu_memory_stmt = borrow_stmt = lend_stmt = weight_stmt = parent_stmt = _setting
    min_stmt = max_stmt = per_gpu_stmt = unplaceable_stmt = mode_stmt = by_stmt = nodes_stmt = _setting

    # ---- budget statements (lang/lower_budget.py checks them) ---------------

    def num(self, t) -> ast.Num:
        return ast.Num(str(t), self.tok(t))

    def gpu_hours_stmt(self, kids):
        return ast.GpuHours(self.num(kids[1]), self.ident(kids[2]) if len(kids) > 2 else None, self.sp(kids))

    def period_stmt(self, kids):
        zone = next((self.str_(k) for k in kids[2:] if k.type == "STRING"), None)
        return ast.Period(self.ident(kids[1]), zone, self.sp(kids))

    def spent_stmt(self, kids):
        names = [k for k in kids[1:] if k.type == "NAME"]
        return ast.OnSpent(self.ident(names[0]), self.ident(names[1]) if len(names) > 1 else None, self.sp(kids))

    def warn_at_stmt(self, kids):
        return ast.Thresholds(tuple(self.num(k) for k in kids if k.type == "NUMBER"), self.sp(kids))

    def half_life_stmt(self, kids):
        return ast.HalfLife(self.num(kids[1]), self.ident(kids[2]), self.sp(kids))

    def memory_floor_stmt(self, kids):
        s = self._setting(kids)
        return ast.Setting("memory at least", s.value, s.span)

    # ---- expressions -------------------------------------------------------

    def path(self, kids):
        return ast.Path(tuple(str(k) for k in kids), self.sp(kids))

    def string(self, kids):
        return self.str_(kids[0])

    def number(self, kids):
        return ast.Num(str(kids[0]), self.tok(kids[0]))

    def true(self, kids):
        return ast.Const(True, self.sp(kids))

    def false(self, kids):
        return ast.Const(False, self.sp(kids))

    def none(self, kids):
        return ast.Const(None, self.sp(kids))

    def index(self, kids):
        return self.nest(ast.IndexExpr(kids[0], self.str_(kids[1]), self.sp(kids)), kids[0])

    def has(self, kids):
        return self.nest(ast.HasExpr(kids[1], self.sp(kids)), kids[1])

    def paren(self, kids):
        return self.nest(ast.Paren(kids[1], self.sp(kids)), kids[1])

    # Precedence climbing over the flat operand/operator list of `expr`.

    def expr(self, kids):
        prefixes = 0
        for k in kids:  # refuse `not not not …` before recursing over it
            prefixes = prefixes + 1 if isinstance(k, str) and k.type in ("NOT", "MINUS") else 0
            if prefixes > MAX_DEPTH:
                raise BuildError("E0006", f"expression nested more than {MAX_DEPTH} levels deep", self.tok(k))
        node, pos = self._climb(kids, 0, 1)
        if pos != len(kids):  # cannot happen with the grammar; defensive
            raise BuildError("E0001", "unexpected operator", self.tok(kids[pos]))
        return node

    def _prefixed(self, kids, pos, min_prec):
        k = kids[pos]
        if isinstance(k, str) and k.type == "NOT":
            if min_prec > _NOT_PREC:
                raise BuildError("E0001", "`not` must come before the whole comparison", self.tok(k), "write `not (a == b)`")
            inner, pos = self._climb(kids, pos + 1, _NOT_PREC)
            return self.nest(ast.NotExpr(inner, self.sp([k, inner])), inner), pos
        if isinstance(k, str) and k.type == "MINUS":
            inner, pos = self._prefixed(kids, pos + 1, 7)
            return self.nest(ast.NegExpr(inner, self.sp([k, inner])), inner), pos
        return k, pos + 1

    def _climb(self, kids, pos, min_prec):
        left, pos = self._prefixed(kids, pos, min_prec)
        while pos < len(kids):
            op = kids[pos]
            prec = _BINARY[op.type]
            if prec < min_prec:
                break
            if op.type in ("OR", "AND"):  # a whole `a or b or …` run becomes one node, built once: linear in its length
                items = [left]
                while pos < len(kids) and kids[pos].type == op.type:
                    right, pos = self._climb(kids, pos + 1, prec + 1)
                    items.append(right)
                left = self.nest(ast.BoolOp(op.type.lower(), tuple(items), self.sp([items[0], items[-1]])), *items)
                continue
            right, pos = self._climb(kids, pos + 1, prec + 1)
            left = self._binary(op, left, right)
            if prec == 4 and pos < len(kids) and _BINARY[kids[pos].type] == 4:
                raise BuildError("E0001", "comparisons cannot be chained", self.tok(kids[pos]), "join them with `and`")
        return left, pos

    def _binary(self, op, left, right):
        span = self.sp([left, right])
        t = op.type
        if t == "CMP":
            return self.nest(ast.CompareExpr(str(op), left, right, span), left, right)
        if t == "MATCHES":
            if not isinstance(right, ast.Str):
                raise BuildError("E0001", "`matches` needs a quoted glob pattern", right.span, 'e.g. `namespace matches "team-*"`')
            return self.nest(ast.MatchesExpr(left, right, span), left)
        if t == "IN":
            return self.nest(ast.InExpr(left, right, span), left, right)
        return self.nest(ast.ArithExpr(str(op), left, right, span), left, right)


_SETTING_KEYS = {  # the statement's leading keyword token -> Setting.key
    "PRODUCT": "product",
    "MEMORY": "memory",
    "COHORT": "cohort",
    "GPUS": "gpus",
    "GPU_MEMORY": "gpu_memory",
    "BORROW": "borrow",
    "LEND": "lend",
    "WEIGHT": "weight",
    "PARENT": "parent",
    "MIN": "min",
    "MAX": "max",
    "PER_GPU": "per_gpu at most",
    "ON": "on unplaceable",
    "MODE": "mode",
    "BY": "by",
    "NODES": "nodes",
}

_ESCAPES = {"n": "\n", "t": "\t", '"': '"', "\\": "\\"}


def unescape(raw: str) -> str:
    """The value of a string literal: `\\n`, `\\t`, `\\"`, `\\\\` are escapes; other backslashes stay."""
    body = raw[1:-1]
    if "\\" not in body:
        return body
    out, i = [], 0
    while i < len(body):
        ch = body[i]
        if ch == "\\" and i + 1 < len(body) and body[i + 1] in _ESCAPES:
            out.append(_ESCAPES[body[i + 1]])
            i += 2
        else:
            out.append(ch)
            i += 1
    return "".join(out)
