"""`allot fmt`: canonical, idempotent, comment-keeping and meaning-preserving on every example we have."""

import pathlib

import pytest

import lang
from lang.format import FormatError, format_source
from lang_docs_examples import doc_examples

HERE = pathlib.Path(__file__).parent
ROOT = HERE.parents[1]


def examples() -> list[tuple[str, str]]:
    out = [("contract", (HERE / "fixtures" / "contract.policy").read_text())]
    out += [(f"golden/{p.name}", p.read_text()) for p in sorted((HERE / "golden").glob("*.policy"))]
    out += [(f"docs#{i}", text) for i, text in enumerate(doc_examples())]
    out += [(str(p.relative_to(ROOT)), p.read_text()) for p in sorted((ROOT / "policies").rglob("*.policy"))]
    return out


EXAMPLES = examples()


def meaning(text: str, path: str = "x.policy"):
    f, diags = lang.parse(text, path)
    assert not [d for d in diags if d.severity == "error"]
    from lang.lower import lower_files

    ps, _ = lower_files([f])
    return lang.strip_spans(ps)


def comments(text: str) -> list[str]:
    f, _ = lang.parse(text, "x.policy")
    return [c.text.rstrip() for c in f.comments]


def parses(text: str) -> bool:
    return not [d for d in lang.parse(text, "x.policy")[1] if d.severity == "error"]


@pytest.mark.parametrize("name,text", EXAMPLES, ids=[n for n, _ in EXAMPLES])
def test_format_round_trip(name, text):
    if not parses(text):
        with pytest.raises(FormatError):
            lang.format_source(text, name)
        return
    once = lang.format_source(text, name)
    assert lang.format_source(once, name) == once  # idempotent
    assert meaning(once) == meaning(text)  # same IR, spans aside
    assert comments(once) == comments(text)  # every comment kept, in order


def test_examples_include_the_contract_docs_and_goldens():
    names = [n for n, _ in EXAMPLES]
    assert "contract" in names and any(n.startswith("docs#") for n in names) and any(n.startswith("golden/") for n in names)


def test_canonical_layout():
    src = 'quota q {   for namespace=="a"\n\n\n   gpus 8 # c\n;borrow 2}\npriority a 1\npriority bbb 2 default\n'
    assert lang.format_source(src, "x") == (
        'quota q {\n  for namespace == "a"\n\n  gpus 8  # c\n  borrow 2\n}\n\npriority a   1\npriority bbb 2 default\n'
    )


def test_priority_values_are_aligned_like_names_so_the_flags_line_up():
    src = "priority critical 1000 preempts\npriority batch 100 default  # d\npriority scavenger -10\n\npriority x 5 default\n"
    assert lang.format_source(src, "x") == (
        "priority critical  1000 preempts\npriority batch     100  default  # d\npriority scavenger -10\n\npriority x 5 default\n"
    )


def test_strip_spans_makes_positions_irrelevant():
    assert meaning("quota q {\n  gpus 8\n}\n") == meaning("\n\nquota   q { gpus 8 }\n")
    assert meaning("quota q {\n  gpus 8\n}\n") != meaning("quota q {\n  gpus 9\n}\n")


def test_comments_before_and_inside_blocks_stay_with_them():
    src = "# about q\nquota q {\n  # the cap\n  gpus 8\n  # trailing note\n}\n# end\n"
    assert lang.format_source(src, "x") == src


FMT_OFF_CASES = [
    # (name, text, want_kept)
    ("marker in the leading comments", "# quoted verbatim\n# allot: fmt off\npriority  prod   500\n", True),
    ("marker as the first line", "# allot: fmt off\npriority  prod   500\n", True),
    ("marker after code does not count", "priority  prod   500\n# allot: fmt off\n", False),
    ("no marker", "# just a comment\npriority  prod   500\n", False),
]


@pytest.mark.parametrize("name,text,want_kept", FMT_OFF_CASES, ids=[c[0] for c in FMT_OFF_CASES])
def test_fmt_off_keeps_a_marked_file_as_written(name, text, want_kept):
    out = format_source(text, "x.policy")
    assert (out == text) is want_kept
    if not want_kept:
        assert "priority prod 500" in out


def test_fmt_off_still_refuses_a_file_that_does_not_parse():
    with pytest.raises(FormatError):
        format_source("# allot: fmt off\nrule {\n", "x.policy")
