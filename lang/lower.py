"""AST files -> one checked `ir.PolicySet` (declarations and quotas here; gangs, agents, rules in lower_blocks)."""

from __future__ import annotations

from collections.abc import Set

from lang import ast, ir
from lang.absent import NOTHING, check_absent
from lang.cohorts import check_tree, lower_cohort, lower_weight
from lang.checker import check_borrow, check_cohorts, check_mode, check_models, check_priorities, check_statements, check_topology_levels, collect_scope, decl_name, known
from lang.diagnostics import Diagnostic, error, warning
from lang.exprs import ExprLowerer, Scope, coerce_number
from lang.fold import truth
from lang.reads import field_uses
from lang.ir import Type

MAX_PRIORITY = 1_000_000_000  # Kubernetes reserves larger values for system classes


class Lowerer:
    """Shared state of one lowering: scope, diagnostics, the expression lowerer."""

    def __init__(self, scope: Scope, diags: list[Diagnostic]):
        self.scope = scope
        self.diags = diags
        self.exprs = ExprLowerer(scope, diags)

    def err(self, code: str, message: str, span, help: str | None = None) -> None:
        self.diags.append(error(code, message, span, help))

    def amount(self, s: ast.Setting | None, typ: Type) -> int | None:
        """The exact value of a statement's number for a field of type `typ`."""
        if s is None:
            return None
        value, diag = coerce_number(s.value.text, typ, s.value.span)
        if diag:
            self.diags.append(diag)
        return value

    def condition(self, e: ast.Expr | None, what: str, given: Set[str] = NOTHING) -> ir.Expr | None:
        """A boolean condition; E0301 when it can never be true, W0301 when it always is, E0205 for an unguarded optional value.

        `given`: values a dominating condition (the block's `for`) already proved present.
        """
        if e is None:
            return None
        out = self.exprs.condition(e)
        check_absent(out, given, self.diags)
        t = truth(out)
        if t is False:
            self.err("E0301", f"this `{what}` can never be true", e.span, "a comparison with `none` is always false; use `has(x)`" if _mentions_none(out) else None)
        elif t is True:
            self.diags.append(warning("W0301", f"this `{what}` is always true", e.span, f"remove the `{what}` line"))
        return out

    def selector(self, stmts: dict) -> ir.Expr | None:
        s = stmts.get("for")
        return self.condition(s.expr, "for") if s else None

    # ---- declarations ------------------------------------------------------

    def gpu(self, b: ast.Block) -> ir.GpuModel | None:
        stmts = check_statements(b, self.diags)
        product, memory = stmts.get("product"), stmts.get("memory")
        for key, s in (("product", product), ("memory", memory)):
            if s is None:
                self.err("E0111", f"gpu `{decl_name(b)}` needs a `{key}`", b.span, 'e.g. `gpu h100 { product "NVIDIA-H100-80GB-HBM3" memory 80Gi }`')
        if product is not None and not isinstance(product.value, ast.Str):
            return None
        mem = self.amount(memory, Type.BYTES)
        if product is None or mem is None:
            return None
        if mem <= 0:
            self.err("E0305", "a GPU needs some memory", memory.value.span)
        return ir.GpuModel(decl_name(b), product.value.value, mem, b.span)

    def topology(self, b: ast.Block) -> ir.Topology:
        check_topology_levels(b, self.diags)
        levels = tuple(ir.TopologyLevel(s.name.name, s.label.value, s.span) for s in b.stmts if isinstance(s, ast.Level))
        return ir.Topology(decl_name(b), levels, b.span)

    def priority(self, p: ast.PriorityDecl) -> ir.Priority | None:
        value, diag = coerce_number(p.value.text, Type.INT, p.value.span, p.negative)
        if diag:
            self.diags.append(diag)
            return None
        if not -2_147_483_648 <= value <= MAX_PRIORITY:
            self.err("E0305", f"priority {value} is out of range", p.value.span, f"user classes take values from -2147483648 to {MAX_PRIORITY}")
        return ir.Priority(p.name.name, value, p.preempts, p.default, p.span)

    def quota(self, b: ast.Block) -> ir.Quota:
        stmts = check_statements(b, self.diags)
        total = self.amount(stmts.get("gpus"), Type.GPU)
        per_model = []
        for key, s in stmts.items():
            if not key.startswith("gpus of "):
                continue
            amount = self.amount(s, Type.GPU)
            if self.scope.broken("gpu", s.of.name):
                continue
            if s.of.name not in self.scope.gpus and not self.scope.broken("gpu", s.of.name):
                self.err("E0102", f"unknown GPU model `{s.of.name}`", s.of.span, known("models", self.scope.gpus))
            elif amount is not None:
                if total is not None and amount > total:
                    self.err("E0302", f"{s.value.text} GPUs of {s.of.name} exceed the quota's total of {stmts['gpus'].value.text}", s.span, "a per-model amount is part of the total")
                per_model.append((s.of.name, amount))
        memory = self.amount(stmts.get("gpu_memory"), Type.BYTES)
        borrow = self.amount(stmts.get("borrow"), Type.GPU)
        lend = self.amount(stmts.get("lend"), Type.GPU)
        cohort = stmts.get("cohort")
        for key in ("borrow", "lend"):
            if key in stmts and cohort is None:
                self.err("E0306", f"`{key}` needs a `cohort` to {key} {'from' if key == 'borrow' else 'to'}", stmts[key].span)
        if lend is not None and total is not None and lend > total:
            self.err("E0305", f"lend {stmts['lend'].value.text} exceeds the nominal {stmts['gpus'].value.text}", stmts["lend"].span, "a quota can lend at most its own GPUs")
        check_borrow(stmts, total, per_model, borrow, self.diags)
        if not any(k in stmts for k in ("gpus", "gpu_memory")) and not any(k.startswith("gpus of ") for k in stmts):
            self.err("E0111", f"quota `{decl_name(b)}` sets no limit", b.span, "add `gpus N`, `gpus N of MODEL` or `gpu_memory Q`")
        return ir.Quota(
            name=decl_name(b),
            selector=self.selector(stmts),
            cohort=cohort.value.name if cohort else None,
            gpus=total,
            per_model=tuple(per_model),
            gpu_memory=memory,
            borrow=borrow,
            lend=lend,
            mode=check_mode(stmts, self.diags),
            span=b.span,
            models=check_models(stmts, self.scope, self.diags),
            weight=lower_weight(self, stmts.get("weight")),
        )

    def fraction(self, b: ast.Block) -> ir.Fraction:
        stmts = check_statements(b, self.diags)
        bounds = {}
        for key in ("min", "max"):
            value = self.amount(stmts.get(key), Type.FRACTION)
            if value is not None and not 0 < value <= 1000:
                self.err("E0304", f"`{key} {stmts[key].value.text}` is outside (0, 1]", stmts[key].value.span, "a fraction is a share of one GPU, e.g. 0.25 or 500m")
                value = None
            bounds[key] = value
        if bounds["min"] is not None and bounds["max"] is not None and bounds["min"] > bounds["max"]:
            self.err("E0303", f"min {stmts['min'].value.text} is greater than max {stmts['max'].value.text}", stmts["min"].span)
        per_gpu = self.amount(stmts.get("per_gpu at most"), Type.INT)
        if per_gpu is not None and per_gpu < 1:
            self.err("E0305", "per_gpu must be at least 1", stmts["per_gpu at most"].value.span)
        return ir.Fraction(
            name=decl_name(b),
            selector=self.selector(stmts),
            min=bounds["min"],
            max=bounds["max"],
            memory_floor=self.amount(stmts.get("memory at least"), Type.BYTES),
            per_gpu=per_gpu,
            mode=check_mode(stmts, self.diags),
            span=b.span,
            models=check_models(stmts, self.scope, self.diags),
        )


def _mentions_none(e) -> bool:
    if isinstance(e, ir.Lit):
        return e.type is Type.NONE
    return any(_mentions_none(getattr(e, a)) for a in ("left", "right", "item", "target") if hasattr(e, a)) or any(
        _mentions_none(i) for i in getattr(e, "items", ())
    )


COVERED = "quota.covered"


def check_covered(policy: ir.PolicySet, scope: Scope, diags: list[Diagnostic]) -> None:
    """`quota.covered` is read from the quotas' `for`s: a quota cannot read it, and it must be able to go both ways."""
    uses = [(b, f) for b in (*policy.fractions, *policy.gangs, *policy.agents, *policy.rules) for f in field_uses(b, COVERED)]
    for q in policy.quotas:
        for f in field_uses(q.selector, COVERED):
            diags.append(error("E0114", f"quota `{q.name}` cannot read `{COVERED}` in its `for`", f.span, "`quota.covered` says whether some quota's `for` matches: read it in a rule"))
    if not uses or any(kind == "quota" for kind, _ in scope.unparsed):
        return
    first = uses[0][1]
    if not policy.quotas:
        diags.append(warning("W0306", f"`{COVERED}` is always false: the policy set declares no quota", first.span, "every GPU workload is uncovered; declare the quotas, or drop the condition"))
        return
    everything = next((q for q in policy.quotas if q.selector is None), None)
    if everything is not None:
        diags.append(warning("W0306", f"`{COVERED}` is always true: quota `{everything.name}` has no `for`, so it covers every workload", first.span, f"give quota `{everything.name}` a `for` (line {everything.span.line})"))


def lower_files(files: list[ast.File]) -> tuple[ir.PolicySet, list[Diagnostic]]:
    """Check and lower parsed files (any order) into one PolicySet in (path, line) order."""
    from lang.lower_blocks import lower_agents, lower_gang, lower_rule
    from lang.lower_budget import check_overlaps, lower_budget
    from lang.lower_steer import check_shadowed, lower_steer

    diags: list[Diagnostic] = []
    decls = [d for f in sorted(files, key=lambda f: f.path) for d in f.decls]
    low = Lowerer(collect_scope(decls, diags), diags)
    low.scope.unparsed = {u for f in files for u in f.unparsed}
    out: dict[str, list] = {k: [] for k in ("gpus", "topologies", "priorities", "cohorts", "quotas", "fractions", "gangs", "agents", "rules", "budgets", "steers")}
    seen: set[tuple[str, str]] = set()
    table = {
        "gpu": ("gpus", low.gpu),
        "topology": ("topologies", low.topology),
        "priority": ("priorities", low.priority),
        "cohort": ("cohorts", lambda b: lower_cohort(low, b)),
        "quota": ("quotas", low.quota),
        "fraction": ("fractions", low.fraction),
        "gang": ("gangs", lambda b: lower_gang(low, b)),
        "agents": ("agents", lambda b: lower_agents(low, b)),
        "rule": ("rules", lambda b: lower_rule(low, b)),
        "steer": ("steers", lambda b: lower_steer(low, b)),
    }
    budgets = []
    for d in decls:
        key = (d.kind, decl_name(d))
        if key in seen:  # duplicate: already reported, lower only the first
            continue
        seen.add(key)
        if d.kind == "budget":  # after the loop: `on spent priority` names classes declared anywhere in the set
            budgets.append(d)
            continue
        bucket, fn = table[d.kind]
        node = fn(d)
        if node is not None:
            out[bucket].append(node)
    check_priorities(out["priorities"], diags)
    tiers = {p.name: p.value for p in out["priorities"]}
    out["budgets"] = [x for x in (lower_budget(low, d, tiers) for d in budgets) if x is not None]
    check_overlaps(out["budgets"], diags)
    check_shadowed(out["steers"], diags)
    partial = {sp for f in files for sp in f.partial}
    if partial:  # a block read without its bad statement: what it lacks may be that statement (the syntax error says so)
        diags[:] = [d for d in diags if not (d.code == "E0111" and d.span in partial)]
    if not any(kind == "quota" for kind, _ in low.scope.unparsed):  # a quota that did not parse may be the other member
        check_cohorts(out["quotas"], diags, out["cohorts"])
    check_tree(out["quotas"], out["cohorts"], diags, low.scope.unparsed)
    policy = ir.PolicySet(**{k: tuple(v) for k, v in out.items()})
    check_covered(policy, low.scope, diags)
    return policy, diags
