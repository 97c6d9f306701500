"""The text of a simulation report: what its lines say and how long examples are shortened."""

import pytest

from policy.simulate.report import EXAMPLE_LIMIT, build_report, render_text
from tests.policy.simulate.sim_builders import arrive, gpu_node, simulate

WORDS = "team-a: 12.25 in use + 8 requested > 16 nominal + 0 borrowable, " * 6


def _example_line(message: str) -> str:
    result, _ = simulate([gpu_node("n")], [arrive(0, "p", gpus=1)])
    rep = build_report(result, {})
    rep["examples"] = {"QuotaExceeded": message}
    (line,) = [ln for ln in render_text(rep).splitlines() if ln.startswith("  e.g. ")]
    return line.removeprefix("  e.g. QuotaExceeded: ")


@pytest.mark.parametrize("message", [WORDS, WORDS.replace(" ", "  "), "x" * 100 + " " + "y" * 300],
                         ids=["words", "double-spaces", "one-long-word-after-a-boundary"])
def test_a_long_example_is_cut_at_a_word_boundary_with_an_ellipsis(message):
    shown = _example_line(message)
    assert shown.endswith("…") and len(shown) <= EXAMPLE_LIMIT + 1
    kept = shown.removesuffix("…")
    assert message.startswith(kept) and message[len(kept)] in " ,;"  # the cut falls between words
    assert kept == kept.rstrip(" ,;")


def test_a_word_longer_than_the_limit_is_cut_inside_it_rather_than_dropped():
    shown = _example_line("z" * 500)
    assert shown == "z" * EXAMPLE_LIMIT + "…"


def test_a_short_example_is_shown_whole():
    assert _example_line("team-a: 8 requested > 4 nominal") == "team-a: 8 requested > 4 nominal"
