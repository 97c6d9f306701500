"""`allot place` on a cluster without the default topology's labels, and with several workloads in one file."""

from __future__ import annotations

import json

import pytest
import yaml

from tests.policy.placement.placement_builders import BLOCK, HOST, RACK, node, pod
from webhook.cli import main


def _write(tmp_path, name, objs):
    path = tmp_path / name
    path.write_text(yaml.safe_dump_all(objs))
    return str(path)


def _bare(name, *, drop=(BLOCK, RACK), **kw):
    """A GPU node without some of the default topology's labels."""
    n = node(name, **kw)
    for label in drop:
        del n["metadata"]["labels"][label]
    return n


def _cluster(tmp_path, nodes):
    return _write(tmp_path, "cluster.yaml", [{"apiVersion": "v1", "kind": "List", "items": nodes}])


def _place(capsys, *argv):
    code = main(["place", *argv])
    captured = capsys.readouterr()
    return code, json.loads(captured.out), captured.err


def _gang(n, gpus):
    return [pod(f"w{i}", None, gpus=gpus) for i in range(n)]


@pytest.mark.parametrize("drop, want_level_note", [
    # hostname only: the gang is judged on the host level left
    ((BLOCK, RACK), f"no GPU node carries {BLOCK}, {RACK}: levels block, rack left out, the gang judged on host"),
    # no default label at all: judged node by node
    ((BLOCK, RACK, HOST), "levels block, rack, host left out, the gang judged node by node"),
], ids=["no-block-no-rack", "no-label-at-all"])
def test_a_gang_that_fits_fits_when_no_node_carries_the_default_labels(tmp_path, capsys, drop, want_level_note):
    cluster = _cluster(tmp_path, [_bare("n1", gpus=8, drop=drop), _bare("n2", gpus=8, drop=drop)])
    code, out, err = _place(capsys, "--cluster", cluster, _write(tmp_path, "gang.yaml", _gang(3, 4)))
    assert (code, out["fits"], sum(out["nodes"].values())) == (0, True, 3)
    assert list(out)[0] == "notes"  # said first
    note = out["notes"][0]
    assert note.startswith("no topology given (--policy DIR with a `topology` declaration, or --topology): used the default")
    missing = [label for label in (BLOCK, RACK, HOST) if label in drop]
    assert f"2 of 2 GPU nodes lack {', '.join(missing)}" in note
    assert "label the nodes" in note
    assert want_level_note in out["notes"][1]
    assert err.startswith("allot place: note: no topology given")  # a person reading the terminal sees it too


def test_partly_labelled_nodes_are_named_and_the_levels_kept(tmp_path, capsys):
    cluster = _cluster(tmp_path, [node("a1", gpus=8), _bare("n2", gpus=8)])
    code, out, _ = _place(capsys, "--cluster", cluster, _write(tmp_path, "gang.yaml", _gang(3, 4)))
    assert code == 3 and out["topology"] == "default"
    # n2 has the hostname label: the reason does not say it lacks all three
    assert out["reason"].endswith(f"(2 more on GPU nodes lacking one or more of its labels {BLOCK}, {RACK}, {HOST})")
    assert out["notes"] == [
        "no topology given (--policy DIR with a `topology` declaration, or --topology): used the default "
        f"(block {BLOCK}, rack {RACK}, host {HOST}); 1 of 2 GPU nodes lack {BLOCK}, {RACK}: they hold no pods of it. "
        "Give --policy DIR with a `topology` declaration, or label the nodes"]


def test_a_required_level_no_node_carries_is_kept_and_said(tmp_path, capsys):
    cluster = _cluster(tmp_path, [_bare("n1", gpus=8), _bare("n2", gpus=8)])
    code, out, _ = _place(capsys, "--cluster", cluster, "--required", "rack", _write(tmp_path, "gang.yaml", _gang(1, 4)))
    assert code == 3 and out["request"]["required"] == "rack"
    assert out["notes"][1:] == [f"no GPU node carries {RACK} (level rack), which the gang requires: no rack can hold it",
                                f"no GPU node carries {BLOCK}: level block left out, the gang judged on rack, host"]


@pytest.mark.parametrize("flags", [[], ["--topology", f"rack={RACK},host={HOST}"]], ids=["default-labelled", "own-topology"])
def test_no_note_when_the_labels_are_there_or_the_topology_is_given(tmp_path, capsys, flags):
    cluster = _cluster(tmp_path, [node("a1", gpus=8), node("a2", gpus=8)])
    code, out, err = _place(capsys, "--cluster", cluster, *flags, _write(tmp_path, "gang.yaml", _gang(3, 4)))
    assert (code, out["notes"], err) == (0, [], "")


def _job(name, pods, gpus):
    tpl = {"spec": {"containers": [{"name": "m", "image": "x", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]}}
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "namespace": "team-a"},
            "spec": {"parallelism": pods, "completions": pods, "template": tpl}}


def _group(name, members):
    return {"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
            "metadata": {"name": name, "namespace": "team-a"}, "spec": {"minMember": members}}


def _member(name, group, gpus):
    p = pod(name, None, gpus=gpus)
    p["metadata"]["labels"] = {"scheduling.x-k8s.io/pod-group": group}
    return p


def _kueue(name, group, total, gpus):
    p = pod(name, None, gpus=gpus)
    p["metadata"]["labels"] = {"kueue.x-k8s.io/pod-group-name": group}
    p["metadata"]["annotations"] = {"kueue.x-k8s.io/pod-group-total-count": str(total)}
    return p


@pytest.mark.parametrize("objs, want", [
    # two Jobs: each judged on its own against the same cluster, in the file's order
    ([_job("small", 2, 4), _job("big", 4, 8)], [("Job team-a/small", True, 2), ("Job team-a/big", False, 0)]),
    ([_job("a", 2, 8), _job("b", 2, 8)], [("Job team-a/a", True, 2), ("Job team-a/b", True, 2)]),
    # two PodGroups, each with the pods that name it (in any order in the file)
    ([_group("g1", 2), _member("x0", "g2", 8), _group("g2", 3), _member("y0", "g1", 2), _member("y1", "g1", 2),
      _member("x1", "g2", 8), _member("x2", "g2", 8)],
     [("PodGroup team-a/g1", True, 2), ("PodGroup team-a/g2", False, 0)]),
    # no group object: Kueue plain pod groups, by the group each pod names
    ([_kueue("a0", "g1", 2, 8), _kueue("b0", "g2", 3, 8), _kueue("a1", "g1", 2, 8)],
     [("pod group team-a/g1", True, 2), ("pod group team-a/g2", False, 0)]),
], ids=["jobs", "jobs-fit", "pod-groups", "kueue-pod-groups"])
def test_each_workload_of_a_file_gets_its_answer(tmp_path, capsys, objs, want):
    cluster = _cluster(tmp_path, [node("a1", gpus=8), node("a2", gpus=8)])
    code, out, _ = _place(capsys, "--cluster", cluster, _write(tmp_path, "gang.yaml", objs))
    assert isinstance(out, list)
    assert [(a["workload"], a["fits"], sum(a["nodes"].values())) for a in out] == want
    assert code == (0 if all(fits for _w, fits, _n in want) else 3)


def test_one_workload_is_one_answer_as_before(tmp_path, capsys):
    cluster = _cluster(tmp_path, [node("a1", gpus=8), node("a2", gpus=8)])
    code, out, _ = _place(capsys, "--cluster", cluster, _write(tmp_path, "gang.yaml", [_job("only", 2, 8)]))
    assert code == 0 and isinstance(out, dict) and out["workload"] == "Job team-a/only"


def test_a_pod_of_no_workload_in_the_file_is_a_usage_error(tmp_path, capsys):
    cluster = _cluster(tmp_path, [node("a1", gpus=8)])
    objs = [_group("g1", 1), _group("g2", 1), _member("x0", "g1", 1), _member("stray", "g9", 1)]
    assert main(["place", "--cluster", cluster, _write(tmp_path, "gang.yaml", objs)]) == 2
    err = capsys.readouterr().err
    assert "pod team-a/stray belongs to none of the 2 workloads in" in err and "PodGroup team-a/g1, PodGroup team-a/g2" in err
