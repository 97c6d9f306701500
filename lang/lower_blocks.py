"""Lowering of the blocks with conditions inside them: gang, agents, rule."""

from __future__ import annotations

import difflib
from collections.abc import Set

from lang import ast, ir
from lang.absent import check_absent, present_when_true
from lang.checker import check_mode, check_models, check_statements, decl_name, known
from lang.diagnostics import warning
from lang.ir import Type
from lang.resources import check_resource, verbs_never_match
from lang.exprs import an
from lang.set_limits import lower_set_limit
from lang.template import lower_template

VERBS = {"create": "CREATE", "update": "UPDATE", "delete": "DELETE", "connect": "CONNECT", "any": "*", "*": "*"}
IDENTITY_FIELDS = {"user", "groups", "serviceaccount"}


def lower_gang(low, b: ast.Block) -> ir.Gang:
    """`gang NAME { for; require min_members; require topology T.L [when]; on unplaceable; mode }`."""
    stmts = check_statements(b, low.diags)
    selector = low.selector(stmts)
    given = present_when_true(selector)  # a `when` is evaluated only for what `for` selected
    reqs: list[ir.TopologyRequirement] = []
    for s in b.stmts:
        if not isinstance(s, ast.RequireTopology):
            continue
        when = low.condition(s.when, "when", given)
        topo, level = s.topology.name, s.level.name
        if topo not in low.scope.topologies:
            if low.scope.broken("topology", topo):
                continue
            low.err("E0103", f"unknown topology `{topo}`", s.topology.span, known("topologies", low.scope.topologies))
            continue
        if level not in low.scope.topologies[topo]:
            low.err("E0104", f"topology `{topo}` has no level `{level}`", s.level.span, "levels: " + ", ".join(low.scope.topologies[topo]))
            continue
        reqs.append(ir.TopologyRequirement(topo, level, when, s.span))
    for i, r in enumerate(reqs[:-1]):  # the last matching requirement wins: an unconditional later one hides this one
        later = next((x for x in reqs[i + 1 :] if x.when is None), None)
        if later is not None:
            low.diags.append(warning("W0303", f"`require topology {r.topology}.{r.level}` never applies", r.span, f"the unconditional requirement on line {later.span.line} always matches later and wins"))
    action = stmts.get("on unplaceable")
    on = "deny"
    if action is not None:
        if action.value.name in ("deny", "warn"):
            on = action.value.name
        else:
            low.err("E0110", f"unknown action `{action.value.name}` for `on unplaceable`", action.value.span, "use `deny` or `warn`")
    return ir.Gang(
        name=decl_name(b),
        selector=selector,
        require_min_members="require min_members" in stmts,
        topology=tuple(reqs),
        on_unplaceable=on,  # type: ignore[arg-type]
        mode=check_mode(stmts, low.diags),
        span=b.span,
        models=check_models(stmts, low.scope, low.diags),
    )


def lower_agents(low, b: ast.Block) -> ir.Agents:
    """`agents [NAME] { identity; allow VERBS RESOURCES [when]; deny [when] ["msg"]; mode }`."""
    stmts = check_statements(b, low.diags)
    identity = None
    if "identity" in stmts:
        identity = low.condition(stmts["identity"].expr, "identity")
        for f in _fields(identity):
            if f.name not in IDENTITY_FIELDS:
                low.err("E0114", f"`identity` can only read user, groups and serviceaccount, not `{f.name}`", f.span, "put conditions on the workload in `allow … when` or `deny when`")
    allows = tuple(_allow(low, s) for s in b.stmts if isinstance(s, ast.Allow))
    denies = []
    for s in b.stmts:
        if isinstance(s, ast.DenyStmt):
            msg = lower_template(s.message, low.scope.fields, low.diags) if s.message else None
            denies.append(ir.AgentDeny(low.condition(s.when, "when"), msg, s.span))
    return ir.Agents(decl_name(b), identity, allows, tuple(denies), check_mode(stmts, low.diags), b.span)


def _allow(low, s: ast.Allow) -> ir.AgentAllow:
    ops: set[str] = set()
    for v in s.verbs:
        op = VERBS.get(v.name)
        if op is None:
            hint = "exec and attach are `connect` on `pods/exec` and `pods/attach`" if v.name in ("exec", "attach") else _close(v.name, VERBS)
            low.err("E0109", f"unknown verb `{v.name}`", v.span, hint or "verbs: create, update, delete, connect, any")
        else:
            ops.add(op)
    resources: set[str] = set()
    for r in s.resources:
        if r.name in ("any", "*"):
            resources.add("*")
            continue
        resource, *problem = check_resource(r.name)
        if resource is None:  # a name no request carries: the allow could never match it
            low.err(problem[0], problem[1], r.span, problem[2])
        else:
            resources.add(resource)
    for r in sorted(resources):
        why = verbs_never_match(ops, r)
        if why is not None:
            low.diags.append(warning("W0307", f"no verb of this allow happens on `{r}`", s.span, why))
    if "CONNECT" in ops and any("/" not in r and r != "*" for r in resources):
        low.diags.append(warning("W0304", "`connect` only happens on subresources", s.span, "exec, attach and port-forward are `connect pods/exec`, `pods/attach`, `pods/portforward`"))
    if "*" in ops:
        ops = {"*"}
    if "*" in resources:
        resources = {"*"}
    return ir.AgentAllow(frozenset(ops), frozenset(resources), low.condition(s.when, "when"), s.span)


def lower_rule(low, b: ast.Block) -> ir.Rule:
    """`rule NAME { mode; for; when; deny "msg {field}"; set labels["k"] = EXPR }`."""
    stmts = check_statements(b, low.diags)
    selector = low.selector(stmts)
    when_stmt = stmts.get("when")
    when = low.condition(when_stmt.expr, "when", present_when_true(selector)) if when_stmt else None
    given = present_when_true(ir.And(tuple(x for x in (selector, when) if x is not None), b.span))
    actions: list = []
    for s in b.stmts:
        if isinstance(s, ast.DenyStmt):
            if s.when is not None:
                low.err("E0114", "in a rule, the condition goes in its own `when` statement", s.when.span, "write `when …` on one line and `deny \"…\"` on the next")
            if s.message is None:
                low.err("E0111", "a rule's `deny` needs a message", s.span, 'e.g. `deny "GPU pods need a team label"`')
                continue
            actions.append(ir.Deny(lower_template(s.message, low.scope.fields, low.diags), s.span))
        elif isinstance(s, ast.SetStmt):
            actions.append(_set(low, s, given))
    if not actions:
        low.err("E0111", f"rule `{decl_name(b)}` does nothing", b.span, "add a `deny \"…\"` or a `set labels[\"k\"] = …`")
    return ir.Rule(
        name=decl_name(b),
        selector=selector,
        when=when,
        actions=tuple(a for a in actions if a is not None),
        mode=check_mode(stmts, low.diags),
        span=b.span,
    )


def _set(low, s: ast.SetStmt, given: Set[str]) -> ir.SetField | ir.SetLimit | None:
    if s.target.name == "limits":
        return lower_set_limit(low, s)
    if s.target.name not in ("labels", "annotations"):
        low.err("E0112", f"`set` cannot write `{s.target.name}`", s.target.span, 'write `set labels["k"] = …`, `set annotations["k"] = …` or `set limits["nvidia.com/gpu"] = requests["nvidia.com/gpu"]`')
        return None
    if low.exprs.bare_word(s.value):  # `set labels["team"] = ml`
        low.err("E0101", f"unknown field `{s.value.dotted}`", s.value.span, f'to set the text, quote it: `set {s.target.name}[{s.key.raw}] = "{s.value.dotted}"`')
        return None
    value = low.exprs.value(s.value)
    if value is None:
        return None
    check_absent(value, given, low.diags)
    if value.type in (Type.MAP, Type.LIST):  # scalars render as in messages: 4000 milli-GPU -> "4", bytes -> "80Gi"
        low.err("E0201", f"a {s.target.name[:-1]} value must be a single value, found {an(value.type)}", s.value.span, 'index it, e.g. `namespace.labels["team"]`')
        return None
    if not s.key.value:
        low.err("E0112", f"a {s.target.name[:-1]} key cannot be empty", s.key.span)
        return None
    return ir.SetField(s.target.name, s.key.value, value, s.span)


def _fields(e) -> list[ir.Field]:
    if e is None:
        return []
    if isinstance(e, ir.Field):
        return [e]
    out: list[ir.Field] = []
    for attr in ("left", "right", "item", "target", "container"):
        if hasattr(e, attr):
            out += _fields(getattr(e, attr))
    for i in getattr(e, "items", ()):
        out += _fields(i)
    return out


def _close(name: str, options) -> str | None:
    close = difflib.get_close_matches(name, list(options), n=1)
    return f"did you mean `{close[0]}`?" if close else None
