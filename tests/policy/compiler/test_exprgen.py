"""Generated expression code agrees with the reference closures on random expressions and subjects."""

from __future__ import annotations

import os

from tests.policy.engine.engine_builders import FABRIC, workload
from hypothesis import given, settings
from hypothesis import strategies as st

from lang import ir
from lang.span import Span
from policy.compiler.expr import Levels, compile_expr, compile_reference
from policy.compiler.pipeline import Step, build_pipeline

S = Span("t.policy", 1, 1, 1, 2)
EXAMPLES = int(os.environ.get("ALLOT_FUZZ_EXAMPLES", "150"))
LEVELS = Levels((FABRIC,))

ints = st.one_of(st.none(), st.integers(-3, 3000))
strings = st.sampled_from(["team-a", "team-b", "x", "", "web-1"])
maps = st.dictionaries(st.sampled_from(["app", "team", "a/b"]), st.sampled_from(["x", "team-a", "inference"]), max_size=3)


def field(name):
    return ir.Field(name, ir.SUBJECT_FIELDS[name], S)


INT_FIELDS = ["gpus", "total_gpus", "priority", "min_members", "fraction", "gpu_memory", "pods"]
STR_FIELDS = ["namespace", "name", "gpu_model", "user", "kind"]


def int_expr():
    lit = st.builds(lambda v: ir.Lit(v, ir.Type.INT, S), ints)
    f = st.sampled_from(INT_FIELDS).map(field)
    leaf = st.one_of(lit, f)
    return st.recursive(leaf, lambda c: st.builds(lambda op, a, b: ir.Arith(op, a, b, ir.Type.INT, S), st.sampled_from("+-*"), c, c), max_leaves=3)


def str_expr():
    lit = st.builds(lambda v: ir.Lit(v, ir.Type.STRING, S), st.one_of(st.none(), strings))
    f = st.sampled_from(STR_FIELDS).map(field)
    idx = st.builds(lambda t, k: ir.Index(field(t), k, S), st.sampled_from(["labels", "annotations", "namespace.labels"]), st.sampled_from(["app", "team"]))
    return st.one_of(lit, f, idx)


def cond():
    ops = st.sampled_from(["==", "!=", "<", "<=", ">", ">="])
    base = st.one_of(
        st.builds(lambda op, a, b: ir.Compare(op, a, b, S), ops, int_expr(), int_expr()),
        st.builds(lambda op, a, b: ir.Compare(op, a, b, S), st.sampled_from(["==", "!="]), str_expr(), str_expr()),
        st.builds(lambda t, p: ir.Matches(t, p, S), str_expr(), st.sampled_from(["team-*", "*", "w?b-[0-9]", "*-1", "*eam*", "web-1", "**", "t*a"])),
        st.builds(lambda i: ir.Contains(i, field("labels"), S), str_expr()),
        st.builds(lambda i: ir.Contains(i, field("groups"), S), str_expr()),
        st.builds(lambda t: ir.Has(t, S), st.one_of(str_expr(), int_expr())),
        st.sampled_from(["privileged", "agent", "host_path"]).map(field),
        st.builds(lambda op, lvl: ir.Compare(op, field("topology.required"), ir.Lit(("fabric", lvl), ir.Type.LEVEL, S), S), ops, st.sampled_from(["block", "rack", "host"])),
    )
    return st.recursive(
        base,
        lambda c: st.one_of(
            st.builds(lambda xs: ir.And(tuple(xs), S), st.lists(c, min_size=2, max_size=3)),
            st.builds(lambda xs: ir.Or(tuple(xs), S), st.lists(c, min_size=2, max_size=3)),
            st.builds(lambda x: ir.Not(x, S), c),
        ),
        max_leaves=6,
    )


subjects = st.builds(
    lambda gpus, prio, ns, name, labels, ann, nsl, priv, topo: workload(
        gpus=gpus, priority=prio, namespace=ns, name=name, labels=labels, annotations=ann, namespace_labels=nsl,
        privileged=priv, groups=("devs", "team-a"), topology_required=topo, fraction=gpus if gpus < 1000 else None,
    ),
    st.integers(0, 3000), ints, strings, strings, maps, maps, maps, st.booleans(),
    st.sampled_from([None, "topology.acme.io/rack", "kubernetes.io/hostname", "topology.acme.io/block"]),
)


@settings(max_examples=EXAMPLES, deadline=None)
@given(cond(), subjects)
def test_generated_code_matches_reference(expr, w):
    want = compile_reference(expr, LEVELS)(w)
    got = compile_expr(expr, LEVELS)(w)
    assert bool(got) == bool(want)


@settings(max_examples=EXAMPLES, deadline=None)
@given(int_expr(), subjects)
def test_generated_values_match_reference(expr, w):
    assert compile_expr(expr, LEVELS)(w) == compile_reference(expr, LEVELS)(w)


@settings(max_examples=max(10, EXAMPLES // 3), deadline=None)
@given(st.lists(st.one_of(st.none(), cond()), min_size=1, max_size=5), subjects)
def test_pipeline_calls_exactly_the_matching_checks_in_order(selectors, w):
    called = []

    class Ctx:
        pass

    ctx = Ctx()
    ctx.w, ctx.blocks, ctx.trace = w, [], None
    steps = [Step(None, sel, (lambda c, i=i: called.append(i))) for i, sel in enumerate(selectors)]
    build_pipeline(steps, LEVELS)(ctx)
    want = [i for i, sel in enumerate(selectors) if sel is None or compile_reference(sel, LEVELS)(w)]
    assert called == want
