"""Compiled expressions: none semantics, matches, in, has, arithmetic, templates, topology levels."""

from __future__ import annotations

import pytest
from tests.policy.engine.engine_builders import FABRIC, cmp, field, index, lit, tpl, workload

from lang import ir
from lang.span import Span
from policy.compiler.expr import Levels, compile_condition, compile_expr, compile_template

S = Span("t.policy", 1, 1, 1, 2)
STR = ir.Type.STRING
W = workload(gpus=250, fraction=250, name="web-1", labels={"app": "web"}, groups=("devs", "acme:agents"), priority=None, gpu_memory=6 * 2**30, topology_required="topology.acme.io/rack")


@pytest.mark.parametrize(
    "expr, want",
    [
        (cmp("==", field("priority"), lit(5, ir.Type.INT)), False),  # none compares false
        (cmp("!=", field("priority"), lit(5, ir.Type.INT)), False),  # ... even !=
        (cmp("<", field("gpu_model"), lit("a", STR)), False),
        (ir.Matches(field("name"), "web-*", S), True),
        (ir.Matches(field("name"), "Web-*", S), False),  # case-sensitive
        (ir.Matches(field("gpu_model"), "*", S), False),  # none never matches
        (ir.Contains(lit("app", STR), field("labels"), S), True),
        (ir.Contains(lit("acme:agents", STR), field("groups"), S), True),
        (ir.Contains(lit("x", STR), field("groups"), S), False),
        (ir.Has(index("labels", "app"), S), True),
        (ir.Has(index("labels", "nope"), S), False),
        (ir.Has(field("priority"), S), False),
        (ir.Not(ir.Has(field("priority"), S), S), True),
        (cmp("<=", field("gpus"), lit(250, ir.Type.GPU)), True),
        (cmp(">", field("fraction"), lit(249, ir.Type.FRACTION)), True),
        (ir.And((cmp(">", field("gpus"), lit(0, ir.Type.GPU)), ir.Has(field("priority"), S)), S), False),
        (ir.Or((cmp(">", field("gpus"), lit(0, ir.Type.GPU)), ir.Has(field("priority"), S)), S), True),
        (cmp("==", field("topology.required"), lit(("fabric", "rack"), ir.Type.LEVEL)), True),
        (cmp("<", field("topology.required"), lit(("fabric", "host"), ir.Type.LEVEL)), True),  # rack is wider than host
        (cmp(">", field("topology.required"), lit(("fabric", "block"), ir.Type.LEVEL)), True),
    ],
)
def test_conditions(expr, want):
    assert compile_condition(expr, Levels((FABRIC,)))(W) is want


def test_arithmetic_is_exact_and_none_propagates():
    total = ir.Arith("*", field("gpus"), lit(4000, ir.Type.GPU), ir.Type.GPU, S)
    assert compile_expr(total)(W) == 1000  # 0.25 x 4 = 1 GPU, in milli
    plus = ir.Arith("+", field("priority"), lit(1, ir.Type.INT), ir.Type.INT, S)
    assert compile_expr(plus)(W) is None


def test_template_renders_units():
    t = tpl("share ", field("fraction"), " of ", field("gpu_memory"), " groups=", field("groups"), " p=", field("priority"))
    assert compile_template(t)(W) == "share 0.25 of 6Gi groups=devs,acme:agents p=none"
