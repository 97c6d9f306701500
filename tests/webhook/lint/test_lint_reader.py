"""The manifest reader: multi-document files, `kind: List`, line marks, and located findings for what is not an object."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.webhook.lint.lint_builders import deployment, job, line_of

from webhook.errors import UsageError
from webhook.lint.reader import ManifestLoader, construct, expand, parse, read_paths


@dataclass
class Case:
    name: str
    text: str
    want_kinds: list[str]  # objects handed to the judge, in order
    want_lines: list[int]  # each one's first line
    want_codes: list[tuple[str, int]]  # (code, line) of the reader's findings


LIST = """\
apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: ConfigMap
  metadata: {name: a}
- 3
- apiVersion: batch/v1
  kind: Job
  metadata:
    name: b
"""

CASES = [
    Case("one object", job(), ["Job"], [1], []),
    Case("two documents", job() + "---\n" + deployment(), ["Job", "Deployment"], [1, len(job().splitlines()) + 2], []),
    Case("empty documents are nothing", "---\n# only a comment\n---\n" + job(), ["Job"], [4], []),
    Case("a List's items, each at its own line", LIST, ["ConfigMap", "Job"], [4, 8], [("ManifestNotAnObject", 7)]),
    Case("a syntax error ends its document only", job() + "---\nkind: [\n---\n" + job(), ["Job", "Job"],
         [1, len(job().splitlines()) + 4], [("ManifestYamlSyntax", len(job().splitlines()) + 3)]),
    Case("not a mapping", "- a\n- b\n", [], [], [("ManifestNotAnObject", 1)]),
    Case("a scalar document", "just text\n", [], [], [("ManifestNotAnObject", 1)]),
    Case("no kind", "apiVersion: v1\nmetadata: {name: x}\n", [], [], [("ManifestMissingKind", 1)]),
    Case("a kind that is not text", "apiVersion: v1\nkind: 3\n", [], [], [("ManifestMissingKind", 1)]),
    Case("List without a list", "apiVersion: v1\nkind: List\nitems: {a: 1}\n", [], [], [("ManifestBadList", 3)]),
    Case("an unknown tag", "apiVersion: v1\nkind: !Ref x\n", [], [], [("ManifestYamlSyntax", 2)]),
    Case("a bad timestamp", "apiVersion: v1\nkind: Pod\nmetadata: {name: 2020-13-45}\n", [], [], [("ManifestYamlSyntax", 1)]),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_reader(case):
    docs, findings = parse("m.yaml", case.text)
    assert [d.obj["kind"] for d in docs] == case.want_kinds
    assert [d.line for d in docs] == case.want_lines
    assert [(f.code, f.line) for f in findings] == case.want_codes
    assert all(f.path == "m.yaml" and f.severity == "error" for f in findings)


def test_field_line_after_a_broken_document_counts_the_lines_before_it():
    text = "kind: [\n---\n" + deployment()
    docs, _ = parse("m.yaml", text)
    line, _col, found = docs[0].field_line(("spec", "template", "spec", "containers", "0", "resources"))
    assert found[-1] == "resources"
    assert line == line_of(text, "resources:")


def test_direct_constructor_builds_what_safe_load_builds():
    text = ("a: &x {b: 1, c: [1, 2.5, true, null, 's', 2020-01-01, 0x10, 1e3, ~, yes, !!str 3]}\n"
            "d: *x\ne: {<<: *x, f: 2}\n'1': one\n2: two\n")
    loader = ManifestLoader(text)
    try:
        assert construct(loader, loader.get_single_node()) == yaml.safe_load(text)
    finally:
        loader.dispose()


def test_directories_expand_to_yaml_files_sorted_hidden_skipped(tmp_path):
    (tmp_path / "b").mkdir()
    (tmp_path / ".git").mkdir()
    for p in ("b/z.yml", "b/a.yaml", "c.yaml", "notes.txt", ".git/x.yaml", "b/.hidden.yaml", "b/quota.test.yaml"):
        (tmp_path / p).write_text(job())
    assert [p.removeprefix(str(tmp_path) + "/") for p in expand([str(tmp_path)])] == ["b/a.yaml", "b/z.yml", "c.yaml"]


def test_a_missing_path_is_a_usage_error(tmp_path):
    with pytest.raises(UsageError, match="no such file"):
        read_paths([str(tmp_path / "nope.yaml")])


def test_not_utf8_is_a_finding_and_other_files_are_still_read(tmp_path):
    (tmp_path / "a.yaml").write_bytes(b"apiVersion: v1\nkind: \xff\n")
    (tmp_path / "b.yaml").write_text(job())
    read = read_paths([str(tmp_path)])
    assert [(f.code, f.line) for f in read.findings] == [("ManifestNotText", 2)]
    assert [d.obj["kind"] for d in read.documents] == ["Job"]


_PIECES = [*"abk:- \n\t[]{},'\"&*!|>#%@`~0.9?", "---\n", "kind: Job\n", "apiVersion: v1\n", "metadata:\n", "  ", "- ", "<<: "]
_YAMLISH = st.lists(st.sampled_from(_PIECES), max_size=60).map("".join)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(_YAMLISH, st.text(max_size=120)))
def test_fuzz_reader_never_raises_and_locates_every_finding(text):
    docs, findings = parse("f.yaml", text)
    lines = text.count("\n") + 1
    for f in findings:
        assert 1 <= f.line <= lines + 1 and f.col >= 1 and f.code.startswith("Manifest")
    for d in docs:
        assert isinstance(d.obj, dict) and isinstance(d.obj["kind"], str)
        assert 1 <= d.line <= lines
