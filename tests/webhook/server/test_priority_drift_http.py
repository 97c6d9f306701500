"""Priority classes that differ from the cluster's: the patch follows the live class; /readyz, /metrics and
`allot check --cluster` report the difference (real HTTPS, real engine, a `kubectl get -o yaml`-shaped file)."""

import base64
import os
import subprocess
import sys

import jsonpatch
import orjson

from test_contract import call, options, owned, serve
from tests.webhook.wh_harness import review
from tests.webhook.wh_policy import CLUSTER, write

LIVE_BATCH = """\
- apiVersion: scheduling.k8s.io/v1
  kind: PriorityClass
  metadata: {name: batch}
  value: 100
  preemptionPolicy: PreemptLowerPriority
  globalDefault: false
- apiVersion: scheduling.k8s.io/v1
  kind: PriorityClass
  metadata: {name: prod}
  value: 500
  preemptionPolicy: Never
  globalDefault: false
"""


def cluster_with_classes(tmp_path):
    pdir, _ = write(tmp_path)
    cluster = tmp_path / "live.yaml"  # not cluster.yaml: test_contract.options rewrites that one
    cluster.write_text(CLUSTER + LIVE_BATCH)
    return pdir, cluster


def test_patch_readyz_and_metric_follow_the_live_class(tmp_path):
    _, cluster = cluster_with_classes(tmp_path)
    obj = owned(name="x", gpus=1)
    obj["spec"]["priority"] = 0  # what the Priority plugin wrote before the webhook

    async def scenario(running, s):
        answer = await call(s, running.url + "/mutate", review(obj))
        async with s.get(running.url + "/readyz") as r:
            ready = (r.status, await r.json())
        async with s.get(running.url + "/metrics") as r:
            metrics = await r.text()
        return answer, ready, metrics

    answer, (status, detail), metrics = serve(options(tmp_path, cluster=str(cluster)), scenario)

    patched = jsonpatch.apply_patch(obj, orjson.loads(base64.b64decode(answer["patch"])))
    assert (patched["spec"]["priorityClassName"], patched["spec"]["priority"], patched["spec"]["preemptionPolicy"]) == (
        "batch", 100, "PreemptLowerPriority")
    assert status == 200  # reported, not a readiness failure
    (drift,) = detail["priority_classes"]["drift"]
    assert (drift["class"], drift["field"], drift["declared"], drift["live"]) == ("batch", "preemptionPolicy", "Never",
                                                                                  "PreemptLowerPriority")
    assert 'allot_priority_class_drift{class="batch",field="preemptionPolicy"} 1.0' in metrics
    assert 'class="prod"' not in metrics


def run_check(*argv):
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    return subprocess.run([sys.executable, "-m", "webhook", "check", *argv], capture_output=True, text=True, env=env,
                          timeout=60)


def test_check_cluster_reports_drift_at_the_declaration(tmp_path):
    pdir, cluster = cluster_with_classes(tmp_path)
    r = run_check(str(pdir), "--cluster", str(cluster))
    assert r.returncode == 1, r.stdout + r.stderr
    assert "error[PriorityClassDrift]: priority class batch is declared Never but the cluster's says PreemptLowerPriority" in r.stdout
    assert "test.policy:7:1" in r.stdout and "kubectl replace --force" in r.stdout
    assert r.stdout.rstrip().endswith(f"and cluster {cluster}: 1 error (1 priority class difference), 0 warnings")
    j = run_check(str(pdir), "--cluster", str(cluster), "--format", "json")
    assert [(d["code"], d["line"]) for d in orjson.loads(j.stdout)] == [("PriorityClassDrift", 7)]
    sarif = orjson.loads(run_check(str(pdir), "--cluster", str(cluster), "--format", "sarif").stdout)
    assert [r["ruleId"] for r in sarif["runs"][0]["results"]] == ["PriorityClassDrift"]


def test_check_cluster_clean_and_bad_file(tmp_path):
    pdir, cluster = cluster_with_classes(tmp_path)
    cluster.write_text(CLUSTER + LIVE_BATCH.replace("PreemptLowerPriority", "Never"))
    r = run_check(str(pdir), "--cluster", str(cluster))
    assert r.returncode == 0 and "declared priority classes match the live ones" in r.stdout, r.stdout
    missing = run_check(str(pdir), "--cluster", str(tmp_path / "nope.yaml"))
    assert missing.returncode == 2 and "no such cluster-state file" in missing.stderr
