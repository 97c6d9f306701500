"""`budget` blocks: parse, check (one mistake per case, with its code and line), lower, format."""

import pytest

import lang
from lang import strip_spans

HEAD = 'gpu h100 { product "NVIDIA-H100-80GB-HBM3" memory 80Gi }\npriority prod 500\npriority batch 100 default\n'
GOOD = """budget research {
  for namespace == "research"
  gpu_hours 20000 of h100
  period month in "Europe/Berlin"
  on spent priority batch
  warn at 80%, 100%
  half_life 7 days
}
"""


def compile_one(src: str):
    return lang.compile_policies([("t.policy", HEAD + src)])


def codes(src: str) -> list[tuple[str, int]]:
    """(code, line in `src`) of every diagnostic."""
    return [(d.code, d.span.line - HEAD.count("\n")) for d in compile_one(src)[1]]


def test_a_budget_lowers_to_exact_milli_gpu_seconds():
    policy, diags = compile_one(GOOD)
    assert diags == []
    (b,) = policy.budgets
    assert (b.id, b.amount, b.model, b.period, b.zone) == ("budget research", 20000 * 3600 * 1000, "h100", "month", "Europe/Berlin")
    assert (b.on_spent, b.tier, b.thresholds, b.half_life, b.mode) == ("priority", "batch", (800, 1000), 7 * 86400, "enforce")


def test_defaults_and_a_fractional_amount():
    policy, diags = compile_one('budget b {\n  gpu_hours 0.5\n  period day\n  warn at 92.5%\n}\n')
    assert diags == []
    (b,) = policy.budgets
    assert (b.amount, b.zone, b.on_spent, b.tier, b.thresholds, b.model, b.selector) == (1_800_000, "UTC", "deny", None, (925,), None, None)


@pytest.mark.parametrize(
    "src, want",
    [
        ("budget b {\n  period day\n}\n", [("E0111", 1)]),
        ("budget b {\n  gpu_hours 10\n}\n", [("E0111", 1)]),
        ("budget b {\n  gpu_hours 10\n  period montly\n}\n", [("E0308", 3)]),
        ('budget b {\n  gpu_hours 10\n  period day in "Europe/Berlyn"\n}\n', [("E0309", 3)]),
        ('budget b {\n  gpu_hours 10\n  period day in "../../etc/passwd"\n}\n', [("E0309", 3)]),
        ("budget b {\n  gpu_hours 10\n  period day\n  on spent priority bach\n}\n", [("E0310", 4)]),
        ("budget b {\n  gpu_hours 10\n  period day\n  on spent priority prod\n}\n", [("W0308", 4)]),
        ("budget b {\n  gpu_hours 10\n  period day\n  on spent maybe\n}\n", [("E0110", 4)]),
        ("budget b {\n  gpu_hours 10\n  period day\n  on spent priority\n}\n", [("E0111", 4)]),
        ("budget b {\n  gpu_hours 10\n  period day\n  half_life 7 dayz\n}\n", [("E0312", 4)]),
        ("budget b {\n  gpu_hours 10\n  period day\n  half_life 0 days\n}\n", [("E0305", 4)]),
        ("budget b {\n  gpu_hours 10\n  period day\n  warn at 0%\n}\n", [("E0305", 4)]),
        ("budget b {\n  gpu_hours 10\n  period day\n  warn at 80%, 80%\n}\n", [("E0106", 4)]),
        ("budget b {\n  gpu_hours 0\n  period day\n}\n", [("E0305", 2)]),
        ("budget b {\n  gpu_hours 10 of a100\n  period day\n}\n", [("E0102", 2)]),
        ("budget b {\n  gpu_hours 10\n  gpu_hours 20\n  period day\n}\n", [("E0106", 3)]),
        (('budget a {\n  for namespace == "x"\n  gpu_hours 10\n  period day\n}\n'
         'budget b {\n  for namespace == "x"\n  gpu_hours 20\n  period day in "UTC"\n}\n'), [("E0311", 6)]),
    ],
)
def test_each_mistake_has_its_code_and_line(src, want):
    assert codes(src) == want


def test_budgets_that_differ_in_model_or_period_do_not_overlap():
    src = ('budget a {\n  gpu_hours 10\n  period day\n}\nbudget b {\n  gpu_hours 200\n  period month\n}\n'
           'budget c {\n  gpu_hours 10 of h100\n  period day\n}\n')
    assert codes(src) == []


def test_format_round_trips_and_keeps_meaning():
    messy = 'budget research {\n for namespace == "research"\n gpu_hours   20000 of h100\n period month in "Europe/Berlin"\n' \
            ' on spent priority batch\n warn at 80% ,\n   100%\n half_life 7 days\n}\n'
    out = lang.format_source(HEAD + messy, "t.policy")
    assert out == lang.format_source(out, "t.policy")
    assert out.endswith(GOOD)
    a, _ = compile_one(messy)
    b, _ = lang.compile_policies([("t.policy", out)])
    assert strip_spans(a.budgets) == strip_spans(b.budgets)


def test_a_syntax_error_in_a_budget_is_located():
    diags = compile_one("budget b {\n  gpu_hours 10\n  period day\n  warn at 80\n}\n")[1]
    assert [(d.code, d.span.line - HEAD.count("\n")) for d in diags] == [("E0001", 4)]
