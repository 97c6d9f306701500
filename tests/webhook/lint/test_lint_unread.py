"""`allot lint` reports an object of a kind Allot does not read that may ask for GPUs, though no webhook rule names its kind."""

from __future__ import annotations

from tests.webhook.lint.test_lint_judge import run

SPARK = """apiVersion: sparkoperator.k8s.io/v1beta2
kind: SparkApplication
metadata: {name: etl, namespace: team}
spec:
  executor:
    instances: 2
    gpu: {name: nvidia.com/gpu, quantity: 1}
"""
WIDGET = "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w, namespace: team}\nspec: {size: 3}\n"


def test_an_unread_gpu_object_is_a_warning_not_a_skip(tmp_path):
    report, _ = run(tmp_path, SPARK + "---\n" + WIDGET)
    unread = [f for f in report.findings if f.code == "UnreadWorkload"]
    assert len(unread) == 1 and unread[0].severity == "warning" and "spec.executor[gpu]" in unread[0].message
    assert unread[0].object == "SparkApplication team/etl"
    assert report.skipped == 1  # the Widget runs nothing: skipped as before
