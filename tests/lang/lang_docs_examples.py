"""The ```policy examples of docs/language.md, for tests that parse, check and format them."""

import pathlib
import re

DOC = pathlib.Path(__file__).resolve().parents[2] / "docs" / "language.md"
_FENCE = re.compile(r"^```policy\n(.*?)^```", re.M | re.S)


def doc_examples() -> list[str]:
    """Every ```policy block of the language reference, in order."""
    if not DOC.exists():
        return []
    return _FENCE.findall(DOC.read_text(encoding="utf-8"))
