"""Builders for lint tests: a small policy set and manifests of real object shapes, as YAML text."""

from __future__ import annotations

import textwrap

POLICY = """\
gpu h100 { product "NVIDIA-H100-80GB-HBM3" memory 80Gi }
topology fabric {
  rack "topology.acme.io/rack"
  host "kubernetes.io/hostname"
}
priority batch 100 default
quota team {
  for namespace == "team"
  gpus 8
}
rule needs-model {
  mode warn
  for gpus > 0
  when not has(gpu_model)
  deny "{name}: pin a GPU model"
}
rule team-label {
  mode warn
  for gpus > 0 and not ("team" in labels)
  set labels["team"] = namespace
}
rule no-huge {
  for gpus > 4
  deny "{name}: more than 4 GPUs per pod"
}
gang racks {
  for kind == "JobSet"
  require topology fabric.rack
  on unplaceable deny
}
"""


def write_policy(tmp_path, text: str = POLICY) -> str:
    """A policy directory holding `text`."""
    d = tmp_path / "policy"
    d.mkdir(exist_ok=True)
    (d / "a.policy").write_text(text)
    return str(d)


def deployment(name="web", ns="team", gpus="1", replicas=1, model=None, labels=None) -> str:
    """A Deployment asking `gpus` per replica, optionally pinned to a GPU product."""
    lines = ["apiVersion: apps/v1", "kind: Deployment", "metadata:", f"  name: {name}", f"  namespace: {ns}",
             "  labels:", f"    app: {name}"]
    lines += [f"    {k}: {v}" for k, v in (labels or {}).items()]
    lines += ["spec:", f"  replicas: {replicas}", "  template:", "    spec:"]
    if model:
        lines += ["      nodeSelector:", f"        nvidia.com/gpu.product: {model}"]
    lines += ["      containers:", "      - name: main", f"        image: registry.example/{name}:1",
              "        resources:", "          limits:", f'            nvidia.com/gpu: "{gpus}"']
    return "\n".join(lines) + "\n"


def job(name="batch", ns="team", gpus="1", parallelism=1) -> str:
    """A batch/v1 Job."""
    return textwrap.dedent(f"""\
        apiVersion: batch/v1
        kind: Job
        metadata:
          name: {name}
          namespace: {ns}
        spec:
          parallelism: {parallelism}
          template:
            spec:
              restartPolicy: Never
              containers:
              - name: work
                image: registry.example/batch:1
                resources:
                  limits: {{nvidia.com/gpu: "{gpus}"}}
        """)


def jobset(name="train", ns="team", gpus="1", replicas=2) -> str:
    """A JobSet of `replicas` worker Jobs of 2 pods, pinned to H100."""
    return textwrap.dedent(f"""\
        apiVersion: jobset.x-k8s.io/v1alpha2
        kind: JobSet
        metadata:
          name: {name}
          namespace: {ns}
        spec:
          replicatedJobs:
          - name: workers
            replicas: {replicas}
            template:
              spec:
                parallelism: 2
                completions: 2
                template:
                  spec:
                    nodeSelector:
                      nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3
                    containers:
                    - name: trainer
                      image: registry.example/train:1
                      resources:
                        limits: {{nvidia.com/gpu: "{gpus}"}}
        """)


def line_of(text: str, needle: str, start: int = 1) -> int:
    """The 1-based line of the first line at or after `start` that contains `needle`."""
    for i, line in enumerate(text.splitlines(), 1):
        if i >= start and needle in line:
            return i
    raise AssertionError(f"{needle!r} not in the text")
