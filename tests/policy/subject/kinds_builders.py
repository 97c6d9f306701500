"""Builders of KAITO Workspaces and instance-typed Nodes for the workload-kind tests (others may import these)."""

from __future__ import annotations

from tests.policy.builders import meta, node

INSTANCE_TYPE = "node.kubernetes.io/instance-type"


def typed_node(name, instance_type, gpus="8", product="NVIDIA-H100-80GB-HBM3", labels=None) -> dict:
    """A GPU Node labelled with its cloud instance type, as the cloud provider labels it."""
    return node(name, product=product, gpus=gpus, labels={INSTANCE_TYPE: instance_type, **(labels or {})})


def workspace(name="ws", namespace="serving", api="kaito.sh/v1beta1", *, count=None, instance_type=None,
              match_labels=None, partition=None, preset=None, template=None, tuning=None, status=None) -> dict:
    """A KAITO Workspace: `resource` at the top, with `inference` (a preset name or a pod template) and/or `tuning`."""
    resource: dict = {"labelSelector": {"matchLabels": dict(match_labels or {"apps": name})}}
    if count is not None:
        resource["count"] = count
    if instance_type is not None:
        resource["instanceType"] = instance_type
    if partition is not None:
        resource["partition"] = dict(partition)
    ws = {"apiVersion": api, "kind": "Workspace", "metadata": meta(name, namespace), "resource": resource}
    if preset is not None or template is not None:
        ws["inference"] = {"preset": {"name": preset}} if template is None else {"template": template}
    if tuning is not None:
        ws["tuning"] = {"preset": {"name": tuning}, "method": "lora", "input": {"urls": ["https://example.com/d.parquet"]},
                        "output": {"image": "registry.acme.io/out:1", "imagePushSecret": "push"}}
    if status is not None:
        ws["status"] = dict(status)
    return ws
