"""`rule` blocks: `for` selects, `when` tests, `deny "msg {field}"`, `set labels["k"] = EXPR` and `set limits["R"] = requests["R"]` act.

`set` becomes a JSONPatch op on the mutating side only, for objects the request
carries (CREATE/UPDATE). A value that evaluates to none sets nothing (a label cannot
hold "none"); the explain trace says so. Values are rendered as text (labels and
annotations are strings): GPU amounts as `0.25`, memory as `80Gi`.
"""

from __future__ import annotations

from typing import Callable

from lang import ir
from policy.context import Context, where
from policy.blocks.limits import dotted, limit_fills
from policy.compiler.expr import render_value
from policy.patch import holds

_MAP_PATH = {"labels": ("metadata", "labels"), "annotations": ("metadata", "annotations")}


def make_check(
    rule: ir.Rule, selector, when, compile_value, compile_message, mode: str, *, selected: bool = False
) -> Callable[[Context], None]:
    """The per-request check of one rule; `compile_*` turn IR expressions/templates into closures.

    `selected`: the pipeline already tested `for` and `when` and recorded the block; only act.
    """
    block = rule.id
    location = where(rule.span)
    denies = []
    sets = []
    limits = []
    for action in rule.actions:
        if isinstance(action, ir.Deny):
            denies.append((compile_message(action.message), where(action.span)))
        elif isinstance(action, ir.SetLimit):
            limits.append((action.resource, where(action.span)))
        else:
            path = _MAP_PATH[action.target] + (action.key,)
            sets.append((path, compile_value(action.value), action.value.type, where(action.span), action))

    def check(ctx: Context) -> None:
        w = ctx.w
        if not selected:
            if selector is not None and not selector(w):
                return
            ctx.blocks.append(block)
            if when is not None and not when(w):
                ctx.note(block, location, "selected; `when` is false")
                return
        for message, loc in denies:
            ctx.find("RuleDenied", block, loc, f"{rule.name}: {message(w)}", mode, {})
        if sets and ctx.mutate and w.obj is not None and w.operation in ("CREATE", "UPDATE"):
            for path, value, type_, loc, action in sets:
                v = value(w)
                if v is None:
                    ctx.note(block, loc, f"set {action.target}[{action.key!r}]: value is none, nothing set")
                    continue
                text = render_value(v, type_)
                if mode == "enforce":
                    if ctx.patch.set(path, text):
                        ctx.note(block, loc, f"set {action.target}[{action.key!r}] = {text!r}")
                elif not holds(w.obj, path, text):  # warn/audit: report the change instead of making it (none when already so)
                    msg = f"{rule.name}: would set {action.target}[{action.key!r}] = {text!r}"
                    ctx.find("RuleWouldSet", block, loc, msg, mode, {"path": list(path), "value": text})
        if limits and ctx.mutate and w.obj is not None and w.operation in ("CREATE", "UPDATE"):
            for resource, loc in limits:
                for path, value in limit_fills(w, resource):
                    if mode == "enforce":
                        if ctx.patch.set(path, value):
                            ctx.note(block, loc, f"set {dotted(path)} = {value!r}")
                    else:
                        msg = f"{rule.name}: would set {dotted(path)} = {value!r}"
                        ctx.find("RuleWouldSet", block, loc, msg, mode, {"path": list(path), "value": value})

    return check
