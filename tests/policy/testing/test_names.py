"""Names an expectation uses that nothing can produce are test-file errors, located at the value, with a did-you-mean."""

import pathlib
import re

import pytest

from policy.testing.cases import TestFile
from policy.testing.names import REASON_CODES, unknown_names
from webhook.cli import main

ROOT = pathlib.Path(__file__).resolve().parents[3]
POLICY = 'quota research {\n  for namespace == "research"\n  gpus 4\n}\n'
POD = "{apiVersion: v1, kind: Pod, metadata: {name: p, namespace: research}, spec: {containers: [{name: t, image: x, resources: {limits: {nvidia.com/gpu: '8'}}}]}}"


def file_with(expect: dict) -> TestFile:
    return TestFile.model_validate({"cases": [{"name": "c", "request": {"kind": "Pod"}, "expect": expect}]})


@pytest.mark.parametrize("expect,want", [
    ({"allowed": False, "denied_by": ["quota reserch"]}, [(("cases", 0, "expect", "denied_by", 0), "unknown block `quota reserch` (did you mean `quota research`?)")]),
    ({"allowed": False, "codes": ["QuotaExceded"]}, [(("cases", 0, "expect", "codes", 0), "unknown reason code `QuotaExceded` (did you mean `QuotaExceeded`?)")]),
    ({"allowed": False, "codes": ["QuotaExceeded", "Nonsense"]}, [(("cases", 0, "expect", "codes", 1), "unknown reason code `Nonsense`;")]),
    ({"allowed": False, "denied_by": ["quota research", "subject", "priority"], "codes": ["MalformedQuantity", "RuleDenied"]}, []),
])  # fmt: skip
def test_unknown_names_of_expectations(expect, want):
    got = unknown_names(file_with(expect), {"quota research", "rule r"})
    assert [(u.path, u.message[: len(w)]) for u, (_, w) in zip(got, want)] == want
    assert len(got) == len(want)


def test_allot_test_reports_each_unknown_name_at_its_line(tmp_path, capsys, monkeypatch):
    (tmp_path / "q.policy").write_text(POLICY)
    (tmp_path / "q.test.yaml").write_text(
        "cases:\n"
        f"  - name: over\n    request: {POD}\n    expect:\n      allowed: false\n"
        "      denied_by: [quota reserch]\n"
        "      codes:\n        - QuotaExceded\n"
    )
    monkeypatch.chdir(tmp_path)
    code = main(["test", "."])
    out = capsys.readouterr().out
    assert code == 1
    assert "q.test.yaml:6: cases[0].expect.denied_by[0]: unknown block `quota reserch` (did you mean `quota research`?)" in out
    assert "q.test.yaml:8: cases[0].expect.codes[0]: unknown reason code `QuotaExceded` (did you mean `QuotaExceeded`?)" in out


def _codes_of_the_reference_table() -> set[str]:
    """The codes of docs/language.md's "Reason codes" table (tests/test_docs.py holds it to the codes the source gives)."""
    doc = (ROOT / "docs" / "language.md").read_text(encoding="utf-8")
    section = doc[doc.index("## Reason codes"):]
    section = section[:section.index("\n## ")]
    return {code for cell in re.findall(r"^\| (.+?) \|", section, re.MULTILINE) for code in re.findall(r"`([A-Za-z]+)`", cell)}


def test_test_files_know_exactly_the_codes_a_decision_can_carry():
    # WebhookFailure is the webhook's own answer, never a decision's: no offline test can see it
    assert REASON_CODES == _codes_of_the_reference_table() - {"WebhookFailure"}
