"""steer blocks: parse, check (located codes), lower, fmt round-trip."""

import lang
from lang.format import format_source


def _compile(text):
    return lang.compile_policies([("s.policy", text)])


def test_steer_lowers_with_defaults_and_options():
    ps, diags = _compile("steer small {\n  for gpus <= 2\n  by fragmentation\n  nodes 4\n  mode audit\n}\nsteer rest { by fragmentation }\n")
    assert diags == []
    a, b = ps.steers
    assert (a.name, a.by, a.nodes, a.mode, a.selector is not None) == ("small", "fragmentation", 4, "audit", True)
    assert (b.nodes, b.mode, b.selector) == (3, "enforce", None)


def test_steer_diagnostics_are_located():
    _ps, diags = _compile("steer a { by packing }\nsteer b {\n  by fragmentation\n  nodes 11\n}\nsteer c { nodes 2 }\n")
    got = sorted((d.code, d.span.line, d.span.col) for d in diags)
    assert got == [("E0111", 6, 1), ("E0340", 1, 14), ("E0341", 4, 9)]
    assert "did you mean" not in next(d for d in diags if d.code == "E0340").message


def test_a_steer_after_a_catch_all_warns():
    _ps, diags = _compile("steer all { by fragmentation }\nsteer late {\n  for gpus <= 1\n  by fragmentation\n}\n")
    assert [(d.code, d.span.line) for d in diags] == [("W0340", 2)]


def test_steer_formats_and_round_trips():
    text = "steer   s {by fragmentation\n      nodes 2   # two\n}\n"
    out = format_source(text, "s.policy")
    assert out == "steer s {\n  by fragmentation\n  nodes 2  # two\n}\n"
    assert format_source(out, "s.policy") == out


def test_steer_is_still_a_name_elsewhere():
    ps, diags = _compile('quota steer {\n  for namespace == "nodes"\n  gpus 4\n}\n')
    assert diags == [] and ps.quotas[0].name == "steer"
