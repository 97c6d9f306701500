"""`allot place` and `allot bench place` through the real CLI entry point."""

from __future__ import annotations

import json

import pytest
import yaml
from tests.policy.placement.placement_builders import node, pod

from webhook.cli import main


def _write(tmp_path, name, objs):
    path = tmp_path / name
    path.write_text(yaml.safe_dump_all(objs))
    return str(path)


def _cluster(tmp_path):
    items = [node("a1", rack="r1"), node("a2", rack="r1"), node("b1", rack="r2", gpus=8)]
    items.append(pod("busy", "a1", gpus=3))
    return _write(tmp_path, "cluster.yaml", [{"apiVersion": "v1", "kind": "List", "items": items}])


def _members(n, gpus=2, group=None):
    labels = {"scheduling.x-k8s.io/pod-group": group} if group else {}
    out = []
    for i in range(n):
        p = pod(f"w{i}", None, gpus=gpus)
        p["metadata"]["labels"] = labels
        out.append(p)
    return out


GROUP = {"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
         "metadata": {"name": "train", "namespace": "team-a"}, "spec": {"minMember": 2}}


@pytest.mark.parametrize(
    "objs,flags,want_exit,want_domain,want_pods",
    [
        (_members(3), ["--required", "rack"], 0, "b1-r2", 3),
        (_members(3), ["--required", "host"], 0, "b1", 3),
        (_members(5), ["--required", "host"], 3, None, 0),
        ([GROUP, *_members(5, group="train")], ["--required", "host"], 0, "a2", 2),
        (_members(2), ["--topology", "rack=topology.acme.io/rack,host=kubernetes.io/hostname", "--required", "rack"], 0, None, 2),
    ],
    ids=["rack", "host", "too-big", "min-member", "custom-topology"],
)
def test_place(tmp_path, capsys, objs, flags, want_exit, want_domain, want_pods):
    code = main(["place", "--cluster", _cluster(tmp_path), *flags, _write(tmp_path, "gang.yaml", objs)])
    out = json.loads(capsys.readouterr().out)
    assert code == want_exit
    assert out["fits"] is (want_exit == 0)
    assert sum(out["nodes"].values()) == want_pods
    if want_domain is not None:
        assert out["domain"] == want_domain
    assert out["reason"]
    if want_exit == 3:
        assert "no host" in out["reason"] and "fits 8 of 5" not in out["reason"]


@pytest.mark.parametrize(
    "args,want_in_err",
    [
        (["--cluster", "missing.yaml"], "no such cluster-state file"),
        (["--topology", "block"], "not declared"),
        (["--topology", "a=b,a=c"], "appears twice"),
        (["--required", "zone"], "not a level of topology"),
        (["--per-gpu", "0"], "--per-gpu 0"),
        (["--now", "nan"], "finite"),
    ],
)
def test_place_usage_errors(tmp_path, capsys, args, want_in_err):
    gang_file = _write(tmp_path, "gang.yaml", _members(1))
    base = ["place", "--cluster", _cluster(tmp_path)] if "--cluster" not in args else ["place"]
    code = main([*base, *args, gang_file])
    captured = capsys.readouterr()
    assert code == 2
    assert want_in_err in captured.err
    assert "Traceback" not in captured.err


def test_place_rejects_a_bad_gang_file(tmp_path, capsys):
    bad = tmp_path / "gang.yaml"
    bad.write_text("kind: [unclosed\n")
    assert main(["place", "--cluster", _cluster(tmp_path), str(bad)]) == 2
    assert "not YAML" in capsys.readouterr().err
    other = _write(tmp_path, "cm.yaml", [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}}])
    assert main(["place", "--cluster", _cluster(tmp_path), other]) == 2


def test_place_with_a_policy_set(tmp_path, capsys):
    policies = tmp_path / "policies"
    policies.mkdir()
    (policies / "cluster.policy").write_text(
        'gpu h100 { product "NVIDIA-H100-80GB-HBM3" memory 80Gi }\n'
        'topology fabric {\n  block "topology.acme.io/block"\n  rack "topology.acme.io/rack"\n  host "kubernetes.io/hostname"\n}\n'
    )
    code = main(["place", "--cluster", _cluster(tmp_path), "--policy", str(policies), "--required", "rack",
                 _write(tmp_path, "gang.yaml", _members(2))])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["topology"] == "fabric" and out["level"] == "rack"


def test_bench_place_small_json(capsys):
    code = main(["bench", "place", "--nodes", "600", "--queries", "3", "--events", "20", "--baseline-queries", "1", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0
    resource_shapes = {f"{lv}-{name}" for lv in ("block", "rack", "host") for name in ("cpu16_8", "cpu16_64", "cpu120_8", "cpu200_1")}
    assert set(out["queries"]) == {f"{lv}_{n}" for lv in ("block", "rack", "host") for n in (1, 8, 64, 512)} | {"flat-share_1"} | resource_shapes
    assert out["queries"]["flat-share_1"]["fits"] == 3
    # 190-core nodes: 120 cores per pod fit one per node (a rack of 32 holds 8), 200 cores fit nowhere.
    assert out["queries"]["rack-cpu120_8"]["fits"] == 3 and out["queries"]["block-cpu200_1"]["fits"] == 0
    assert out["queries"]["host-cpu120_8"]["fits"] == 0 and out["queries"]["host-cpu16_8"]["fits"] == 0  # 4 GPUs a host
    assert out["queries"]["host_1"]["fits"] == 3 and out["queries"]["host_8"]["fits"] == 0
    assert out["event_bind_p50_ms"] > 0 and out["load_ms"] > 0


def test_bench_place_rejects_unknown_levels(capsys):
    assert main(["bench", "place", "--levels", "block,zone"]) == 2
    assert "--levels" in capsys.readouterr().err


def test_place_reads_kueue_pod_annotations_and_scales_to_the_group_size(tmp_path, capsys):
    member = pod("w0", None, gpus=4)
    member["metadata"]["labels"] = {"kueue.x-k8s.io/pod-group-name": "g"}
    member["metadata"]["annotations"] = {
        "kueue.x-k8s.io/pod-group-total-count": "2",
        "kueue.x-k8s.io/podset-required-topology": "topology.acme.io/rack",
    }
    code = main(["place", "--cluster", _cluster(tmp_path), _write(tmp_path, "gang.yaml", [member])])
    out = json.loads(capsys.readouterr().out)
    assert code == 0
    assert out["level"] == "rack" and out["request"]["pods"] == 2
    assert sum(out["nodes"].values()) == 2


def test_place_counts_the_members_cpu_and_names_it_when_it_runs_out(tmp_path, capsys):
    nodes = [node(f"n{i}", "b1", f"r{i // 2}", gpus=8, cpu="64", memory="512Gi", max_pods=110) for i in range(4)]
    cluster = _write(tmp_path, "cluster.yaml", [{"apiVersion": "v1", "kind": "List", "items": nodes}])
    gang = _write(tmp_path, "gang.yaml", [pod(f"w{i}", None, gpus=8, cpu="96") for i in range(2)])
    assert main(["place", "--cluster", cluster, "--required", "rack", gang]) == 3
    out = json.loads(capsys.readouterr().out)
    assert out["reasons"][0]["code"] == "InsufficientResource"
    assert out["reason"] == "cpu: 96 requested per pod, the best node with room for its GPUs has 64 free"
    fitting = _write(tmp_path, "fits.yaml", [pod(f"w{i}", None, gpus=8, cpu="32") for i in range(2)])
    assert main(["place", "--cluster", cluster, "--required", "rack", fitting]) == 0


def test_place_a_jobset_as_its_pod_sets(tmp_path, capsys):
    tpl = {"spec": {"containers": [{"name": "t", "image": "t:1", "resources": {"limits": {"nvidia.com/gpu": "2"}}}]}}
    js = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": "js", "namespace": "team-a"},
          "spec": {"replicatedJobs": [{"name": "w", "replicas": 2, "template": {"spec": {"parallelism": 2, "template": tpl}}}]}}
    code = main(["place", "--cluster", _cluster(tmp_path), "--required", "rack", _write(tmp_path, "js.yaml", [js])])
    out = json.loads(capsys.readouterr().out)
    # 2 replicas x 2 pods x 2 GPUs = 8 GPUs: only rack r2 (b1, 8 free) holds them all
    assert (code, out["fits"], out["domain"], sum(out["nodes"].values())) == (0, True, "b1-r2", 4)
