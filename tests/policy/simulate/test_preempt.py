"""Reclaim and preemption in `allot simulate`: plans carried out, victims re-queued, the work they lose counted per team."""

import json

from policy.simulate.report import build_report, render_text
from tests.policy.simulate.sim_builders import arrive, gpu_node, simulate

LEND = "".join(f'quota team-{t} {{\n  for namespace == "team-{t}"\n  cohort research\n  gpus 4\n}}\n' for t in "ab")  # 4 + 4 in one cohort
# One 8-GPU node: team-b runs its nominal 4 (b1) and borrows team-a's idle 4 (b2, admitted later, so the one reclaimed).
# At 3600 team-a asks its nominal 4 back: b2 is evicted after 3600 s of work on 4 GPUs (4 GPU-hours lost), re-queued, denied
# (team-b is at its nominal, nothing left to borrow) until a1 leaves at 5400, then bound again and run in full.
TRACE = [arrive(0, "b1", ns="team-b", gpus=4, duration=20000), arrive(1, "b2", ns="team-b", gpus=4, duration=10000),
         arrive(3601, "a1", ns="team-a", gpus=4, duration=1800)]


def test_lender_reclaim_evicts_the_borrower_requeues_it_and_counts_the_hours_lost():
    result, sim = simulate([gpu_node("n1")], TRACE, LEND, retry=600.0, samples=20)
    b1, b2, a1 = result.outcomes
    assert (a1.final, a1.first_codes) == ("bound", ("ReclaimPlanned",))
    assert b1.final == "bound" and b1.attempts == 1  # within its nominal: never a victim
    # b2: bound at 1; evicted and re-queued at 3601 (denied: QuotaExceeded), retried at 4201, 4801 (denied), bound at 5401
    assert (b2.final, b2.attempts, b2.waited) == ("bound", 5, 1800.0)
    assert result.denied_attempts == {"QuotaExceeded": 3}
    assert result.preemption == {
        "plans": {"reclaim": 1}, "requeued": 1, "rebound": 1, "not_requeued": 0,
        "lost_gpu_milli_s": 4000 * 3600, "lost_gpu_hours": 4.0,
        "by_quota": [{"id": "quota team-b", "name": "team-b", "workloads": 1, "pods": 1,
                      "lost_gpu_milli_s": 4000 * 3600, "lost_gpu_hours": 4.0}],
    }
    # its first run's end (10001) does not end the second run: team-b holds 8 GPUs from 5401 until b2 ends at 15401
    ids = result.quota_ids
    b_used = {round(s[0]): q[ids.index("quota team-b")] for s, q in zip(result.samples, result.quota_samples)}
    assert (b_used[3000], b_used[4000], b_used[12000], b_used[16000]) == (8000, 4000, 8000, 4000)
    rep = build_report(result, {"policy": "t"}, sim.quota.specs)
    assert rep["preemption"]["by_quota"][0]["lost_gpu_hours"] == 4.0
    text = render_text(rep)
    assert "preempted  plans carried out: reclaim 1; victim pods re-queued 1, bound again 1; work lost 4 GPU-hours" in text
    assert "team-b                 4 GPU-hours lost, 1 workload(s), 1 pod(s) evicted" in text


def test_without_preempt_nothing_is_evicted():
    result, _ = simulate([gpu_node("n1")], TRACE, LEND, retry=600.0, preempt=False)
    b1, b2, a1 = result.outcomes
    assert a1.first_codes == ("ReclaimPlanned",)  # admitted with the plan, as under `reclaim audit`
    assert (b2.final, b2.attempts) == ("bound", 1)
    assert a1.final == "unplaceable"  # nobody made room: the node stays full
    assert result.preemption["plans"] == {} and result.preemption["lost_gpu_milli_s"] == 0


PREEMPT = """
priority critical 1000 preempts
priority batch 100 default
quota team-a {
  for namespace == "team-a"
  gpus 8
}
"""


def test_a_preempting_tier_evicts_the_newest_batch_pods_of_its_quota():
    critical = arrive(7200, "urgent", gpus=4, duration=600)
    critical.obj["spec"]["priorityClassName"] = "critical"
    events = [arrive(0, "old", gpus=4, duration=9000), arrive(3600, "new", gpus=2, duration=9000),
              arrive(3600, "new2", gpus=2, duration=9000), critical]
    classes = [{"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name}, "value": value,
                **({"globalDefault": True} if name == "batch" else {})} for name, value in (("critical", 1000), ("batch", 100))]
    result, _ = simulate([gpu_node("n1"), *classes], events, PREEMPT, retry=None)
    old, new, new2, urgent = result.outcomes
    assert (urgent.final, urgent.first_codes) == ("bound", ("PreemptionPlanned",))
    assert old.final == "bound" and old.attempts == 1
    assert (new.final, new2.final) == ("denied", "denied")  # re-queued at once; no --retry, so dropped when the quota is full
    assert new.attempts == new2.attempts == 2
    rep = result.preemption
    assert rep["plans"] == {"preempt": 1} and rep["requeued"] == 2 and rep["rebound"] == 0
    assert rep["by_quota"] == [{"id": "quota team-a", "name": "team-a", "workloads": 2, "pods": 2,
                                "lost_gpu_milli_s": 2 * 2000 * 3600, "lost_gpu_hours": 4.0}]


def test_cli_reports_gpu_hours_preempted_per_team(tmp_path, capsys):
    from webhook.cli import main

    (tmp_path / "p.policy").write_text(LEND)
    (tmp_path / "cluster.json").write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": [gpu_node("n1")]}))
    (tmp_path / "trace.jsonl").write_text("".join(json.dumps({"at": a.at, "object": a.obj, "duration": a.duration}) + "\n" for a in TRACE))
    args = ["simulate", "--policy", str(tmp_path / "p.policy"), "--cluster", str(tmp_path / "cluster.json"),
            "--trace", str(tmp_path / "trace.jsonl"), "--retry", "600"]
    assert main([*args, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["inputs"]["preempt"] is True
    assert [(q["name"], q["lost_gpu_milli_s"], q["pods"]) for q in doc["preemption"]["by_quota"]] == [("team-b", 14_400_000, 1)]
    assert main([*args, "--no-preempt", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["preemption"]["by_quota"] == []
