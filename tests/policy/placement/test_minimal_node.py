"""The minimum a Node needs in a cluster snapshot to take gang pods, as docs/dialects.md lists it:
each field left out makes the same one-GPU gang not fit (a table of one-field removals)."""

from __future__ import annotations

import copy
import json

import pytest
import yaml

from webhook.cli import main

MINIMAL = {
    "kind": "Node",
    "metadata": {"name": "n1", "labels": {
        "kubernetes.io/hostname": "n1", "topology.acme.io/rack": "r1", "topology.acme.io/block": "b1",
        "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}},
    "status": {"allocatable": {"nvidia.com/gpu": "8"}, "conditions": [{"type": "Ready", "status": "True"}]},
}
GANG = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "w0", "namespace": "t"},
        "spec": {"nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
                 "containers": [{"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "2"}}}]}}
DECLARED = "block=topology.acme.io/block,rack=topology.acme.io/rack,host=kubernetes.io/hostname"


def _drop(path: str):
    def edit(node):
        *parents, leaf = path.split("/")
        at = node
        for p in parents:
            at = at[p]
        del at[leaf]
    return edit


def _capacity_instead(node):
    node["status"]["capacity"] = node["status"].pop("allocatable")


REMOVALS = [
    # (name, edit of the minimal node, want fits)
    ("the minimal node", None, True),
    ("capacity when allocatable is absent", _capacity_instead, True),
    ("no GPU count", _drop("status/allocatable"), False),
    ("no Ready condition", _drop("status/conditions"), False),
    ("no hostname label (the host level)", lambda n: n["metadata"]["labels"].pop("kubernetes.io/hostname"), False),
    ("no rack label (a wider level)", lambda n: n["metadata"]["labels"].pop("topology.acme.io/rack"), False),
    ("no product label, for a pod pinned to a model", lambda n: n["metadata"]["labels"].pop("nvidia.com/gpu.product"), False),
]


@pytest.mark.parametrize("name,edit,want_fits", REMOVALS, ids=[r[0] for r in REMOVALS])
def test_minimum_node_fields(tmp_path, capsys, name, edit, want_fits):
    node = copy.deepcopy(MINIMAL)
    if edit is not None:
        edit(node)
    (tmp_path / "c.yaml").write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": [node]}))
    (tmp_path / "g.yaml").write_text(yaml.safe_dump(GANG))
    # a declared topology, as the docs' table says (the default one leaves out a level no node carries the label of)
    code = main(["place", "--cluster", str(tmp_path / "c.yaml"), "--topology", DECLARED, "--required", "host", str(tmp_path / "g.yaml")])
    out = json.loads(capsys.readouterr().out)
    assert (code, out["fits"]) == ((0, True) if want_fits else (3, False)), out["reason"]


def test_a_node_without_metadata_name_is_refused(tmp_path, capsys):
    node = copy.deepcopy(MINIMAL)
    del node["metadata"]["name"]
    (tmp_path / "c.yaml").write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": [node]}))
    (tmp_path / "g.yaml").write_text(yaml.safe_dump(GANG))
    assert main(["place", "--cluster", str(tmp_path / "c.yaml"), str(tmp_path / "g.yaml")]) == 2
    assert "Node has no metadata.name" in capsys.readouterr().err


def test_quota_usage_needs_no_node(tmp_path, capsys):
    """Quotas charge pods, not nodes: a snapshot of pods alone is enough for quota decisions."""
    busy = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "busy", "namespace": "team-a"},
            "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "4"}}}]},
            "status": {"phase": "Running"}}
    (tmp_path / "c.yaml").write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": [busy]}))
    (tmp_path / "q.policy").write_text('quota team-a {\n  for namespace == "team-a"\n  gpus 4\n}\n')
    new = {**busy, "metadata": {"name": "p", "namespace": "team-a"}, "spec": {"containers": busy["spec"]["containers"]}}
    new["spec"]["containers"] = [{"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(new))
    argv = ["eval", "--policy", str(tmp_path / "q.policy"), "--cluster", str(tmp_path / "c.yaml"), "--now", "0", str(tmp_path / "p.yaml")]
    assert main(argv) == 3
    assert "4 in use + 1 requested > 4 nominal" in capsys.readouterr().out
