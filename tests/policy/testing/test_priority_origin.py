"""A priority class taken from the cluster's `globalDefault` PriorityClass is named as such by
`allot eval --explain` and by a failed `allot test` case, not left to look like the pod's own choice."""

import json

import pytest

from lang import compile_policies
from policy.cluster.snapshot import ClusterSnapshot
from policy.blocks.priority_origin import global_default_note
from webhook.cli import main

POLICY = "priority batch 100 default\npriority prod 1000\n"


def pclass(name: str, value: int, default: bool) -> dict:
    return {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name},
            "value": value, "globalDefault": default}


def gpu_pod(**spec) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ml"},
            "spec": {"containers": [{"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "1"}}}], **spec}}


PRIORITIES = compile_policies([("p.policy", POLICY)])[0].priorities

NOTES = [
    # (name, cluster objects, the request object, want substrings (None = no note))
    ("globalDefault class not declared", [pclass("cluster-low", 10, True)], gpu_pod(),
     ["globalDefault PriorityClass cluster-low (10)", "the policy's default batch does not apply",
      "cluster-low is not declared by the policy"]),
    ("globalDefault class declared by the policy", [pclass("prod", 1000, True)], gpu_pod(),
     ["globalDefault PriorityClass prod (1000)", "the policy's default batch does not apply"]),
    ("the lowest of two globalDefault classes, as the Priority plugin picks", [pclass("a", 5, True), pclass("b", 7, True)], gpu_pod(),
     ["globalDefault PriorityClass a (5)"]),
    ("no globalDefault class", [pclass("cluster-low", 10, False)], gpu_pod(), None),
    ("the pod names its class", [pclass("cluster-low", 10, True)], gpu_pod(priorityClassName="prod"), None),
    ("the Priority plugin already set a value", [pclass("cluster-low", 10, True)], gpu_pod(priority=10), None),
    ("not a pod", [pclass("cluster-low", 10, True)], {"kind": "PodGroup", "metadata": {"name": "g"}}, None),
    ("no object", [pclass("cluster-low", 10, True)], None, None),
]


@pytest.mark.parametrize("name,objects,obj,want", NOTES, ids=[n[0] for n in NOTES])
def test_global_default_note(name, objects, obj, want):
    note = global_default_note(obj, ClusterSnapshot.from_objects(objects), PRIORITIES)
    if want is None:
        assert note is None
    else:
        assert note is not None and all(w in note for w in want), note


def test_the_policy_default_alone_gives_no_note():
    note = global_default_note(gpu_pod(), ClusterSnapshot.from_objects([]), PRIORITIES)
    assert note is None


@pytest.fixture
def tree(tmp_path, monkeypatch):
    import yaml

    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "p.policy").write_text(POLICY)
    (tmp_path / "d" / "c.yaml").write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": [pclass("cluster-low", 10, True)]}))
    (tmp_path / "d" / "pod.yaml").write_text(yaml.safe_dump(gpu_pod()))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_a_failed_case_says_the_class_came_from_global_default(tree, capsys):
    (tree / "d" / "x.test.yaml").write_text(
        "cluster: c.yaml\ncases:\n  - name: gets batch\n"
        f"    request: {json.dumps(gpu_pod())}\n    expect: {{allowed: true}}\n")
    assert main(["test", "d"]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert "FAIL d/x.test.yaml::gets batch" in lines
    [note] = [line for line in lines if line.startswith("  note: ")]
    assert "globalDefault PriorityClass cluster-low (10)" in note and "the policy's default batch does not apply" in note


def test_a_passing_case_carries_no_note(tree, capsys):
    (tree / "d" / "x.test.yaml").write_text(
        "cluster: c.yaml\ncases:\n  - name: denied\n"
        f"    request: {json.dumps(gpu_pod())}\n    expect: {{allowed: false, codes: [UnknownPriorityClass]}}\n")
    assert main(["test", "d"]) == 0
    assert "note:" not in capsys.readouterr().out


def test_explain_text_and_json_say_so(tree, capsys):
    argv = ["eval", "--policy", "d", "--cluster", "d/c.yaml", "--now", "0", "--explain", "d/pod.yaml"]
    assert main(argv) == 3
    out = capsys.readouterr().out
    assert "priority  the pod names no priority class, so the cluster's globalDefault PriorityClass cluster-low (10)" in out
    assert main([*argv, "--format", "json"]) == 3
    notes = json.loads(capsys.readouterr().out)["notes"]
    assert len(notes) == 1 and "cluster-low (10)" in notes[0]


def test_explain_without_global_default_has_no_note(tree, capsys):
    assert main(["eval", "--policy", "d", "--now", "0", "--explain", "--format", "json", "d/pod.yaml"]) == 0
    assert json.loads(capsys.readouterr().out)["notes"] == []
