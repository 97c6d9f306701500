"""`allot demo` as a user runs it: the CA's temporary directory is removed unless --keep, and a policy set
other than the library is judged by its own test cases (the script describes the library only)."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[3]

POLICY = 'quota solo {\n  for namespace == "solo"\n  gpus 4\n}\n'
POD = ("{apiVersion: v1, kind: Pod, metadata: {name: p, namespace: solo},"
       " spec: {containers: [{name: c, image: x, resources: {limits: {nvidia.com/gpu: '%d'}}}]}}")
CASES = f"""\
cases:
  - name: fits
    request: {POD % 2}
    expect: {{allowed: true, codes: []}}
  - name: too big
    request: {POD % 8}
    expect: {{allowed: false, codes: [QuotaExceeded]}}
"""


def demo(*args, tmp, cwd=ROOT, timeout=120):
    env = {**os.environ, "TMPDIR": str(tmp), "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "webhook", "demo", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=cwd, env=env)


def test_the_ca_directory_is_removed_on_exit(tmp_path):
    got = demo(tmp=tmp_path)
    assert got.returncode == 0, got.stdout + got.stderr
    assert "allot-demo-" in got.stdout  # the header names the CA it used
    assert list(tmp_path.iterdir()) == []


def test_keep_leaves_the_ca_and_says_where(tmp_path):
    got = demo("--keep", tmp=tmp_path)
    assert got.returncode == 0, got.stdout + got.stderr
    [kept] = list(tmp_path.iterdir())
    assert kept.name.startswith("allot-demo-") and (kept / "ca.key").is_file()
    assert f"allot demo: kept {kept}" in got.stderr


def test_another_policy_set_is_judged_by_its_own_tests(tmp_path):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "q.policy").write_text(POLICY)
    (mine / "q.test.yaml").write_text(CASES)
    got = demo("--policy", str(mine), tmp=tmp_path)
    assert got.returncode == 0, got.stdout + got.stderr
    assert "judging it by its own test cases" in got.stdout
    assert f"ok   {mine}/q.test.yaml::too big" in got.stdout
    assert got.stdout.rstrip().endswith("2/2 of the set's own test cases held")
    assert "scripted expectations" not in got.stdout


def test_a_failing_own_case_fails_the_demo(tmp_path):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "q.policy").write_text(POLICY)
    (mine / "q.test.yaml").write_text(CASES.replace("allowed: true, codes: []", "allowed: false, codes: [QuotaExceeded]"))
    got = demo("--policy", str(mine), tmp=tmp_path)
    assert got.returncode == 1
    assert f"FAIL {mine}/q.test.yaml::fits" in got.stdout and "1/2 of the set's own test cases held" in got.stdout


def test_a_set_without_tests_is_a_usage_error(tmp_path):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "q.policy").write_text(POLICY)
    got = demo("--policy", str(mine), tmp=tmp_path)
    assert got.returncode == 2 and "Traceback" not in got.stderr
    assert "no *.test.yaml cases to judge this policy set by" in got.stderr


def test_script_only_flags_with_another_set_are_a_usage_error(tmp_path):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "q.policy").write_text(POLICY)
    (mine / "q.test.yaml").write_text(CASES)
    got = demo("--policy", str(mine), "--cluster", "x.yaml", tmp=tmp_path)
    assert got.returncode == 2 and "--cluster: only for the scripted demo" in got.stderr


def test_the_library_by_path_still_runs_the_script(tmp_path):
    got = demo("--policy", str(ROOT / "policies"), tmp=tmp_path)
    assert got.returncode == 0, got.stdout + got.stderr
    assert "scripted expectations held" in got.stdout


def test_a_users_own_policies_dir_in_the_working_directory_does_not_replace_the_library(tmp_path):
    (tmp_path / "policies").mkdir()
    (tmp_path / "policies" / "q.policy").write_text(POLICY)
    (tmp_path / "tmp").mkdir()
    got = demo(tmp=tmp_path / "tmp", cwd=tmp_path)
    assert got.returncode == 0, got.stdout + got.stderr
    assert f"policies {ROOT / 'policies'}" in got.stdout
