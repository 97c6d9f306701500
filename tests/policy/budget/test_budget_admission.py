"""Budgets at admission, on real object shapes: the arithmetic in the answer, stated run times, on spent deny/warn/priority."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

import lang
from policy.admission import wrap_manifest
from policy.budget.calendar import days_from_civil
from policy.cluster.snapshot import ClusterSnapshot
from policy.engine import Engine
from tests.policy.builders import gpu_container, node, pod

REPO = Path(__file__).resolve().parents[3]
JOBSET = next(o for o in yaml.safe_load_all((REPO / "tests/fixtures/workloads/training.yaml").read_text()) if o and o["kind"] == "JobSet")
JUNE = days_from_civil(2025, 6, 1) * 86400  # seconds
HEAD = '''gpu h100 { product "NVIDIA-H100-80GB-HBM3" memory 80Gi }
priority prod 500
priority training 200
priority batch 100 default
'''


def budget(on_spent: str = "deny", extra: str = "") -> str:
    return HEAD + f'''budget research {{
  for namespace == "team-a"
  gpu_hours 100
  period month
  on spent {on_spent}
  warn at 80%
{extra}}}
'''


def engine(src: str) -> Engine:
    policy, diags = lang.compile_policies([("b.policy", src)])
    assert [d for d in diags if d.severity == "error"] == []
    return Engine(policy)


def running(name: str, gpus: int) -> dict:
    """A pod bound since the start of June, holding `gpus` H100s in team-a."""
    p = pod(name, "team-a", containers=[gpu_container(str(gpus))])
    p["spec"]["nodeName"] = "n1"
    p["status"] = {"phase": "Running", "startTime": "2025-06-01T00:00:00Z"}
    return p


def cluster(gpus: int = 8) -> ClusterSnapshot:
    return ClusterSnapshot.from_objects([node("n1", gpus="16"), running("r", gpus)])


def jobset(annotations: dict | None = None) -> dict:
    js = copy.deepcopy(JOBSET)
    js["spec"].pop("suspend", None)
    js["metadata"].setdefault("annotations", {}).update(annotations or {})
    return js


def decide(e: Engine, obj: dict, snap, hours: float, mutate: bool = False):
    req = wrap_manifest(obj, user="alice", groups=["dev"], operation="CREATE")["request"]
    return e.decide(req, snap, JUNE + hours * 3600, mutate=mutate, reserve=False)


def found(d) -> list[tuple[str, str]]:
    return [(r.code, r.mode) for r in d.reasons if r.block.startswith("budget")]


def test_a_spent_budget_denies_a_jobset_with_the_arithmetic():
    e, snap = engine(budget()), cluster(8)
    assert decide(e, jobset(), snap, 12.4).allowed  # 8 GPUs since June 1st, 00:00: 99.2 GPU-hours, fits (past 80 %)
    d = decide(e, jobset(), snap, 12.5)  # 100 GPU-hours
    assert not d.allowed and found(d) == [("BudgetSpent", "enforce")]
    (r,) = [r for r in d.reasons if r.code == "BudgetSpent"]
    gpus = r.data["requested"] // 1000
    assert r.message == f"research: 100 of 100 GPU-hours used this month; this JobSet runs {gpus} GPUs; spent: denied"
    assert r.data["used"] == 100 * 3600 * 1000 and r.data["amount"] == 100 * 3600 * 1000


def test_a_stated_run_time_counts_what_the_workload_would_use():
    e, snap = engine(budget()), cluster(8)
    hour = jobset({"allot.dev/duration": "1h"})
    d = decide(e, hour, snap, 10)  # 80 used; 32 GPUs x 1 h = 32 more
    assert not d.allowed
    (r,) = [r for r in d.reasons if r.code == "BudgetSpent"]
    assert r.message.endswith("this JobSet runs 32 GPUs for 1h (annotation allot.dev/duration): 32 GPU-hours; 80 + 32 > 100: denied")
    assert decide(e, jobset({"allot.dev/duration": "30m"}), snap, 10).allowed  # 80 + 16 <= 100
    bad = decide(e, jobset({"allot.dev/duration": "a while"}), snap, 10)
    assert bad.allowed and ("BudgetDurationUnreadable", "warn") in found(bad)


def test_active_deadline_seconds_of_a_pod_is_its_stated_run_time():
    e, snap = engine(budget()), cluster(8)
    p = pod("train", "team-a", containers=[gpu_container("8")], activeDeadlineSeconds=3 * 3600)
    d = decide(e, p, snap, 10)
    assert not d.allowed and "this Pod runs 8 GPUs for 3h (activeDeadlineSeconds): 24 GPU-hours" in d.reasons[-1].message


def test_warn_at_a_threshold_and_on_spent_warn_admit_with_warnings():
    e, snap = engine(budget("warn")), cluster(8)
    assert found(decide(e, jobset(), snap, 9)) == []  # 72 %
    assert found(decide(e, jobset(), snap, 10.1)) == [("BudgetThreshold", "warn")]  # 80.8 %
    d = decide(e, jobset(), snap, 13)
    assert d.allowed and found(d) == [("BudgetSpent", "warn")] and any("research: 104 of 100" in w for w in d.warnings)


def test_on_spent_priority_moves_new_work_to_the_tier_on_mutate_and_holds_the_rest_on_validate():
    e, snap = engine(budget("priority batch")), cluster(8)
    js = jobset()
    m = decide(e, js, snap, 13, mutate=True)
    assert m.allowed and ("BudgetMovedToTier", "audit") in found(m)
    classes = {op["path"]: op["value"] for op in m.patch if op["path"].endswith("priorityClassName")}
    assert classes and set(classes.values()) == {"batch"}
    for rj in js["spec"]["replicatedJobs"]:
        rj["template"]["spec"]["template"]["spec"]["priorityClassName"] = "prod"
    v = decide(e, js, snap, 13)
    assert not v.allowed and "spent budgets admit new work at priority batch (100) or lower: denied" in v.reasons[-1].message
    low = pod("low", "team-a", containers=[gpu_container("1")], priorityClassName="batch")
    assert decide(e, low, snap, 13).allowed


def test_a_pod_made_by_its_workloads_controller_is_not_judged_again():
    e, snap = engine(budget()), cluster(8)
    member = pod("llama-pretrain-workers-0-0", "team-a", containers=[gpu_container("8")])
    member["metadata"]["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "name": "llama-pretrain-workers-0",
                                              "uid": "u1", "controller": True}]
    assert decide(e, member, snap, 20).allowed


@pytest.mark.parametrize("model, judged", [("h100", True), ("l4", False)])
def test_a_budget_of_one_model_judges_only_its_pods(model, judged):
    src = HEAD + 'gpu l4 { product "NVIDIA-L4" memory 24Gi }\n' \
        f'budget b {{\n  for namespace == "team-a"\n  gpu_hours 1 of {model}\n  period day\n}}\n'
    e, snap = engine(src), cluster(8)
    p = pod("x", "team-a", containers=[gpu_container("1")], nodeSelector={"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"})
    assert decide(e, p, snap, 5).allowed is not judged
