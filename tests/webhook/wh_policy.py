"""A small, stable policy set and cluster for the webhook's tests (the library in policies/ may change)."""

from __future__ import annotations

import pathlib

POLICY = """\
gpu h100 { product "NVIDIA-H100-80GB-HBM3"  memory 80Gi }
topology fabric {
  rack   "topology.acme.io/rack"
  host   "kubernetes.io/hostname"
}
priority prod  500
priority batch 100 default

quota team-a {
  for namespace matches "team-a*"
  gpus 8
}

rule wants-an-owner {
  mode warn
  for gpus > 0 and not ("acme.io/owner" in labels)
  deny "GPU pods should name their owner in the acme.io/owner label; this message is long on purpose so that it exceeds one hundred and twenty characters"
}

rule notes-big-pods {
  mode audit
  for gpus >= 4
  deny "big pod"
}

rule label-team {
  for gpus > 0 and not ("team" in labels)
  set labels["team"] = namespace.labels["team"]
}
"""

QUOTA_4 = POLICY.replace("  gpus 8\n", "  gpus 4\n")
BROKEN = POLICY.replace("gpus 8", "gpus eight")

CLUSTER = """\
apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: Namespace
  metadata: {name: team-a, labels: {team: team-a}}
- apiVersion: v1
  kind: Node
  metadata:
    name: n1
    labels: {kubernetes.io/hostname: n1, topology.acme.io/rack: r1, nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3}
  status:
    allocatable: {nvidia.com/gpu: "8"}
    conditions: [{type: Ready, status: "True"}]
- apiVersion: v1
  kind: Pod
  metadata: {name: running, namespace: team-a}
  spec:
    nodeName: n1
    priorityClassName: batch
    containers: [{name: m, image: x, resources: {limits: {nvidia.com/gpu: "2"}}}]
  status: {phase: Running}
"""


def write(directory: pathlib.Path, policy: str = POLICY) -> tuple[pathlib.Path, pathlib.Path]:
    """(policy dir, cluster file) under `directory`."""
    pdir = directory / "policies"
    pdir.mkdir(parents=True, exist_ok=True)
    (pdir / "test.policy").write_text(policy)
    cluster = directory / "cluster.yaml"
    cluster.write_text(CLUSTER)
    return pdir, cluster
