"""`lint` with the opt-in workload-expression library: namespaces declared beside the workloads count, fills keep their types."""

from __future__ import annotations

import pytest

from webhook.cli.eval import load_policy
from webhook.lint.fix import fix_file
from webhook.lint.judge import Linter
from webhook.lint.run import lint

NAMESPACE = """\
apiVersion: v1
kind: Namespace
metadata:
  name: ml
  labels:
    allot.dev/workload-expression: "on"
"""

JOB = """\
apiVersion: batch/v1
kind: Job
metadata:
  name: train
  namespace: ml
spec:
  parallelism: 4
  completions: 4
  template:
    spec:
      restartPolicy: Never
      containers:
      - name: t
        image: pytorch
        resources:
          requests:
            nvidia.com/gpu: 1
"""


@pytest.fixture(scope="module")
def library():
    return load_policy(["policies"])


def _linter(policy) -> Linter:
    return Linter(policy, snapshot=None, user="kubernetes-admin", groups=("system:masters", "system:authenticated"), now=0.0)


def _blocks(report) -> set[str]:
    return {f.block.split(" ", 1)[1] for f in report.findings if f.block and f.severity == "warning"}


@pytest.mark.parametrize("layout,jobs", [("one file", 1), ("one file", 2), ("namespace in its own file", 1), ("namespace in its own file", 2)])
def test_a_namespace_in_the_manifests_opts_its_workloads_in(tmp_path, library, layout, jobs):
    if layout == "one file":
        (tmp_path / "all.yaml").write_text(NAMESPACE + "---\n" + JOB)
        (tmp_path / "other.yaml").write_text(JOB.replace("name: train", "name: other"))
    else:
        (tmp_path / "a-job.yaml").write_text(JOB)
        (tmp_path / "z-namespace.yaml").write_text(NAMESPACE)
    report = lint([str(tmp_path)], _linter(library), jobs=jobs)
    want = {"gpu-workload-names-a-model", "distributed-gpus-start-together", "gpu-requests-equal-limits"}
    assert want <= _blocks(report)
    train = [f for f in report.findings if f.block == "rule distributed-gpus-start-together" and "train" in f.message]
    assert train, "the Job in the labelled namespace is flagged"


def test_without_the_namespace_the_library_stays_quiet(tmp_path, library):
    (tmp_path / "job.yaml").write_text(JOB)
    report = lint([str(tmp_path)], _linter(library))
    assert not any("workload-expression" in (f.block_location or "") for f in report.findings)
    assert "distributed-gpus-start-together" not in _blocks(report)


def test_the_limit_fill_keeps_the_request_as_written(tmp_path, library):
    path = tmp_path / "all.yaml"
    path.write_text(NAMESPACE + "---\n" + JOB)
    report = lint([str(path)], _linter(library))
    fixed = fix_file(str(path), path.read_text(), report.judged)
    assert "          limits:\n            nvidia.com/gpu: 1\n" in fixed.after
    assert "'1'" not in fixed.after
