"""`allot lint` as a user runs it: a child process, stdin from `helm template`, exit codes 0/1/2."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.webhook.lint.lint_builders import deployment, job, write_policy

from webhook.cli import main

H100 = "NVIDIA-H100-80GB-HBM3"
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def allot(*argv, stdin: str | None = None):
    env = dict(os.environ, PYTHONPATH=ROOT)
    return subprocess.run([sys.executable, "-m", "webhook", *argv], input=stdin, capture_output=True, text=True,
                          env=env, timeout=120, check=False)


def test_stdin_stream_like_helm_template(tmp_path):
    policy = write_policy(tmp_path)
    stream = "---\n# Source: chart/templates/job.yaml\n" + job(gpus="1") + "---\n" + deployment(gpus="8", model=H100)
    proc = allot("lint", "--policy", policy, "-", stdin=stream)
    assert proc.returncode == 1, proc.stderr
    assert "-:5:1: warning[RuleDenied] needs-model: batch: pin a GPU model" in proc.stdout  # its metadata line in the stream
    assert "error[RuleDenied] no-huge: web" in proc.stdout
    assert proc.stdout.splitlines()[-1].startswith("linted 1 file, 2 objects: 1 error, ")


@pytest.mark.parametrize("argv, want_rc, want_err", [
    (["--policy", "{policy}", "{clean}"], 0, ""),
    (["--policy", "{policy}", "{dirty}"], 1, ""),
    (["--policy", "{policy}", "{tmp}/missing.yaml"], 2, "no such file"),
    (["--policy", "{tmp}/nopolicies", "{clean}"], 2, "no .policy files"),
    (["--policy", "{policy}", "--format", "xml", "{clean}"], 2, "invalid choice"),
    (["--policy", "{policy}", "--cluster", "{tmp}/nocluster.yaml", "{clean}"], 2, "no such cluster-state file"),
    (["--policy", "{policy}", "--jobs", "0", "{clean}"], 2, "--jobs"),
])
def test_exit_codes(tmp_path, capsys, argv, want_rc, want_err):
    policy = write_policy(tmp_path)
    (tmp_path / "nopolicies").mkdir()
    clean = tmp_path / "clean.yaml"
    clean.write_text(deployment(model=H100, labels={"team": "team"}))
    dirty = tmp_path / "dirty.yaml"
    dirty.write_text(deployment(gpus="8"))
    fill = {"policy": policy, "clean": str(clean), "dirty": str(dirty), "tmp": str(tmp_path)}
    try:
        rc = main(["lint", *(a.format(**fill) for a in argv)])
    except SystemExit as exc:  # argparse's own usage errors exit 2 from the parser
        rc = exc.code
    _out, err = capsys.readouterr()
    assert rc == want_rc
    assert want_err in err


def test_a_broken_file_does_not_stop_the_others(tmp_path):
    policy = write_policy(tmp_path)
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "a.yaml").write_text("kind: [\n")
    (tmp_path / "m" / "b.yaml").write_text(deployment(gpus="8"))
    proc = allot("lint", "--policy", policy, str(tmp_path / "m"))
    assert proc.returncode == 1
    assert "a.yaml:2:1: error[ManifestYamlSyntax]" in proc.stdout
    assert "b.yaml:3:1: error[RuleDenied] no-huge" in proc.stdout
    assert "Traceback" not in proc.stderr


# --- fuzz: whatever the text, lint answers 0, 1 or 2 and every finding is located --------------------------------


_SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-5, 10**20), st.text(max_size=8),
                     st.sampled_from(["1", "2x", "500m", "80Gi", "nvidia.com/gpu", "NVIDIA-H100-80GB-HBM3", "-1"]))
_VALUES = st.recursive(_SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=3),
    st.dictionaries(st.sampled_from(["spec", "template", "containers", "resources", "limits", "requests", "nvidia.com/gpu",
                                     "replicas", "parallelism", "metadata", "labels", "name", "namespace", "x"]), inner, max_size=4)),
    max_leaves=12)
_OBJECTS = st.fixed_dictionaries(
    {"apiVersion": st.sampled_from(["v1", "apps/v1", "batch/v1", "jobset.x-k8s.io/v1alpha2", 3]),
     "kind": st.sampled_from(["Pod", "Deployment", "Job", "JobSet", "ConfigMap", "List", ""])},
    optional={"metadata": _VALUES, "spec": _VALUES, "items": _VALUES})


def _text(objs, junk):
    import yaml

    return "---\n".join(yaml.safe_dump(o) for o in objs) + junk


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(objs=st.lists(_OBJECTS, max_size=3), junk=st.one_of(st.just(""), st.text(max_size=40)))
def test_fuzz_lint_always_answers_with_located_findings(tmp_path, capsys, objs, junk):
    import json

    policy = write_policy(tmp_path)
    path = tmp_path / "fuzz.yaml"
    path.write_text(_text(objs, junk))
    rc = main(["lint", "--policy", policy, "--format", "json", str(path)])
    out, err = capsys.readouterr()
    assert rc in (0, 1, 2), err
    assert "internal error" not in err
    if rc != 2:
        doc = json.loads(out)
        lines = path.read_text().count("\n") + 1
        for f in doc["findings"]:
            assert 1 <= f["line"] <= lines and f["column"] >= 1 and f["code"]
        assert rc == (1 if doc["summary"]["errors"] else 0)


def test_user_flag_judges_as_that_identity(tmp_path, capsys):
    """The library's CI agent may create Jobs in batch-jobs only: a ConfigMap it creates is denied, the admin's is skipped."""
    path = tmp_path / "m.yaml"
    path.write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c, namespace: batch-jobs}\n---\n"
                    "apiVersion: batch/v1\nkind: Job\nmetadata: {name: j, namespace: batch-jobs}\n"
                    "spec:\n  template:\n    spec:\n      containers:\n      - {name: c, image: x}\n")
    policy = ["--policy", "policies/whole-workloads", "--policy", "policies/cluster.policy"]
    rc = main(["lint", *policy, "--user", "system:serviceaccount:ci:runner", str(path)])
    out, _ = capsys.readouterr()
    assert rc == 1
    assert f"{path}:3:1: error[AgentNotAllowed] ci-runner: agents are denied by default" in out
    assert "error[" not in out.split("AgentNotAllowed", 1)[1]  # the Job is allowed
    rc = main(["lint", *policy, str(path)])
    out, _ = capsys.readouterr()
    assert rc == 0 and "1 skipped (kinds the policy set does not govern)" in out
