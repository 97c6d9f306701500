"""`allot eval`: exit codes (0 allowed, 3 denied, 1 policy errors, 2 usage) and output shapes."""

from __future__ import annotations

import base64
import json

import pytest
import yaml
from tests.policy.engine.engine_builders import pod

from policy.admission import wrap_manifest
from webhook.cli import main

POLICY = """
priority batch 100 default
quota solo {
  for namespace == "solo"
  gpus 4
}
rule no-sleepers {
  for labels["agents.acme.io/state"] == "sleeping"
  when gpus > 0
  deny "a sleeping agent holds {gpus} GPUs"
}
"""


@pytest.fixture
def files(tmp_path):
    (tmp_path / "p").mkdir()
    (tmp_path / "p" / "a.policy").write_text(POLICY)
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "a.policy").write_text("quota x {\n  gpus \"four\"\n}\n")

    def write(name, obj, as_json=False):
        path = tmp_path / name
        path.write_text(json.dumps(obj) if as_json else yaml.safe_dump(obj))
        return str(path)

    return tmp_path, write


@pytest.mark.parametrize(
    "gpus, labels, extra, want_exit",
    [
        (2, None, [], 0),
        (5, None, [], 3),
        (1, {"agents.acme.io/state": "sleeping"}, [], 3),
        (1, None, ["--operation", "delete"], 0),
    ],
)
def test_exit_codes(files, capsys, gpus, labels, extra, want_exit):
    root, write = files
    req = write("pod.yaml", pod("x", "solo", gpus=gpus, labels=labels))
    assert main(["eval", "--policy", str(root / "p"), *extra, req]) == want_exit
    out = json.loads(capsys.readouterr().out)
    assert out["kind"] == "AdmissionReview" and out["response"]["allowed"] is (want_exit == 0)


def test_policy_errors_exit_1(files, capsys):
    root, write = files
    assert main(["eval", "--policy", str(root / "bad"), write("pod.yaml", pod(gpus=1))]) == 1
    assert "error" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv_tail, content",
    [
        (["missing.yaml"], None),
        (["req.yaml"], "a: [unclosed"),
        (["req.yaml"], "- 1\n- 2\n"),
        (["req.yaml"], {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {}}),
    ],
)
def test_usage_errors_exit_2_with_one_line(files, capsys, argv_tail, content):
    root, _ = files
    if content is not None:
        (root / "req.yaml").write_text(content if isinstance(content, str) else json.dumps(content))
    code = main(["eval", "--policy", str(root / "p"), *[str(root / a) for a in argv_tail]])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("allot eval: error:") and err.count("\n") == 1 and "Traceback" not in err


def test_full_review_and_mutate_patch(files, capsys):
    root, write = files
    review = wrap_manifest(pod("x", "solo", gpus=1), user="bob", groups=["g"], operation="CREATE")
    assert main(["eval", "--policy", str(root / "p"), "--mutate", write("review.json", review, as_json=True)]) == 0
    resp = json.loads(capsys.readouterr().out)["response"]
    assert resp["uid"] == review["request"]["uid"]
    patch = json.loads(base64.b64decode(resp["patch"]))
    assert {"op": "add", "path": "/spec/priorityClassName", "value": "batch"} in patch


def test_explain_prints_blocks_arithmetic_and_source(files, capsys):
    root, write = files
    assert main(["eval", "--policy", str(root / "p"), "--explain", "--now", "0", write("pod.yaml", pod("x", "solo", gpus=5))]) == 3
    out = capsys.readouterr().out
    assert "quota solo" in out and "0 in use + 5 requested > 4 nominal + 0 borrowable" in out
    assert "| quota solo {" in out and "decision  DENIED" in out


@pytest.mark.parametrize(
    "user, want",
    [
        ("kubernetes-admin", ("system:masters", "system:authenticated")),
        ("system:serviceaccount:agents-1:bot", ("system:serviceaccounts", "system:serviceaccounts:agents-1", "system:authenticated")),
        ("alice", ("system:authenticated",)),
    ],
)
def test_default_groups_follow_the_user(user, want):
    from webhook.cli.eval import default_groups

    assert default_groups(user) == want


def test_explain_json(files, capsys):
    root, write = files
    argv = ["eval", "--policy", str(root / "p"), "--explain", "--format", "json", write("pod.yaml", pod("x", "solo", gpus=5))]
    assert main(argv) == 3
    out = json.loads(capsys.readouterr().out)
    assert out["decision"]["allowed"] is False
    assert out["decision"]["reasons"][0]["data"] == {"used": 0, "requested": 5000, "nominal": 4000, "borrowable": 0}
    assert any(step["block"] == "quota solo" for step in out["trace"])


SLICES = """
gpu h100 { product "NVIDIA-H100-80GB-HBM3" memory 80Gi }
fraction slices {
  for namespace == "team"
  memory at least 10Gi
}
quota team {
  for namespace == "team"
  gpus 8
  gpu_memory 7Gi
}
"""

# A KAI share of 0.09 of an 80Gi H100: 7,730,941,132 bytes, which no binary unit divides.
SHARE = """\
apiVersion: v1
kind: Pod
metadata: {name: p, namespace: team, annotations: {gpu-fraction: "0.09"}}
spec:
  schedulerName: kai-scheduler
  nodeSelector: {nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3}
  containers: [{name: main}]
"""


def _share(tmp_path, *extra):
    (tmp_path / "s.policy").write_text(SLICES)
    (tmp_path / "pod.yaml").write_text(SHARE)
    return ["eval", "--policy", str(tmp_path / "s.policy"), "--explain", *extra, str(tmp_path / "pod.yaml")]


def test_explain_text_prints_bytes_in_binary_units(tmp_path, capsys):
    assert main(_share(tmp_path)) == 3
    out = capsys.readouterr().out
    assert "gpu_memory=7.2Gi " in out
    assert "GPU memory 7.2Gi < floor 10Gi" in out and "+ 7.2Gi requested > 7Gi nominal" in out
    assert "7730941132" not in out


def test_explain_json_keeps_the_exact_bytes(tmp_path, capsys):
    assert main(_share(tmp_path, "--format", "json")) == 3
    reasons = json.loads(capsys.readouterr().out)["decision"]["reasons"]
    data = {r["code"]: r["data"] for r in reasons}
    assert data["FractionMemoryBelowFloor"]["gpu_memory"] == 7730941132
    assert data["QuotaMemoryExceeded"]["requested"] == 7730941132


def test_a_deny_message_template_prints_bytes_in_binary_units(tmp_path, capsys):
    (tmp_path / "s.policy").write_text(SLICES + 'rule small {\n  for has(gpu_memory)\n  when gpu_memory < 10Gi\n'
                                       '  deny "{name}: {gpu_memory} is too little"\n}\n')
    (tmp_path / "pod.yaml").write_text(SHARE)
    assert main(["eval", "--policy", str(tmp_path / "s.policy"), str(tmp_path / "pod.yaml")]) == 3
    message = json.loads(capsys.readouterr().out)["response"]["status"]["message"]
    assert "p: 7.2Gi is too little" in message


def _claiming_pod() -> dict:
    p = pod("x", None, spec={"resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "eight"}]})
    del p["metadata"]["namespace"]
    return p


def test_namespace_judges_a_manifest_naming_none_there(files, capsys):
    root, write = files
    template = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate", "metadata": {"name": "eight", "namespace": "solo"},
                "spec": {"spec": {"devices": {"requests": [{"name": "g", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 8}}]}}}}
    cluster = write("cluster.yaml", {"apiVersion": "v1", "kind": "List", "items": [template]})
    req = write("pod.yaml", _claiming_pod())
    # in solo its claim template asks 8 GPUs: over the 4 of quota solo
    assert main(["eval", "--policy", str(root / "p"), "--cluster", cluster, "--namespace", "solo", "--explain", req]) == 3
    assert "8 requested > 4 nominal" in capsys.readouterr().out
    main(["eval", "--policy", str(root / "p"), "--cluster", cluster, req])  # in default there is no such template
    assert "ResourceClaimTemplate 'eight' is not in the cluster state" in capsys.readouterr().out


@pytest.mark.parametrize("doc", [
    pytest.param(lambda: pod("x", "other", gpus=1), id="manifest naming another namespace"),
    pytest.param(lambda: wrap_manifest(pod("x", "solo", gpus=1), user="bob", groups=[], operation="CREATE"), id="admission review"),
])
def test_namespace_against_the_documents_own_is_a_usage_error(files, capsys, doc):
    root, write = files
    assert main(["eval", "--policy", str(root / "p"), "--namespace", "solo", write("req.json", doc(), as_json=True)]) == 2
    assert "--namespace" in capsys.readouterr().err
