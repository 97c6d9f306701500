"""Numbers past what any cluster holds are E0305, and large numbers print compactly, never as 400 digits."""

import pytest

import lang
from lang.quantity import compact, format_bytes, format_milli

QUOTA = 'quota q {{\n  for namespace == "a"\n  cohort c\n  {line}\n}}\nquota r {{\n  for namespace == "b"\n  cohort c\n  gpus 8\n}}\n'


def errors(src: str):
    _, diags = lang.compile_policies([("t.policy", src)])
    return [(d.code, d.span.line, d.message, d.help) for d in diags if d.severity == "error"]


@pytest.mark.parametrize("line,at,shown,limit", [
    ("gpus 12345678901234567890123456789012", 4, "1.23e31", "2^31"),
    ("gpus 2147483649", 4, "2147483649", "2^31"),
    ("gpus 8\n  borrow 1e400", 5, "1e400", "2^31"),
    ("gpu_memory 1e30", 4, "1e30", "8Ei"),
    ("gpu_memory 9Ei", 4, "9Ei", "8Ei"),
])  # fmt: skip
def test_an_amount_no_cluster_holds_is_out_of_range(line, at, shown, limit):
    (got,) = errors(QUOTA.format(line=line))  # one error: the quota is not also said to set no limit
    assert got[:3] == ("E0305", at, f"`{shown}` is out of range: no cluster holds that much") and limit in got[3]


@pytest.mark.parametrize("src,shown", [
    ("priority p 1e400", "1e400"),
    ('rule r {\n  when pods > 99999999999\n  deny "x"\n}', "99999999999"),
    ('rule r {\n  when gpus > 1e400\n  deny "x"\n}', "1e400"),
])
def test_literals_in_conditions_and_priorities_are_bounded_too(src, shown):
    (got,) = errors(src)
    assert got[0] == "E0305" and got[2].startswith(f"`{shown}` is out of range")


@pytest.mark.parametrize("line", ["gpus 2147483648", "gpu_memory 8Ei", "gpus 1\n  borrow 0.001"])
def test_the_largest_amounts_still_check(line):
    assert errors(QUOTA.format(line=line)) == []


@pytest.mark.parametrize("n,want", [
    (0, "0"), (999_999_999_999_999, "999999999999999"), (10**15, "1e15"), (10**400, "1e400"),
    (12345678901234567890123456789012, "1.23e31"), (-(10**20), "-1e20"), (1_500_000_000_000_000, "1.5e15"),
])  # fmt: skip
def test_compact(n, want):
    assert compact(n) == want


def test_amount_formatters_print_large_numbers_compactly():
    assert format_milli(10**403) == "1e400" and format_milli(4000) == "4" and format_milli(250) == "0.25"
    assert format_bytes(10**400) == "1e400" and format_bytes(80 * 2**30) == "80Gi" and format_bytes(2**63) == "8Ei"
