"""docs/language.md: every ```policy example checks clean; docs/check.md: every code in lang.codes is in its table."""

import re

import pytest

import lang
from lang_docs_examples import DOCS, doc_examples
from lang.codes import CODES

EXAMPLES = doc_examples()


def test_the_reference_has_examples():
    assert len(EXAMPLES) >= 6


@pytest.mark.parametrize("index", range(len(EXAMPLES)))
def test_doc_example_checks_clean(index):
    ps, diags = lang.compile_policies([(f"docs/language.md#{index}", EXAMPLES[index])])
    assert [(d.code, d.message) for d in diags] == []
    assert ps is not None


def test_every_code_is_in_the_table():
    text = (DOCS / "check.md").read_text(encoding="utf-8")
    documented = set(re.findall(r"^\| ([EW]\d{4}) \|", text, re.M))
    assert documented == set(CODES)


def test_every_subject_field_is_documented():
    from lang.ir import SUBJECT_FIELDS

    text = (DOCS / "language.md").read_text(encoding="utf-8")
    missing = [f for f in SUBJECT_FIELDS if f"`{f}`" not in text]
    assert missing == []
