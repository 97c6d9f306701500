"""`allot test` end to end on a small policy tree, with the real compiler and engine.

Meta-tests: a case with a wrong expectation of either polarity, a patch mismatch or a
message pattern that matches nothing must FAIL, and the command must say so.
"""

import xml.etree.ElementTree as ET

import pytest

from webhook.cli import main

ROOT_POLICY = 'rule blocked-ns {\n  for namespace == "blocked"\n  deny "namespace {namespace} is closed"\n}\n'
TEAM_POLICY = """\
rule no-big {
  for namespace matches "ml*"
  when gpus > 4
  deny "too many GPUs: {gpus}"
}
rule label-team {
  for gpus > 0 and not ("team" in labels)
  set labels["team"] = "ml"
}
rule never {
  for namespace == "nowhere"
  deny "never fires"
}
"""


def pod(ns: str, gpus: int, labels: str = "{}") -> str:
    """A one-container Pod manifest in YAML flow style."""
    return (
        f"{{apiVersion: v1, kind: Pod, metadata: {{name: p, namespace: {ns}, labels: {labels}}},"
        f" spec: {{containers: [{{name: m, image: x, resources: {{limits: {{nvidia.com/gpu: '{gpus}'}}}}}}]}}}}"
    )


def case(name: str, request: str, expect: str) -> str:
    return f"  - name: {name}\n    request: {request}\n    expect: {expect}\n"


GOOD = [
    case("small pod allowed and labeled", pod("ml", 2), "{allowed: true, patch: [{op: add, path: /metadata/labels/team, value: ml}]}"),
    case("big pod denied", pod("ml", 8, "{team: ml}"), '{allowed: false, denied_by: [rule no-big], codes: [RuleDenied], messages: ["too many GPUs: 8$"]}'),
    case("ancestor policy applies", pod("blocked", 0), '{allowed: false, denied_by: [rule blocked-ns], codes: [RuleDenied], messages: ["blocked is closed"]}'),
]

WRONG = [
    # (name, case text, want mismatch headline)
    ("expects deny, gets allow", case("w", pod("ml", 1, "{team: ml}"), "{allowed: false}"), "allowed: expected false, got true"),
    ("expects allow, gets deny", case("w", pod("ml", 8, "{team: ml}"), "{allowed: true}"), "allowed: expected true, got false"),
    ("patch mismatch", case("w", pod("ml", 1), "{allowed: true, patch: [{op: add, path: /metadata/labels/team, value: cv}]}"), "patch:"),
    ("patch expected none", case("w", pod("ml", 1), "{allowed: true, patch: []}"), "patch:"),
    ("patched subset mismatch", case("w", pod("ml", 1), "{allowed: true, patched: {metadata: {labels: {team: cv}}}}"), "patched:"),
    ("message matches nothing", case("w", pod("ml", 8, "{team: ml}"), '{allowed: false, messages: ["quota"]}'), "messages: no message matches 'quota'"),
    ("wrong denying block", case("w", pod("ml", 8, "{team: ml}"), "{allowed: false, denied_by: [rule never]}"), "denied_by:"),
    ("warning expected, none given", case("w", pod("ml", 1, "{team: ml}"), '{allowed: true, warnings: ["x"]}'), "warnings:"),
]


@pytest.fixture
def tree(tmp_path, monkeypatch):
    """root/shared.policy + root/team/{team.policy, team.test.yaml}; cwd = tmp_path."""
    (tmp_path / "root" / "team").mkdir(parents=True)
    (tmp_path / "root" / "shared.policy").write_text(ROOT_POLICY)
    (tmp_path / "root" / "team" / "team.policy").write_text(TEAM_POLICY)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def write_cases(tree, *cases: str) -> None:
    (tree / "root" / "team" / "team.test.yaml").write_text("cases:\n" + "".join(cases))


def allot_test(capsys, *argv: str) -> tuple[int, list[str], str]:
    code = main(["test", *argv])
    out = capsys.readouterr()
    return code, out.out.rstrip("\n").splitlines(), out.err


def test_good_cases_pass_and_the_tally_is_the_last_line(tree, capsys):
    write_cases(tree, *GOOD)
    code, lines, _ = allot_test(capsys, "root")
    assert (code, lines[-1]) == (0, "3 passed, 0 failed")
    assert not any(line.startswith(("FAIL", "ERROR")) for line in lines)


@pytest.mark.parametrize("name,text,want", WRONG, ids=[w[0] for w in WRONG])
def test_a_wrong_expectation_fails(tree, capsys, name, text, want):
    write_cases(tree, *GOOD, text)
    code, lines, _ = allot_test(capsys, "root")
    assert (code, lines[-1]) == (1, "3 passed, 1 failed")
    assert "FAIL root/team/team.test.yaml::w" in lines
    assert any(line.strip().startswith(want) for line in lines), lines


def test_the_failure_shows_a_unified_diff(tree, capsys):
    write_cases(tree, case("w", pod("ml", 1), "{allowed: true, patch: [{op: add, path: /metadata/labels/team, value: cv}]}"))
    _, lines, _ = allot_test(capsys, "root")
    assert "    --- expected" in lines and "    +++ got" in lines
    assert '    -    "value": "cv"' in lines and '    +    "value": "ml"' in lines


def test_the_ancestor_policy_is_not_loaded_above_the_path_root(tree, capsys):
    write_cases(tree, GOOD[2])
    code, lines, _ = allot_test(capsys, "root/team")  # root/shared.policy is above the PATH root now
    assert (code, lines[-1]) == (1, "0 passed, 1 failed")


def test_filter_selects_cases_by_file_and_name(tree, capsys):
    write_cases(tree, *GOOD)
    code, lines, _ = allot_test(capsys, "root", "--filter", "big pod", "-v")
    assert (code, lines) == (0, ["ok   root/team/team.test.yaml::big pod denied", "1 passed, 0 failed"])


def test_zero_cases_found_is_a_failure(tree, capsys):
    code, lines, err = allot_test(capsys, "root")
    assert (code, lines[-1]) == (1, "0 passed, 0 failed")
    assert "no test cases found under root" in err


def test_zero_cases_after_filter_is_a_failure(tree, capsys):
    write_cases(tree, *GOOD)
    code, lines, err = allot_test(capsys, "root", "--filter", "nothing-like-this")
    assert (code, lines[-1]) == (1, "0 passed, 0 failed")
    assert "matching 'nothing-like-this'" in err


@pytest.mark.parametrize("argv,want", [
    (["missing-dir"], "missing-dir: no such file or directory"),
    (["root/shared.policy"], "not a test file"),
    (["root", "--junit", "root"], "is a directory"),
    (["--bogus"], "unrecognized arguments"),
])
def test_usage_errors_exit_2(tree, capsys, argv, want):
    write_cases(tree, *GOOD)
    with pytest.raises(SystemExit) if argv == ["--bogus"] else _no_raise() as exc:
        code = main(["test", *argv])
    code = exc.value.code if argv == ["--bogus"] else code
    assert code == 2
    assert want in capsys.readouterr().err


class _no_raise:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_a_broken_test_file_fails_with_its_line(tree, capsys):
    write_cases(tree, GOOD[0])
    (tree / "root" / "broken.test.yaml").write_text("cases:\n  - name: b\n    request: {kind: Pod}\n    expect: {allowd: true}\n")
    code, lines, _ = allot_test(capsys, "root")
    assert (code, lines[-1]) == (1, "1 passed, 1 failed")
    assert "  root/broken.test.yaml:4: cases[0].expect.allowd: Extra inputs are not permitted (did you mean `allowed`?)" in lines


def test_a_policy_that_does_not_compile_fails_every_case(tree, capsys):
    write_cases(tree, *GOOD)
    (tree / "root" / "team" / "bad.policy").write_text("rule {\n")
    code, lines, _ = allot_test(capsys, "root")
    assert (code, lines[-1]) == (1, "0 passed, 3 failed")
    assert any("policy set does not compile: root/team/bad.policy:1:6: error[E0001]: expected a name" in line for line in lines), lines


def test_junit_shape(tree, capsys):
    write_cases(tree, *GOOD, WRONG[0][1])
    code, _, _ = allot_test(capsys, "root", "--junit", "out.xml")
    root = ET.parse(tree / "out.xml").getroot()
    suite = root.find("testsuite")
    assert (code, root.tag, root.get("tests"), root.get("failures"), root.get("errors")) == (1, "testsuites", "4", "1", "0")
    assert (suite.get("name"), suite.get("tests"), suite.get("failures")) == ("root/team/team.test.yaml", "4", "1")
    cases = {c.get("name"): c for c in suite.findall("testcase")}
    assert set(cases) == {"small pod allowed and labeled", "big pod denied", "ancestor policy applies", "w"}
    failure = cases["w"].find("failure")
    assert failure.get("message") == "expectation not met: allowed"
    assert "allowed: expected false, got true" in failure.text
    assert cases["big pod denied"].find("failure") is None


def test_coverage_lists_blocks_no_case_exercised(tree, capsys):
    write_cases(tree, *GOOD)
    code, lines, _ = allot_test(capsys, "root", "--coverage")
    assert code == 0
    assert "coverage: 3 of 4 governing blocks exercised" in lines
    [missed] = [line for line in lines if "not exercised" in line]
    assert missed.startswith("  not exercised: rule never (root/team/team.policy:")


def test_cluster_file_relative_to_the_test_file(tree, capsys):
    (tree / "root" / "team" / "c.yaml").write_text(
        "apiVersion: v1\nkind: List\nitems:\n- {apiVersion: v1, kind: Namespace, metadata: {name: ml, labels: {team: vision}}}\n"
    )
    (tree / "root" / "team" / "team.policy").write_text(
        TEAM_POLICY.replace('set labels["team"] = "ml"', 'set labels["team"] = namespace.labels["team"]')
    )
    write_cases(tree, "  - name: from cluster\n    cluster: c.yaml\n    request: " + pod("ml", 1)
                + "\n    expect: {allowed: true, patched: {metadata: {labels: {team: vision}}}}\n")
    code, lines, _ = allot_test(capsys, "root")
    assert (code, lines[-1]) == (0, "1 passed, 0 failed")


def test_a_missing_cluster_file_fails_the_case(tree, capsys):
    write_cases(tree, "  - name: c\n    cluster: nope.yaml\n    request: " + pod("ml", 1) + "\n    expect: {allowed: true}\n")
    code, lines, _ = allot_test(capsys, "root")
    assert (code, lines[-1]) == (1, "0 passed, 1 failed")
    assert "  cluster file not found: root/team/nope.yaml" in lines


def test_hidden_directories_are_not_searched(tree, capsys):
    write_cases(tree, GOOD[0])
    (tree / "root" / ".cache").mkdir()
    (tree / "root" / ".cache" / "old.test.yaml").write_text("not: [valid\n")
    code, lines, _ = allot_test(capsys, "root")
    assert (code, lines[-1]) == (0, "1 passed, 0 failed")


def test_a_full_admission_review_and_a_mode_override(tree, capsys):
    review = (
        "{apiVersion: admission.k8s.io/v1, kind: AdmissionReview, request: {uid: u1, operation: CREATE,"
        " kind: {group: '', version: v1, kind: Pod}, resource: {group: '', version: v1, resource: pods},"
        " namespace: ml, userInfo: {username: bob}, object: " + pod("ml", 8, "{team: ml}") + "}}"
    )
    write_cases(
        tree,
        case("review denied", review, "{allowed: false, denied_by: [rule no-big]}"),
        "  - name: warn override\n    mode: warn\n    request: " + pod("ml", 8, "{team: ml}")
        + '\n    expect: {allowed: true, denied_by: [], warnings: ["too many GPUs: 8"]}\n',
        "  - name: wrong under override\n    mode: warn\n    request: " + pod("ml", 8, "{team: ml}")
        + "\n    expect: {allowed: false}\n",
    )
    code, lines, _ = allot_test(capsys, "root")
    assert (code, lines[-1]) == (1, "2 passed, 1 failed")
    assert "FAIL root/team/team.test.yaml::wrong under override" in lines


def test_a_denied_before_request_fails_the_case_as_an_error(tree, capsys):
    prior = "\n    before:\n      - request: " + pod("ml", 8, "{team: ml}")
    write_cases(tree, "  - name: setup fails" + prior + "\n    request: " + pod("ml", 1, "{team: ml}") + "\n    expect: {allowed: true}\n")
    code, lines, _ = allot_test(capsys, "root")
    assert (code, lines[-1]) == (1, "0 passed, 1 failed")
    assert "ERROR root/team/team.test.yaml::setup fails" in lines
    assert "  before[0] was denied, so the case cannot set up: no-big: too many GPUs: 8" in lines
