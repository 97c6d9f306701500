"""The ```policy examples of the language reference (docs/language.md, docs/blocks.md), for tests that parse, check and format them."""

import pathlib
import re

DOCS = pathlib.Path(__file__).resolve().parents[2] / "docs"
PAGES = (DOCS / "language.md", DOCS / "blocks.md", DOCS / "budgets.md")  # the language reference: the language, its blocks, budgets
_FENCE = re.compile(r"^```policy\n(.*?)^```", re.M | re.S)


def doc_examples() -> list[str]:
    """Every ```policy block of the language reference, in order."""
    return [example for page in PAGES for example in _FENCE.findall(page.read_text(encoding="utf-8"))]
