"""E0205: a comparison that an absent value makes silently false needs a dominating `has()` guard."""

from dataclasses import dataclass

import pytest

import lang
from lang.absent import MAY_BE_ABSENT
from lang.ir import SUBJECT_FIELDS

HEAD = 'gpu h100 { product "NVIDIA-H100-80GB-HBM3" memory 80Gi }\ngpu l4 { product "NVIDIA-L4" memory 24Gi }\n'


def diags(src: str):
    _, ds = lang.compile_policies([("t.policy", HEAD + src)])
    return [d for d in ds if d.code == "E0205"]


def rule(when: str, for_: str | None = None) -> str:
    return "rule r {\n" + (f"  for {for_}\n" if for_ else "") + f"  when {when}\n  deny \"x\"\n}}\n"


@dataclass
class Case:
    name: str
    src: str
    want_flagged: list[str]  # source text of each flagged comparison, by column order


CASES = [
    Case("the issue's L4-only rule", rule("gpus > 0 and gpu_model != l4"), ['gpu_model != "l4"']),
    Case("ordering on optional memory", rule("gpu_memory < 10Gi"), ["gpu_memory < 10Gi"]),
    Case("a map lookup with !=", rule('labels["team"] != "ml"'), ['labels["team"] != "ml"']),
    Case("arithmetic reads the optional field", rule("gpu_memory * 2 > 10Gi"), ["gpu_memory * 2 > 10Gi"]),
    Case("two optional sides, both named", rule("min_members > priority"), ["min_members > priority"]),
    Case("== asks 'is it this': no guard", rule('gpu_model == h100 and labels["team"] == "a"'), []),
    Case("matches and in need no guard", rule('user matches "a*" or labels["x"] in groups'), []),
    Case("always-present fields need no guard", rule("gpus > 0 and total_gpus != 8 and pods >= 2"), []),
    Case("has() earlier in the and chain", rule("gpus > 0 and has(gpu_model) and gpu_model != l4"), []),
    Case("not has() earlier in the or chain", rule("not has(gpu_model) or gpu_model != l4"), []),
    Case("guard after the comparison does not dominate", rule("gpu_model != l4 and has(gpu_model)"), ['gpu_model != "l4"']),
    Case("has() in an or does not guard", rule("has(gpu_model) or gpu_model != l4"), ['gpu_model != "l4"']),
    Case("not has() in an and does not guard", rule("not has(gpu_model) and gpu_model != l4"), ['gpu_model != "l4"']),
    Case("guard dominates a nested or", rule("has(gpu_memory) and (gpu_memory < 10Gi or gpus > 4)"), []),
    Case("guard dominates under not", rule("has(gpu_memory) and not (gpu_memory < 10Gi)"), []),
    Case("a true comparison proves presence", rule("gpu_memory > 0 and gpu_memory < 80Gi"), ["gpu_memory > 0"]),
    Case("both branches of an or prove presence", rule("(has(gpu_model) or gpu_model == l4) and gpu_model != h100"), []),
    Case("not (a or b) proves what not-a proves", rule("not (not has(fraction) or gpus > 1) and fraction < 0.5"), []),
    Case("the block's for guards its when", rule("gpu_memory < 10Gi", for_="has(gpu_memory) and gpus > 0"), []),
    Case("the for is checked too", rule("gpus > 0", for_="priority < 100"), ["priority < 100"]),
    Case("a guarded index", rule('has(labels["team"]) and labels["team"] != "ml"'), []),
    Case("another key is not a guard", rule('has(labels["team"]) and labels["tier"] != "ml"'), ['labels["tier"] != "ml"']),
    Case("gang when guarded by for", 'topology f {\n  rack "r"\n}\ngang g {\n  for has(min_members)\n  require topology f.rack when min_members > 2\n}\n', []),
    Case("gang when unguarded", 'topology f {\n  rack "r"\n}\ngang g {\n  require topology f.rack when min_members > 2\n}\n', ["min_members > 2"]),
    Case("agents allow when", 'agents {\n  allow create pods when priority >= 100\n}\n', ["priority >= 100"]),
    Case("set value guarded by the rule's when", 'rule s {\n  when has(gpu_memory)\n  set labels["big"] = gpu_memory > 40Gi\n}\n', []),
    Case("set value unguarded", 'rule s {\n  set labels["big"] = gpu_memory > 40Gi\n}\n', ["gpu_memory > 40Gi"]),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_unguarded_comparisons_on_optional_values(case):
    got = diags(case.src)
    text = (HEAD + case.src).split("\n")
    assert [text[d.span.line - 1][d.span.col - 1 : d.span.end_col - 1] for d in got] == [
        w.replace('"l4"', "l4").replace('"h100"', "h100") for w in case.want_flagged
    ]


def test_the_diagnostic_names_the_field_and_shows_both_guards():
    (d,) = diags(rule("gpus > 0 and gpu_model != l4"))
    assert d.severity == "error" and d.message == '`gpu_model` may be absent, which makes `gpu_model != "l4"` false'
    assert d.help == 'guard it: `has(gpu_model) and gpu_model != "l4"` leaves absent values out, `not has(gpu_model) or gpu_model != "l4"` counts them in'
    assert d.to_json()["code"] == "E0205" and d.to_json()["end"] == {"line": d.span.end_line, "column": d.span.end_col}


def test_the_suggested_guards_check_clean():
    (d,) = diags(rule("gpu_memory * 2 > 10Gi"))
    for guarded in d.help.split("`")[1::2]:
        assert diags(rule(guarded)) == [], guarded


def test_optional_fields_are_the_ones_normalization_may_leave_empty():
    from policy.subject.model import Workload
    import dataclasses
    import typing

    hints = typing.get_type_hints(Workload)
    optional = {f.name.replace("namespace_labels", "namespace.labels").replace("topology_", "topology.") for f in dataclasses.fields(Workload) if type(None) in typing.get_args(hints[f.name])}
    assert MAY_BE_ABSENT == optional & set(SUBJECT_FIELDS)
