"""`lint --cluster`: a whole-GPU pod no node of the cluster could hold is said (`NoNodeHolds`), at its resources."""

from __future__ import annotations

import pytest
from tests.webhook.lint.lint_builders import deployment, job, jobset, line_of, write_policy

from webhook.cli.eval import load_policy, load_snapshot
from webhook.lint.judge import Linter
from webhook.lint.run import lint

CLUSTER = "policies/fixtures/cluster.yaml"  # H100 nodes of 8 GPUs; no node has more than 8
H100 = "NVIDIA-H100-80GB-HBM3"


def findings(tmp_path, text: str, cluster: str | None = CLUSTER):
    linter = Linter(load_policy([write_policy(tmp_path, "quota team {\n  for namespace == \"team\"\n  gpus 64\n}\n")]),
                    snapshot=load_snapshot(cluster) if cluster else None, user="kubernetes-admin",
                    groups=("system:masters", "system:authenticated"), now=0.0)
    path = tmp_path / "m.yaml"
    path.write_text(text)
    return [f for f in lint([str(path)], linter, cluster=cluster).findings if f.code == "NoNodeHolds"]


@pytest.mark.parametrize("text,want", [
    pytest.param(deployment(gpus="16", model=H100), "pod set replicas asks 16 whole NVIDIA-H100-80GB-HBM3 GPUs per pod; "
                 "the largest NVIDIA-H100-80GB-HBM3 GPU node of the cluster has 8", id="pinned to a model"),
    pytest.param(job(gpus="12"), "pod set job asks 12 whole GPUs per pod; the largest GPU node of the cluster has 8", id="no model"),
    pytest.param(jobset(gpus="9"), "pod set workers asks 9 whole NVIDIA-H100-80GB-HBM3 GPUs", id="a workload's set"),
])
def test_a_pod_larger_than_every_node_is_a_warning_at_its_resources(tmp_path, text, want):
    got = findings(tmp_path, text)
    assert len(got) == 1, [str(f) for f in got]
    f = got[0]
    assert f.severity == "warning" and f.message.startswith(want), f.message
    assert f.line == line_of(text, "resources:") and f.help


@pytest.mark.parametrize("text", [
    pytest.param(deployment(gpus="8", model=H100), id="a whole node"),
    pytest.param(job(gpus="0"), id="no GPUs"),
])
def test_a_pod_some_node_holds_is_not_reported(tmp_path, text):
    assert findings(tmp_path, text) == []


def test_without_a_cluster_nothing_is_said(tmp_path):
    assert findings(tmp_path, job(gpus="64"), cluster=None) == []
