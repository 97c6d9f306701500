"""Expression code generation: one IR expression -> the source of one Python function, compiled once.

Semantics are those of `policy.expr`'s reference closures: comparisons and `matches`
with a missing value are False, `has(x)` is `x is not None`, `in` on a missing side is
False, arithmetic with none is none. Only literals (via `repr` of str/int/bool/None)
and attribute names of known subject fields reach the source text; regexes, level
comparisons and other objects are passed in as named constants, never as text.
"""

from __future__ import annotations

import fnmatch
import re

from lang import ir
from policy.compiler.reference import Levels, attr_name, compile_level_compare

# Subject fields that are never None on a Workload: their comparisons skip the None test.
NEVER_NONE = frozenset(
    {"kind", "operation", "pods", "gpus", "total_gpus", "agent", "privileged", "host_path", "host_network",
     "groups", "labels", "annotations", "namespace_labels", "gpu_pods", "memory_share", "gpu_limit_mismatches",
     "unread", "quota_covered"}
)
_MILLI = (ir.Type.GPU, ir.Type.FRACTION)
_SAFE_LITERALS = (str, int, bool, type(None))


class Gen:
    def __init__(self, levels: Levels):
        self.levels = levels
        self.consts: dict[str, object] = {}
        self.n = 0

    def const(self, value: object) -> str:
        name = f"_k{len(self.consts)}"
        self.consts[name] = value
        return name

    def var(self) -> str:
        self.n += 1
        return f"_v{self.n}"


def _never_none(e: ir.Expr) -> bool:
    if isinstance(e, ir.Field):
        return attr_name(e.name) in NEVER_NONE
    if isinstance(e, ir.Lit):
        return e.value is not None
    return isinstance(e, (ir.Compare, ir.Matches, ir.Contains, ir.Has, ir.Not, ir.And, ir.Or))


def _src(e: ir.Expr, g: Gen) -> str:
    kind = type(e)
    if kind is ir.Lit:
        if type(e.value) in _SAFE_LITERALS:
            return repr(e.value)
        return g.const(e.value)
    if kind is ir.Field:
        return f"w.{attr_name(e.name)}"
    if kind is ir.Index:
        target = _src(e.target, g)
        if _never_none(e.target):
            return f"{target}.get({e.key!r})"
        v = g.var()
        return f"(None if ({v} := {target}) is None else {v}.get({e.key!r}))"
    if kind is ir.Compare:
        if ir.Type.LEVEL in (e.left.type, e.right.type):
            return f"{g.const(compile_level_compare(e, g.levels))}(w)"
        return _compare(e, g)
    if kind is ir.Arith:
        a, b = g.var(), g.var()
        scale = " // 1000" if e.op == "*" and e.left.type in _MILLI and e.right.type in _MILLI else ""
        return f"(None if ({a} := {_src(e.left, g)}) is None or ({b} := {_src(e.right, g)}) is None else ({a} {e.op} {b}){scale})"
    if kind is ir.Matches:
        target = _src(e.target, g)
        test = _glob_test(e.pattern, g)
        if _never_none(e.target):
            return test.format(v=target)
        v = g.var()
        return f"(({v} := {target}) is not None and {test.format(v=v)})"
    if kind is ir.Contains:
        item, container = _src(e.item, g), _src(e.container, g)
        if _never_none(e.item) and _never_none(e.container):
            return f"({item} in {container})"
        i, c = g.var(), g.var()
        return f"(({i} := {item}) is not None and ({c} := {container}) is not None and {i} in {c})"
    if kind is ir.Has:
        if isinstance(e.target, ir.Lit) or _never_none(e.target):
            return "True" if _never_none(e.target) else "False"
        return f"({_src(e.target, g)} is not None)"
    if kind is ir.Not:
        return f"(not {_src(e.item, g)})"
    if kind is ir.And:
        return "(" + " and ".join(_truth(i, g) for i in e.items) + ")"
    if kind is ir.Or:
        return "(" + " or ".join(_truth(i, g) for i in e.items) + ")"
    raise TypeError(f"unknown expression node {kind.__name__}")


_GLOB_SPECIAL = re.compile(r"[*?\[]")


def _glob_test(pattern: str, g: Gen) -> str:
    """A test of `{v}` against an fnmatch glob: string methods for the common shapes, a regex otherwise.

    `team-a*` -> startswith, `*-dev` -> endswith, `*x*` -> `in`, no wildcard -> ==.
    """
    core = pattern.strip("*")
    if not _GLOB_SPECIAL.search(core):
        lead, trail = pattern.startswith("*"), pattern.endswith("*") and len(pattern) > 1
        if not core:
            return "True"  # `*` matches any present string
        if lead and trail:
            return f"({core!r} in {{v}})"
        if trail and pattern == core + "*" * (len(pattern) - len(core)):
            return f"{{v}}.startswith({core!r})"
        if lead and pattern == "*" * (len(pattern) - len(core)) + core:
            return f"{{v}}.endswith({core!r})"
        if pattern == core:
            return f"({{v}} == {core!r})"
    match = g.const(re.compile(fnmatch.translate(pattern)).match)
    return f"({match}({{v}}) is not None)"


def _truth(e: ir.Expr, g: Gen) -> str:
    """A sub-condition as a real bool, so `and`/`or` chains return True/False, not operands."""
    src = _src(e, g)
    return src if isinstance(e, (ir.Compare, ir.Matches, ir.Contains, ir.Has, ir.Not, ir.And, ir.Or)) else f"bool({src})"


def _compare(e: ir.Compare, g: Gen) -> str:
    left, right = _src(e.left, g), _src(e.right, g)
    if isinstance(e.right, ir.Lit) and e.right.value is None or isinstance(e.left, ir.Lit) and e.left.value is None:
        return "False"
    checks = []
    if not _never_none(e.left):
        v = g.var()
        checks.append(f"({v} := {left}) is not None")
        left = v
    if not _never_none(e.right):
        v = g.var()
        checks.append(f"({v} := {right}) is not None")
        right = v
    return "(" + " and ".join([*checks, f"{left} {e.op} {right}"]) + ")"


def source(expr: ir.Expr, g: Gen) -> str:
    """The inline source of a condition over `w`, its constants registered in `g`."""
    return _truth(expr, g)


def generate_condition(expr: ir.Expr, levels: Levels):
    """The compiled function `f(w) -> bool` of a condition."""
    g = Gen(levels)
    code = compile(f"lambda w: {_truth(expr, g)}", "<policy condition>", "eval")
    return eval(code, {"__builtins__": {"bool": bool}, **g.consts})  # noqa: S307 - source built from the IR only


def generate(expr: ir.Expr, levels: Levels):
    """The compiled function `f(w)` of `expr`."""
    g = Gen(levels)
    body = _src(expr, g)
    code = compile(f"lambda w: {body}", "<policy expression>", "eval")
    return eval(code, {"__builtins__": {"bool": bool}, **g.consts})  # noqa: S307 - source built from the IR only
