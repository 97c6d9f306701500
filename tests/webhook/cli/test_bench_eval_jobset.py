"""`allot bench eval` times a 1,024-pod JobSet beside the single pod (figures are printed, not asserted)."""

import json

from webhook.bench import eval_data as data
from webhook.cli import main


def test_the_jobset_request_is_1024_pods_rack_required():
    js = data.request_jobset()
    (rj,) = js["spec"]["replicatedJobs"]
    pod = rj["template"]["spec"]["template"]
    assert rj["replicas"] * rj["template"]["spec"]["parallelism"] == 1024
    assert pod["metadata"]["annotations"]["kueue.x-k8s.io/podset-required-topology"] == "topology.acme.io/rack"


def test_bench_eval_reports_the_jobset_beside_the_pod(capsys):
    assert main(["bench", "eval", "--runs", "10", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    js = out["jobset"]
    assert js["pods"] == 1024 and js["runs"] >= 10 and js["p99_us"] > 0 and js["budget_p99_us"] == 5000.0
    # 1,024 GPUs fit neither team-3's quota nor any 32-GPU rack of the generated cluster: both say so
    assert not js["allowed"] and {"GangUnplaceable", "QuotaExceeded"} <= set(js["codes"])
    # the same pod as a pod of an admitted Deployment still holding its share: allowed, timed beside it
    assert out["member"]["allowed"] is True and out["member"]["runs"] >= 1


def test_a_custom_request_has_no_jobset_figure(tmp_path, capsys):
    req = tmp_path / "pod.json"
    req.write_text(json.dumps(data.request_pod()))
    assert main(["bench", "eval", str(req), "--runs", "10", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["jobset"] is None
