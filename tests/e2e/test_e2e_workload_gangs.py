"""A rack-required JobSet in a real API server holds its rack: its pods are stored pinned there, a second JobSet for that rack is denied at `kubectl create`, and deleting the first lets the second in.

The kit serves no JobSet API, so the test installs a minimal JobSet CRD (the real group,
kind and version, schema left open) and removes it again if it made it. No JobSet
controller runs: the JobSet's pod is created by hand, labelled as the Job controller
labels it, which is how Allot finds the JobSet it belongs to.
"""

from __future__ import annotations


import pytest

from kit import RACK, gpu_pod, revive, wait_for

pytestmark = pytest.mark.e2e

CRD = {
    "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
    "metadata": {"name": "jobsets.jobset.x-k8s.io"},
    "spec": {"group": "jobset.x-k8s.io", "scope": "Namespaced",
             "names": {"kind": "JobSet", "listKind": "JobSetList", "plural": "jobsets", "singular": "jobset"},
             "versions": [{"name": "v1alpha2", "served": True, "storage": True,
                           "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}}]},
}


@pytest.fixture(scope="module")
def jobset_api(kube):
    """The JobSet CRD, established (made here, or already installed)."""
    made = kube.run("get", "crd", CRD["metadata"]["name"], "--ignore-not-found", "-o", "name").stdout.strip() == ""
    if made:
        kube.create(CRD)
    kube.run("wait", "--for=condition=Established", f"crd/{CRD['metadata']['name']}", "--timeout=30s")
    wait_for("the JobSet API to be served",
             lambda: kube.run("get", "jobsets", "-A", check=False).returncode == 0, timeout=30)
    yield
    if made:
        kube.run("delete", "crd", CRD["metadata"]["name"], "--ignore-not-found", "--wait=false", check=False)


def jobset(name: str, namespace: str, rack: str) -> dict:
    """A JobSet of one 8-GPU pod whose template selects `rack` (the suite's gang block requires one rack)."""
    spec = gpu_pod(name, namespace, gpus=8)["spec"]
    spec.update(restartPolicy="Never", nodeSelector={RACK: rack})
    job = {"parallelism": 1, "completions": 1, "template": {"spec": spec}}
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": name, "namespace": namespace},
            "spec": {"replicatedJobs": [{"name": "workers", "replicas": 1, "template": {"spec": job}}]}}


def test_a_jobsets_rack_is_held_its_pod_pinned_and_released_on_delete(allot, kube, cluster, jobset_api):
    g, rack = f"g-{cluster['run']}", f"r2-{cluster['run']}"  # r2: one 8-GPU node
    revive(kube, cluster["nodes"][2])
    wait_for("r2's node to be ready again in Allot's view", lambda: kube.create(
        jobset("probe-js", g, rack), "--dry-run=server", check=False).returncode == 0, timeout=30, every=0.5)
    r = kube.create(jobset("pretrain-a", g, rack), check=False)
    assert r.returncode == 0, r.stderr
    def logged():
        found = [d for d in allot.decisions() if d.get("name") == "pretrain-a" and d.get("kind") == "JobSet"]
        return found if {d["endpoint"] for d in found} == {"mutate", "validate"} else None

    a = wait_for("the JobSet's mutate and validate decisions in the log (flushed every 0.25 s)", logged, timeout=10)
    assert all(d["result"] == "allowed" for d in a), a

    # its pod, as the Job controller would label it: stored pinned to the JobSet's rack, named its reservation
    labels = {"jobset.sigs.k8s.io/jobset-name": "pretrain-a", "jobset.sigs.k8s.io/replicatedjob-name": "workers",
              "batch.kubernetes.io/job-name": "pretrain-a-workers-0"}
    kube.create(gpu_pod("pretrain-a-workers-0-0-x7k2p", g, gpus=8, labels=labels, restartPolicy="Never", nodeSelector={RACK: rack}))
    pod = kube.get("pod", "pretrain-a-workers-0-0-x7k2p", g)
    terms = pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert [e["values"] for t in terms for e in t["matchExpressions"] if e["key"] == RACK] == [[rack]]
    assert pod["metadata"]["annotations"]["allot.dev/reservation"] == f"wl:{g}/JobSet/pretrain-a"

    # a second JobSet for that rack: the first one holds it
    r = kube.create(jobset("pretrain-b", g, rack), check=False)
    assert r.returncode != 0 and "allot denied: gang racks:" in r.stderr, r.stderr
    assert "no rack of topology fabric holds" in r.stderr or "room for" in r.stderr, r.stderr

    kube.run("delete", "jobset", "pretrain-a", "-n", g, "--wait=false")
    kube.run("delete", "pod", "pretrain-a-workers-0-0-x7k2p", "-n", g, "--grace-period=0", "--force", check=False)
    deleted = wait_for("the JobSet's DELETE in the decision log", lambda: [
        d for d in allot.decisions() if d.get("name") == "pretrain-a" and d.get("operation") == "DELETE"], timeout=10)
    assert deleted[-1]["result"] == "allowed", deleted
    r = kube.create(jobset("pretrain-b", g, rack), "--dry-run=server", check=False)
    assert r.returncode == 0, r.stderr  # released at once by the DELETE, not after the hold's expiry
