"""`allot eval --explain` and `allot place` print the reclaim plan offline, on a cluster dump (issue 29 item 5)."""

from __future__ import annotations

import json

import yaml

from tests.policy.reclaim.test_plans import CASES, TWO_TEAMS
from webhook.cli import main


def _files(tmp_path):
    case = CASES[0]  # team-a asks 8 within its nominal; two team-b JobSets borrow the cluster
    objs = [*case.nodes, *(o for r in case.running for o in r.objects())]
    (tmp_path / "p").mkdir()
    (tmp_path / "p" / "a.policy").write_text(TWO_TEAMS)
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": objs}))
    pod = tmp_path / "pod.yaml"
    pod.write_text(yaml.safe_dump(case.req["object"]))
    return tmp_path / "p", cluster, pod


def test_eval_explain_prints_the_plan(tmp_path, capsys):
    policies, cluster, pod = _files(tmp_path)
    assert main(["eval", "--policy", str(policies), "--cluster", str(cluster), "--explain", "--now", "0", str(pod)]) == 0
    out = capsys.readouterr().out
    assert "plan    reclaim for Pod team-a/new (quota team-a): frees 8 GPUs, lands on n2 x1" in out
    assert "suspend JobSet team-b/b-new" in out and "team-b borrows 8 beyond its nominal 8" in out


def test_eval_json_carries_the_plan(tmp_path, capsys):
    policies, cluster, pod = _files(tmp_path)
    assert main(["eval", "--policy", str(policies), "--cluster", str(cluster), "--explain", "--format", "json", "--now", "0", str(pod)]) == 0
    doc = json.loads(capsys.readouterr().out)
    plan = (doc.get("decision") or doc)["plan"]
    assert plan["kind"] == "reclaim" and [v["name"] for v in plan["victims"]] == ["b-new"]


def test_place_prints_the_plan_of_a_workload_that_does_not_fit(tmp_path, capsys):
    policies, cluster, pod = _files(tmp_path)
    assert main(["place", "--cluster", str(cluster), "--policy", str(policies), str(pod)]) == 3
    out = json.loads(capsys.readouterr().out)
    assert out["fits"] is False
    assert out["plan"]["victims"][0]["action"] == "suspend" and out["plan"]["victims"][0]["name"] == "b-new"
