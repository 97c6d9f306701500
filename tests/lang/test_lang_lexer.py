"""lang.parser's one-regex lexer yields what lark's contextual lexer would: same ASTs, same successes."""

import os
import pathlib

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lang.parser import _parse_decls, reference_parse
from lang_docs_examples import doc_examples

HERE = pathlib.Path(__file__).parent
ROOT = HERE.parents[1]
CORPUS = [p.read_text() for p in [HERE / "fixtures" / "contract.policy", *sorted((HERE / "golden").glob("*.policy")), *sorted((ROOT / "policies").rglob("*.policy"))]]
CORPUS += doc_examples()
WORDS = st.sampled_from(
    ["gpus", "gpu", "for", "when", "quota", "rule", "deny", "set", "agents", "allow", "create", "pods", "pods/exec", "and", "or", "not", "in",
     "matches", "has", "none", "true", "mode", "warn", "of", "h100", "labels", '"k"', "[", "]", "(", ")", "{", "}", "==", "<=", "-", "+", "*",
     "0.25", "80Gi", "8", ".", ",", ";", "=", "\n", " ", "  ", "# c\n", "priority", "default", "x-y", "topology", "fabric.rack", "require"]
)  # fmt: skip
FUZZ = settings(max_examples=int(os.environ.get("ALLOT_FUZZ_EXAMPLES", "60")), deadline=None, suppress_health_check=[HealthCheck.too_slow])


def outcome(parse, text):
    try:
        return ("ok", parse(text, "f.policy"))
    except Exception:  # the exception class may differ by lexer (character vs token); success must not
        return ("error",)


def test_same_ast_on_every_example():
    assert len(CORPUS) > 10
    for text in CORPUS:
        assert outcome(_parse_decls, text) == outcome(reference_parse, text)


@FUZZ
@given(st.lists(WORDS, max_size=60).map(" ".join))
def test_same_outcome_on_policy_like_text(text):
    assert outcome(_parse_decls, text) == outcome(reference_parse, text)
