"""`allot check`, `allot fmt`, `allot bench check` through the real CLI entry point."""

import json
import pathlib

import pytest

from webhook.cli import main

HERE = pathlib.Path(__file__).parent
CONTRACT = HERE / "fixtures" / "contract.policy"
THREE = HERE / "golden" / "three_mistakes.policy"


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_check_clean_contract_exits_0(capsys):
    code, out, _ = run(capsys, "check", str(CONTRACT))
    assert code == 0 and out.strip() == "checked 1 file: no problems"


def test_check_three_mistakes_exits_1_with_three_located_diagnostics(capsys):
    code, out, _ = run(capsys, "check", str(THREE))
    assert code == 1
    heads = [line for line in out.splitlines() if ": error[" in line]
    assert [h.split(": error[")[0].rsplit(":", 2)[1:] for h in heads] == [["5", "7"], ["7", "14"], ["11", "3"]]
    assert "^^^^" in out and "help:" in out and out.rstrip().endswith("3 errors, 0 warnings")


@pytest.mark.parametrize("argv", [["check", "does/not/exist"], ["fmt", "does/not/exist"]])
def test_missing_path_is_a_one_line_usage_error(capsys, argv):
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "does/not/exist" in err and "Traceback" not in err


def test_check_json_shape(capsys):
    code, out, _ = run(capsys, "check", "--format", "json", str(THREE))
    items = json.loads(out)
    assert code == 1 and len(items) == 3
    assert set(items[0]) == {"path", "line", "column", "end", "code", "severity", "message", "help"}
    assert items[0]["end"] == {"line": 5, "column": 17} and items[0]["code"] == "E0201"


@pytest.mark.parametrize("golden,want_codes", [
    ("absent", {"E0205"}),
    ("borrow", {"W0305"}),
    ("hints", {"E0007", "E0001", "E0101", "E0102"}),
    ("recovery", {"E0001", "E0104", "E0202", "E0101"}),
])
def test_check_json_of_the_new_diagnostics(capsys, golden, want_codes):
    path = HERE / "golden" / f"{golden}.policy"
    code, out, _ = run(capsys, "check", "--format", "json", str(path))
    items = json.loads(out)
    assert code == (0 if golden == "borrow" else 1)
    assert {i["code"] for i in items} == want_codes
    text = path.read_text(encoding="utf-8").split("\n")
    for i in items:
        assert set(i) == {"path", "line", "column", "end", "code", "severity", "message", "help"}
        assert i["severity"] == ("warning" if i["code"].startswith("W") else "error") and i["message"]
        assert 1 <= i["column"] <= len(text[i["line"] - 1]) + 1 and i["end"]["column"] > i["column"]  # +1: at the end of the line
    if golden == "absent":
        assert any('`not has(gpu_model) or gpu_model != "l4"`' in i["help"] for i in items)
    if golden == "hints":
        assert any("did you mean `80Gi`?" in i["message"] for i in items)
        assert any("quote it" in (i["help"] or "") for i in items)


def test_check_sarif_shape(capsys):
    code, out, _ = run(capsys, "check", "--format", "sarif", str(THREE))
    log = json.loads(out)
    assert code == 1 and log["version"] == "2.1.0"
    run0 = log["runs"][0]
    assert {r["id"] for r in run0["tool"]["driver"]["rules"]} == {"E0201", "E0102", "E0303"}
    loc = run0["results"][0]["locations"][0]["physicalLocation"]
    assert loc["artifactLocation"]["uri"].endswith("three_mistakes.policy") and loc["region"]["startLine"] == 5


def test_check_directory_merges_files(tmp_path, capsys):
    (tmp_path / "a.policy").write_text('gpu h100 { product "H" memory 80Gi }\n')
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.policy").write_text("quota q {\n  gpus 8\n  gpus 4 of h100\n}\n")
    (tmp_path / "notes.txt").write_text("not a policy {")
    code, out, _ = run(capsys, "check", str(tmp_path))
    assert code == 0 and "checked 2 files" in out


def test_check_undecodable_bytes_is_a_diagnostic(tmp_path, capsys):
    bad = tmp_path / "bad.policy"
    bad.write_bytes(b"quota q {\n  gpus 8 \xff\xfe\n}\n")
    code, out, _ = run(capsys, "check", str(bad))
    assert code == 1 and "E0004" in out and "Traceback" not in out


def test_fmt_check_lists_changes_and_fmt_fixes_them(tmp_path, capsys):
    p = tmp_path / "q.policy"
    p.write_text("quota q {   gpus 8 }\n")
    code, out, _ = run(capsys, "fmt", "--check", str(p))
    assert code == 1 and f"would reformat {p}" in out and p.read_text() == "quota q {   gpus 8 }\n"
    assert run(capsys, "fmt", str(p))[0] == 0
    assert p.read_text() == "quota q {\n  gpus 8\n}\n"
    assert run(capsys, "fmt", "--check", str(p))[0] == 0


def test_fmt_leaves_files_with_syntax_errors_alone(tmp_path, capsys):
    p = tmp_path / "q.policy"
    p.write_text("quota q { gpus }\n")
    code, _, err = run(capsys, "fmt", str(p))
    assert code == 1 and "E0001" in err and p.read_text() == "quota q { gpus }\n"


def test_bench_check_json(capsys):
    code, out, _ = run(capsys, "bench", "check", "60", "--repeat", "1", "--json")
    result = json.loads(out)
    assert result["blocks"] == 60 and result["errors"] == 0
    assert result["parse_ms"] > 0 and result["check_ms"] > 0 and result["budget_ms"] == 60.0
    assert result["total_cpu_ms"] > 0 and result["cores"] >= 1
    assert code in (0, 1) and (code == 0) == (result["within_budget"] or result["within_budget_cpu"])


def test_bench_check_rejects_bad_n(capsys):
    code, _, err = run(capsys, "bench", "check", "0")
    assert code == 2 and "N must be" in err


def test_warnings_alone_do_not_fail_check(tmp_path, capsys):
    p = tmp_path / "w.policy"
    p.write_text("quota q {\n  cohort solo\n  gpus 8\n}\n")
    code, out, _ = run(capsys, "check", str(p))
    assert code == 0 and "warning[W0302]" in out and out.rstrip().endswith("0 errors, 1 warning")


def test_check_defaults_to_the_policies_directory(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, _, err = run(capsys, "check")
    assert code == 2 and "policies: no such file or directory" in err
    (tmp_path / "policies").mkdir()
    (tmp_path / "policies" / "a.policy").write_text("priority p 1\n")
    assert run(capsys, "check")[0] == 0


CLASSES = "priority prod  500\npriority batch 100 default\npriority dev   10\n"
QUOTA = 'quota team-a {\n  for namespace matches "team-a*"\n  gpus 8\n}\n'
SOLO = "quota q {\n  cohort solo\n  gpus 8\n}\n"  # one warning (W0302)
LIVE = "apiVersion: v1\nkind: List\nitems:\n" + "".join(
    f"- {{apiVersion: scheduling.k8s.io/v1, kind: PriorityClass, metadata: {{name: {n}}}, value: {v}, preemptionPolicy: Never}}\n"
    for n, v in (("prod", 500), ("batch", 100), ("dev", 10)))
DRIFTED = LIVE.replace("value: 500", "value: 400").replace("value: 10,", "value: 11,").replace("dev}, value: 11, preemptionPolicy: Never",
                                                                                              "dev}, value: 11, preemptionPolicy: PreemptLowerPriority")


@pytest.mark.parametrize("second, live, want_code, want_summary, want_errors", [
    # three differences are three errors, counted in the one summary
    (QUOTA, DRIFTED, 1, "checked 2 files and cluster {c}: 3 errors (3 priority class differences), 0 warnings", 3),
    (QUOTA, LIVE, 0, "checked 2 files and cluster {c}: no problems; declared priority classes match the live ones", 0),
    (SOLO, DRIFTED, 1, "checked 2 files and cluster {c}: 3 errors (3 priority class differences), 1 warning", 3),
    (SOLO, LIVE, 0, "checked 2 files and cluster {c}: 0 errors, 1 warning; declared priority classes match the live ones", 0),
    # a policy set that does not compile is not compared: the summary says so
    ("quota q {\n  gpus\n}\n", DRIFTED, 1, "checked 2 files: 1 error, 0 warnings; cluster {c} not compared: the policy set has errors", 1),
], ids=["drift", "clean", "drift-and-warning", "warning", "policy-error"])
def test_check_cluster_summary_adds_up_in_every_format(tmp_path, capsys, second, live, want_code, want_summary, want_errors):
    (tmp_path / "p").mkdir()
    (tmp_path / "p" / "a.policy").write_text(CLASSES)
    (tmp_path / "p" / "b.policy").write_text(second)
    cluster = tmp_path / "live.yaml"
    cluster.write_text(live)
    argv = ["check", str(tmp_path / "p"), "--cluster", str(cluster)]
    code, out, _ = run(capsys, *argv)
    assert code == want_code
    assert out.rstrip().splitlines()[-1] == want_summary.format(c=cluster)
    assert out.count(": error[") == want_errors
    j_code, j_out, _ = run(capsys, *argv, "--format", "json")
    assert j_code == want_code and sum(d["severity"] == "error" for d in json.loads(j_out)) == want_errors
    s_code, s_out, _ = run(capsys, *argv, "--format", "sarif")
    results = json.loads(s_out)["runs"][0]["results"]
    assert s_code == want_code and sum(r["level"] == "error" for r in results) == want_errors
