"""Any text ends in diagnostics, never an exception or a hang: random text and mutations of valid policies."""

import os
import pathlib

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import lang
from lang.format import FormatError

HERE = pathlib.Path(__file__).parent
SEEDS = [(HERE / "fixtures" / "contract.policy").read_text(), (HERE / "golden" / "valid_everything.policy").read_text()]
EXAMPLES = int(os.environ.get("ALLOT_FUZZ_EXAMPLES", "60"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
ALPHABET = st.sampled_from(list('abgpuorqt{}[]()"#=<>!&|.,;*-+ \n\t0123456789Gim\\\ufffd') + ["gpus", "for", "when", "quota", "and", " or ", "none"])


def must_not_crash(text: str) -> None:
    ps, diags = lang.compile_policies([("f.policy", text)])
    assert ps is not None or any(d.severity == "error" for d in diags)
    for d in diags:
        assert d.code and d.message and d.span.path == "f.policy" and d.span.line >= 0
    try:
        out = lang.format_source(text, "f.policy")
    except FormatError as exc:
        assert exc.diagnostics
    else:
        assert lang.format_source(out, "f.policy") == out
        assert meaning(out) == meaning(text)


def meaning(text: str):
    """The lowered set with spans blanked (diagnostics aside): what formatting must not change."""
    from lang.lower import lower_files

    f, _ = lang.parse(text, "f.policy")
    return lang.strip_spans(lower_files([f])[0]) if f is not None else None


@FUZZ
@given(st.text(max_size=300))
def test_random_text(text):
    must_not_crash(text)


@FUZZ
@given(st.lists(ALPHABET, max_size=120).map("".join))
def test_random_policy_like_tokens(text):
    must_not_crash(text)


@FUZZ
@given(st.sampled_from(SEEDS), st.data())
def test_mutations_of_valid_policies(seed, data):
    text = seed
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(0, len(text)))
        op = data.draw(st.sampled_from(["delete", "insert", "swap"]))
        if op == "delete":
            text = text[:i] + text[i + data.draw(st.integers(1, 12)) :]
        elif op == "insert":
            text = text[:i] + data.draw(ALPHABET) + text[i:]
        else:
            j = data.draw(st.integers(0, len(text)))
            a, b = sorted((i, j))
            text = text[:a] + text[b:] + text[a:b]
    must_not_crash(text)


@FUZZ
@given(st.sampled_from(SEEDS), st.data())
def test_recovery_reports_each_broken_block_and_keeps_the_others(seed, data):
    """Break statements of a few blocks: each broken block has a syntax error inside it, every other block parses (a broken one may too, without its bad statements)."""
    f, diags = lang.parse(seed, "f.policy")
    assert diags == []
    rows = seed.split("\n")
    multi = [d for d in f.decls if d.span.end_line - d.span.line >= 2]
    broken = data.draw(st.lists(st.sampled_from(multi), min_size=1, max_size=4, unique_by=lambda d: d.span.line))
    for d in broken:
        for _ in range(data.draw(st.integers(1, 2))):  # one or two bad statements in the block
            i = data.draw(st.integers(d.span.line, d.span.end_line - 2))  # 0-based index of an inner line
            row = rows[i]
            if not row.strip() or row.strip().startswith("#"):
                continue
            col = len(row) - len(row.lstrip())
            rows[i] = row[:col] + data.draw(st.sampled_from(["@@ ", "&& ", "= ", "80GB ", "qouta "])) + row[col:]
    text = "\n".join(rows)
    got, diags = lang.parse(text, "f.policy")
    names = lambda decls: {(d.kind, d.name.name if d.name else "") for d in decls}  # noqa: E731
    hit = {d.span.line for d in broken if any(d.span.line <= x.span.line <= d.span.end_line for x in diags)}
    changed = [d for d in broken if "\n".join(rows[d.span.line - 1 : d.span.end_line]) != "\n".join(seed.split("\n")[d.span.line - 1 : d.span.end_line])]
    assert {d.span.line for d in changed} <= hit  # every broken block reports inside itself
    assert all(any(d.span.line <= x.span.line <= d.span.end_line for d in changed) for x in diags)  # nowhere else
    kept = names(got.decls if got else ())
    # every unbroken block parses; a broken one may be kept without its bad statements (checked for the rest)
    assert names(f.decls) - names(changed) <= kept <= names(f.decls)
    must_not_crash(text)
