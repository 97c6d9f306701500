"""A Deployment's quota hold in a real API server: `kubectl scale` shrinks it and `kubectl delete` releases it at once.

The Deployments are created paused, so the kit's controller manager makes no ReplicaSet
and no pods: what counts against the quota is the hold alone, and each step shows it
moving (4 held, then 1 after the scale, then 0 after the delete), long before its 120 s expiry.
"""

from __future__ import annotations

import pytest

from kit import gpu_pod, wait_for

pytestmark = pytest.mark.e2e


def deployment(name: str, namespace: str, replicas: int) -> dict:
    """A paused Deployment of `replicas` one-GPU pods (paused: its controller creates nothing yet)."""
    pod = gpu_pod(name, namespace, gpus=1)
    labels = {"app": name}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": namespace},
            "spec": {"replicas": replicas, "paused": True, "selector": {"matchLabels": labels},
                     "template": {"metadata": {"labels": labels}, "spec": pod["spec"]}}}


def test_kubectl_scale_and_delete_release_a_deployments_hold_at_once(allot, kube, cluster):
    ns = f"q-{cluster['run']}"  # the suite's quota e2e-quota: 4 GPUs in this namespace

    def fits(name: str, replicas: int) -> bool:
        r = kube.create(deployment(name, ns, replicas), "--dry-run=server", check=False)
        assert r.returncode == 0 or "QuotaExceeded" in r.stderr or "requested" in r.stderr, r.stderr
        return r.returncode == 0

    # the quota test of test_e2e_admission.py leaves its pods in this namespace: start from an empty quota
    kube.run("delete", "pods", "--all", "-n", ns, "--grace-period=0", "--force", check=False)
    wait_for("the quota to see the namespace's pods gone", lambda: fits("probe", 4), timeout=30, every=0.5)
    assert kube.create(deployment("hold-a", ns, 4)).returncode == 0  # admitted: holds all 4
    wait_for("the watch to show hold-a", lambda: allot.metric("allot_watch_events", kind="Deployment.apps", type="ADDED") >= 1)

    assert not fits("probe", 1)  # 4 held + 1 > 4
    r = kube.run("scale", "deployment", "hold-a", "-n", ns, "--replicas=1")  # the scale sub-resource
    assert "scaled" in r.stdout
    assert fits("probe", 3) and not fits("probe", 4)  # 1 held: 3 more fit, 4 do not
    assert kube.create(deployment("hold-b", ns, 2)).returncode == 0  # 1 + 2 held
    assert not fits("probe", 2)
    kube.run("delete", "deployment", "hold-a", "-n", ns, "--wait=false")
    assert fits("probe", 2) and not fits("probe", 3)  # 2 held (hold-b): released at once, not after 120 s
    scales = [d for d in allot.decisions() if d.get("name") == "hold-a" and d.get("operation") == "UPDATE"]
    assert scales and all(d["result"] == "allowed" and "WorkloadNotInClusterState" not in d.get("codes", []) for d in scales), scales

    def deletes() -> list[dict]:
        return [d for d in allot.decisions() if d.get("name") == "hold-a" and d.get("operation") == "DELETE"]

    wait_for("the DELETE's decision line (the log is flushed every 0.25 s)", deletes, timeout=5, every=0.1)
    assert deletes()[-1]["result"] == "allowed", deletes()
