"""`models …` in gang, quota and fraction blocks: lowering, diagnostics, formatter round-trip."""

import pytest

import lang

DECLS = """gpu h100 { product "NVIDIA-H100-80GB-HBM3" memory 80Gi }
gpu h200 { product "NVIDIA-H200" memory 141Gi }
gpu l4 { product "NVIDIA-L4" memory 24Gi }
topology fabric {
  rack "topology.acme.io/rack"
}
"""


@pytest.mark.parametrize(
    "block, want_models, want_codes",
    [
        ("gang g {\n  models h100, h200\n  require topology fabric.rack\n}", ("h100", "h200"), []),
        ("gang g {\n  models h100,\n    h200\n}", ("h100", "h200"), []),  # a list may continue after `,`
        ("quota q {\n  gpus 8\n  models l4\n}", ("l4",), []),
        ("fraction f {\n  max 0.5\n  models l4, h100\n}", ("l4", "h100"), []),
        ("gang g {\n  models h1000\n}", (), ["E0102"]),  # unknown model, located, with a hint
        ("gang g {\n  models h100, h100\n}", ("h100",), ["E0106"]),
        ("gang g {\n  models h100\n  models l4\n}", ("h100",), ["E0106"]),  # one `models` line per block
        ("gang g {\n  require min_members\n}", (), []),  # absent: any model
    ],
)
def test_models_lowering(block, want_models, want_codes):
    ps, diags = lang.compile_policies([("m.policy", DECLS + block)])
    assert sorted(d.code for d in diags) == want_codes
    if not want_codes:
        ir = ps.gangs or ps.quotas or ps.fractions
        assert ir[0].models == want_models


def test_unknown_model_names_the_model_and_the_declared_ones():
    _ps, diags = lang.compile_policies([("m.policy", DECLS + "gang g {\n  models h1000\n}")])
    (d,) = diags
    assert d.message == "unknown GPU model `h1000`"
    assert (d.span.line, d.span.col) == (8, 10)
    assert "did you mean `h100`?" in d.help and "h200" in d.help


def test_models_formats_canonically_and_round_trips():
    text = DECLS + "gang g {\n  models   h100 ,h200\n}\n"
    out = lang.format_source(text, "m.policy")
    assert "  models h100, h200\n" in out
    assert lang.format_source(out, "m.policy") == out


def test_models_is_still_a_name_in_expressions():
    text = DECLS + 'rule r {\n  when labels["models"] == "x"\n  deny "no"\n}'
    _ps, diags = lang.compile_policies([("m.policy", text)])
    assert diags == []
