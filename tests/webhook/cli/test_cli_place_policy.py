"""`allot place --policy DIR`: the level comes from flags, else the manifest, else the matching gang block (gang view)."""

from __future__ import annotations

import json

import pytest
import yaml
from tests.policy.placement.placement_builders import node

from webhook.cli import main

DECLS = (
    'gpu h100 { product "NVIDIA-H100-80GB-HBM3" memory 80Gi }\n'
    'topology fabric {\n  block "topology.acme.io/block"\n  rack "topology.acme.io/rack"\n  host "kubernetes.io/hostname"\n}\n'
)
GANGS = """gang inference {
  for labels["acme.io/workload"] == "inference"
  require topology fabric.host
}

gang training {
  for labels["acme.io/workload"] == "training"
  require min_members
  require topology fabric.rack when total_gpus > 8
  require topology fabric.block when total_gpus > 16
  on unplaceable deny
}
"""


def _member(name, gpus, total=None, workload="training", annotations=None):
    meta = {"name": name, "namespace": "team-a", "labels": {"acme.io/workload": workload}, "annotations": dict(annotations or {})}
    if total is not None:
        meta["labels"]["kueue.x-k8s.io/pod-group-name"] = "g"
        meta["annotations"]["kueue.x-k8s.io/pod-group-total-count"] = str(total)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
            "spec": {"containers": [{"name": "w", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]}}


def _run(tmp_path, capsys, objs, flags=()):
    policies = tmp_path / "policies"
    policies.mkdir(exist_ok=True)
    (policies / "cluster.policy").write_text(DECLS)
    (policies / "gangs.policy").write_text(GANGS)
    # Racks of two 8-GPU hosts in two blocks: a rack holds 16, a block 32.
    nodes = [node(f"{b}{r}{h}", block=b, rack=f"{b}-{r}", gpus=8) for b in ("b1", "b2") for r in ("r1", "r2") for h in (1, 2)]
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": nodes}))
    gang = tmp_path / "gang.yaml"
    gang.write_text(yaml.safe_dump_all(objs))
    code = main(["place", "--cluster", str(cluster), "--policy", str(policies), *flags, str(gang)])
    return code, json.loads(capsys.readouterr().out)


@pytest.mark.parametrize(
    "objs, flags, want_level, want_from, want_block, want_line",
    [
        # A member of a 2 x 8 pod group: its gang view has 16 GPUs > 8 -> rack (line 9).
        ([_member("m0", 8, total=2)], (), "rack", "policy", "gang training", 9),
        # 3 x 8 = 24 > 16: the last matching requirement wins -> block (line 10).
        ([_member("m0", 8, total=3)], (), "block", "policy", "gang training", 10),
        # Three pods listed, no declared minimum: the listed pods are the gang (24 GPUs).
        ([_member(f"m{i}", 8) for i in range(3)], (), "block", "policy", "gang training", 10),
        # 2 x 4 = 8: the training block selects it but requires nothing.
        ([_member("m0", 4, total=2)], (), None, "none", None, None),
        # Another block's unconditional requirement (line 3).
        ([_member("m0", 1, workload="inference")], (), "host", "policy", "gang inference", 3),
        # The manifest says (Kueue's annotation): the policy is not asked.
        ([_member("m0", 8, total=2, annotations={"kueue.x-k8s.io/podset-required-topology": "topology.acme.io/block"})],
         (), "block", "manifest", None, None),
        # Flags beat both.
        ([_member("m0", 8, total=2)], ("--required", "block"), "block", "flags", None, None),
    ],
    ids=["rack-by-gang-view", "block-last-wins", "listed-pods", "no-requirement", "other-block", "manifest", "flags"],
)
def test_place_takes_the_level_from_the_matching_gang_block(tmp_path, capsys, objs, flags, want_level, want_from, want_block, want_line):
    code, out = _run(tmp_path, capsys, objs, flags)
    assert code == 0 and out["fits"] is True
    assert out["request"]["required"] == want_level
    assert out["level_from"] == want_from
    if want_block is None:
        assert out["decided_by"] is None
    else:
        assert out["decided_by"].startswith(f"{want_block} (") and f"gangs.policy:{want_line}:" in out["decided_by"]
        assert f"require topology fabric.{want_level}" in out["decided_by"]
    if want_level is not None:
        assert out["level"] == want_level


def test_a_gang_the_policy_requires_in_one_rack_does_not_fit_when_no_rack_can_hold_it(tmp_path, capsys):
    code, out = _run(tmp_path, capsys, [_member("m0", 8, total=5)])  # 40 GPUs > any block's 32
    assert code == 3 and out["level_from"] == "policy" and out["request"]["required"] == "block"
    assert "no block" in out["reason"]


def _podgroup(name, min_member, gpus=None, tasks=None):
    spec = {"minMember": min_member}
    if gpus is not None:
        spec["minResources"] = {"nvidia.com/gpu": str(gpus)}
    api = "scheduling.x-k8s.io/v1alpha1"
    if tasks is not None:
        spec["minTaskMember"] = dict(tasks)
        api = "scheduling.volcano.sh/v1beta1"
    return {"apiVersion": api, "kind": "PodGroup",
            "metadata": {"name": name, "namespace": "team-a", "labels": {"acme.io/workload": "training"}}, "spec": spec}


def _pg_member(name, group, gpus, task=None):
    pod = _member(name, gpus)
    if task is None:
        pod["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"] = group
    else:
        pod["metadata"]["annotations"].update({"scheduling.k8s.io/group-name": group, "volcano.sh/task-spec": task})
    return pod


@pytest.mark.parametrize(
    "objs, want_code, want_level, want_pods, want_total",
    [
        # Problem 3: a PodGroup file alone places (it used to say "declares no pod sets", exit 2).
        ([_podgroup("pg", 2, gpus=16)], 0, "rack", 2, "16"),
        # A group object plus its members: total_gpus is the gang's 4 x 4 = 16 > 8, so a rack (it was 0: no requirement).
        ([_podgroup("pg", 4), *(_pg_member(f"pg-{i}", "pg", 4) for i in range(4))], 0, "rack", 4, "16"),
        # Five 4-GPU members need 20 > a rack's 16 and 20 > 16: a block.
        ([_podgroup("pg", 5), *(_pg_member(f"pg-{i}", "pg", 4) for i in range(5))], 0, "block", 5, "20"),
        # A GPU-less PodGroup: nothing to place, as admission passes it.
        ([_podgroup("cpu", 3)], 0, None, 3, "0"),
    ],
    ids=["podgroup-alone", "group-plus-members", "group-plus-members-block", "gpu-less"],
)
def test_a_group_file_is_judged_as_admission_judges_it(tmp_path, capsys, objs, want_code, want_level, want_pods, want_total):
    code, out = _run(tmp_path, capsys, objs)
    assert code == want_code and out["fits"] is True
    assert out["level"] == want_level
    assert (out["request"]["pods"], out["request"]["total_gpus"]) == (want_pods, want_total)


def test_pod_sets_are_trimmed_by_their_own_minimum_whatever_the_order(tmp_path, capsys):
    """A Volcano master (1 GPU) and two workers (8): 17 GPUs, whichever order the file lists them."""
    master, workers = _pg_member("m-0", "job", 1, "master"), [_pg_member(f"w-{i}", "job", 8, "worker") for i in range(2)]
    group = _podgroup("job", 3, tasks={"master": 1, "worker": 2})
    answers = []
    for objs in ([group, master, *workers], [group, *reversed(workers), master], [*workers, master, group]):
        code, out = _run(tmp_path, capsys, objs)
        answers.append((code, out["level"], out["domain"], out["request"]["total_gpus"],
                        sorted((s["name"], s["pods"], s["gpus"]) for s in out["request"]["pod_sets"])))
    assert answers[0] == answers[1] == answers[2]
    assert answers[0][3] == "17" and answers[0][4] == [("master", 1, "1"), ("worker", 2, "8")]
    assert answers[0][1] == "block"  # 17 > 16: the rack rule's last match (line 10) asks for a block
