"""One budget meter for the cluster on the real API server: three `allot serve --ledger` replicas, the writer killed, a new one started.

Needs the kit's scheduler and kubelet stand-in (WITH_SCHED=1): GPU pods are bound by the real
kube-scheduler and marked Running. Every replica meters them from its own watch at the API
server's time and shares the use through the `allot-meter` ConfigMap (docs/budgets.md). The
writer is SIGKILLed mid-run; another takes over after the 30 s lease, and a replica started
afterwards adopts the stored use. Once the pods are gone the use stands still, and every live
replica and the object must agree within the stated bound: each replica's event times are the
API server's within 1 s, so two replicas differ by at most 2 s x the GPUs that changed.
"""

from __future__ import annotations

import json
import signal
import time

import kit
import pytest
from kit import gpu_pod, wait_for

pytestmark = pytest.mark.e2e
PODS, GPUS = 4, 2  # 8 GPUs of the kit's 24
HOUR_MS = 3_600_000


def stored(kube, ns: str) -> dict:
    """The allot-meter ConfigMap's data ({} when none)."""
    r = kube.run("get", "configmap", "allot-meter", "-n", ns, "-o", "json", "--ignore-not-found", check=False)
    return json.loads(r.stdout)["data"] if r.stdout.strip() else {}


def used_hours(server, budget: str) -> float:
    """The replica's use of `budget` this period, GPU-hours (its /metrics)."""
    return server.metric("allot_budget_used_gpu_hours", budget=budget)


@pytest.fixture
def meters(kube, cluster, tmp_path):
    """The policy, a ledger namespace and three replicas (stopped after)."""
    if not kit.scheduler_runs():
        pytest.skip("the kit runs no kube-scheduler (start it with WITH_SCHED=1)")
    from webhook.server.serving import self_signed

    run = cluster["run"]
    ns, ledger_ns = f"p-{run}", f"m-{run}-ledger"
    kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ledger_ns}})
    certs = tmp_path / "certs"
    self_signed(str(certs), "127.0.0.1")
    pdir = tmp_path / "policies"
    pdir.mkdir()
    (pdir / "b.policy").write_text(f'budget team {{\n  for namespace == "{ns}"\n  gpu_hours 1000\n  period month\n}}\n'
                                   f'budget everyone {{\n  gpu_hours 100000\n  period month\n}}\n')
    servers = kit.start_replicas(3, pdir, kube.kubeconfig, tmp_path / "r", certs, ledger_ns)
    extra = []
    try:
        yield {"ns": ns, "ledger": ledger_ns, "servers": servers, "extra": extra, "pdir": pdir, "certs": certs, "work": tmp_path}
    finally:
        for s in servers + extra:
            s.stop()
        kube.run("delete", "pods", "--all", "-n", ns, "--grace-period=0", "--force", check=False)
        kube.run("delete", "namespace", ledger_ns, "--wait=false", "--ignore-not-found", check=False)


def test_replicas_and_a_killed_writer_agree_on_every_budget(kube, meters):
    ns, ledger_ns, servers = meters["ns"], meters["ledger"], meters["servers"]
    for i in range(PODS):
        kube.create(gpu_pod(f"b{i}", ns, gpus=GPUS))

    def running():
        pods = json.loads(kube.run("get", "pods", "-n", ns, "-o", "json").stdout)["items"]
        return len(pods) == PODS and all((p.get("status") or {}).get("phase") == "Running" for p in pods)

    wait_for("the GPU pods to be bound and Running (WITH_SCHED=1)", running, timeout=90, every=0.5)
    wait_for("a first write of the meter", lambda: stored(kube, ledger_ns).get("writer"), timeout=30)
    writer = stored(kube, ledger_ns)["writer"]
    victim = next(s for s in servers if f"-{s.proc.pid}-" in writer)
    time.sleep(12)  # a second write: the victim's last value is not its first
    victim.proc.send_signal(signal.SIGKILL)
    victim.proc.wait(timeout=10)
    live = [s for s in servers if s is not victim]
    wait_for("another replica to take the meter over (30 s lease)",
             lambda: stored(kube, ledger_ns).get("writer") not in (None, writer), timeout=60, every=1)
    (meters["work"] / "late").mkdir()
    late = kit.Allot(meters["pdir"], kube.kubeconfig, meters["work"] / "late", certs=meters["certs"],
                     extra=("--ledger", ledger_ns, "--peer-address", "127.0.0.1"))
    meters["extra"].append(late)
    late.wait_ready()
    time.sleep(6)  # it reads the object (every 5 s) and adopts it
    kube.run("delete", "pods", "--all", "-n", ns, "--grace-period=0", "--force")
    wait_for("the pods gone", lambda: not json.loads(kube.run("get", "pods", "-n", ns, "-o", "json").stdout)["items"], timeout=60)
    time.sleep(12)  # every replica saw the deletions; the writer wrote the final use
    bound_h = 2 * PODS * GPUS / 3600  # GPU-hours: 2 s x the GPUs that stopped
    data = stored(kube, ledger_ns)
    for budget in ("team", "everyone"):
        seen = [used_hours(s, budget) for s in live + [late]]
        in_object = json.loads(data[f"budget.{budget}"])["used_mgpu_ms"] / 1000 / HOUR_MS
        print(f"budget {budget}: replicas {seen} GPU-hours, object {in_object}, bound {bound_h:.6f}")
        assert min(seen) > PODS * GPUS * 30 / 3600  # the pods ran > 30 s (the kill and the lease): all of it counted
        assert max(seen) - min(seen) <= bound_h, (budget, seen)
        assert abs(in_object - seen[0]) <= bound_h, (budget, in_object, seen)
