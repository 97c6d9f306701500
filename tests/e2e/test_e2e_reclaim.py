"""Plans carried out on the real kube-apiserver with the real kube-scheduler (`WITH_SCHED=1`): reclaim, preemption, gangs, PDBs, a leader killed.

Opt-in like the rest of tests/e2e; skips unless the kit runs a scheduler. Allot runs as
`allot serve --reclaim on` (two replicas in the leader test) behind webhook configurations of
its own, limited to this module's namespaces. The scheduler's own preemption must be off
(`SCHEDULER_CONFIG` disabling DefaultPreemption): with it, the scheduler would choose victims of
its own for a `preempts` class, which is exactly what "0 evictions outside the plan" forbids
(docs/reclaim.md, "Carrying plans out"). Each test has its own nodes (a pool label its pods
select) and namespaces. The lender reclaim uses a real `Job` (the controller manager's Job
controller removes a suspended Job's pods), not a JobSet: the kit serves no JobSet controller.

Invariants checked in every test (`check_invariants`): every pod evicted (the replicas' logs)
is a pod of a plan victim, none twice; every pod that disappeared is a plan victim's; the pods of
a quota within its nominal are all still there. Bind times (admission to `spec.nodeName` set by
the scheduler) are printed (`-s`) and must be within 10 s where no leader change intervenes.
"""

from __future__ import annotations

import json
import os
import re
import signal
import time

import pytest
import yaml

import kit
from kit import H100, Kube, gpu_pod, node_status, wait_for

pytestmark = pytest.mark.e2e
POOL = "allot-e2e/pool"
TIMES: list[str] = []


def policy(run: str) -> str:
    """Pairs of quotas in a cohort per test, one quota of its own for preemption."""
    pairs = "".join(f'''
quota {t}-a {{
  for namespace == "{t}-a-{run}"
  cohort {t}-{run}
  gpus 8
}}
quota {t}-b {{
  for namespace == "{t}-b-{run}"
  cohort {t}-{run}
  gpus 8
}}
''' for t in ("lend", "gang", "pdb", "kill"))
    return f'''gpu h100 {{ product "{H100}" memory 80Gi }}
priority rc-batch 100
priority rc-critical 1000 preempts
quota crit {{
  for namespace == "crit-{run}"
  gpus 16
}}
''' + pairs


NAMESPACES = ("lend-a", "lend-b", "gang-a", "gang-b", "pdb-a", "pdb-b", "kill-a", "kill-b", "crit")


@pytest.fixture(scope="module")
def world(kube, run_id, tmp_path_factory):
    """Namespaces, the reclaim namespace, compiled webhooks pointing at replica A; replicas [A, B] (B started first: it leads)."""
    if not kit.scheduler_runs():
        pytest.skip("the kit runs no kube-scheduler (start it with WITH_SCHED=1)")
    work = tmp_path_factory.mktemp("reclaim-e2e")
    pdir = work / "policies"
    pdir.mkdir()
    (pdir / "reclaim.policy").write_text(policy(run_id))
    sys_ns = f"allot-rc-{run_id}"
    label = {"allot-e2e-reclaim": run_id}
    for ns in (*[f"{t}-{run_id}" for t in NAMESPACES], sys_ns):
        kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns, "labels": label}})
    for ns in [f"{t}-{run_id}" for t in NAMESPACES]:
        wait_for(f"serviceaccount default in {ns}",
                 lambda ns=ns: kube.run("get", "serviceaccount", "default", "-n", ns, check=False).returncode == 0)
    extra = ("--reclaim", "on", "--reclaim-namespace", sys_ns, "--reclaim-lease", "4")
    servers = []
    # A second between a plan's steps: the window the leader test kills the leader in (mid-plan).
    os.environ["ALLOT_RECLAIM_STEP_PAUSE"] = "1"
    try:
        for name in ("b", "a"):
            (work / name).mkdir()
            servers.append(kit.Allot(pdir, kube.kubeconfig, work / name, extra=extra))
            servers[-1].wait_ready()
        b, a = servers
        os.environ.pop("ALLOT_RECLAIM_STEP_PAUSE", None)
        install_webhooks(kube, a, pdir, work, run_id, label)
        yield {"run": run_id, "a": a, "b": b, "sys": sys_ns, "kube": kube, "servers": servers}
    finally:
        os.environ.pop("ALLOT_RECLAIM_STEP_PAUSE", None)
        for kind in ("validatingwebhookconfiguration", "mutatingwebhookconfiguration"):
            kube.run("delete", kind, f"allot-reclaim-{run_id}", "--ignore-not-found", check=False)
        for s in servers:
            s.stop()
        for ns in (*[f"{t}-{run_id}" for t in NAMESPACES], sys_ns):
            kube.run("delete", "namespace", ns, "--wait=false", "--ignore-not-found", check=False)
        kube.run("delete", "nodes", "-l", f"allot-e2e-reclaim={run_id}", "--ignore-not-found", check=False)
        for pc in ("rc-batch", "rc-critical"):
            kube.run("delete", "priorityclass", pc, "--ignore-not-found", check=False)


def install_webhooks(kube: Kube, server, pdir, work, run: str, label: dict) -> None:
    """`allot compile --url` for replica A, renamed and limited to this module's namespaces."""
    out = work / "compiled"
    kit.run_allot("compile", "--policy", str(pdir), "-o", str(out), "--url", server.url,
                  "--ca-bundle", str(server.ca))
    r = kube.run("create", "-f", str(out / "priorityclasses.yaml"), check=False)
    assert r.returncode == 0 or "AlreadyExists" in r.stderr, r.stderr
    for doc in ("mutating-webhook.yaml", "validating-webhook.yaml"):
        cfg = yaml.safe_load((out / doc).read_text())
        cfg["metadata"]["name"] = f"allot-reclaim-{run}"
        for wh in cfg["webhooks"]:
            wh["namespaceSelector"] = {"matchLabels": label}
        kube.create(cfg)
    probe = gpu_pod("probe", f"crit-{run}", gpus=8, priorityClassName="rc-batch")
    probe["spec"]["nodeSelector"] = {POOL: "none"}
    wait_for("the webhooks to take effect", lambda: any(
        d.get("name") == "probe" for d in server.decisions()) if kube.create(probe, "--dry-run=server", check=False) else None,
        timeout=30, every=0.5)


def nodes(kube: Kube, run: str, pool: str, count: int = 2) -> list[str]:
    """`count` Ready 8-GPU nodes labelled with this test's pool."""
    names = []
    for i in range(count):
        name = f"rc-{run}-{pool}-{i}"
        n = kit.node(name, f"rack-{pool}")
        n["metadata"]["labels"].update({POOL: f"{pool}-{run}", "allot-e2e-reclaim": run})
        kube.create(n)
        kube.run("patch", "node", name, "--subresource=status", "--type=merge", "-p", node_status(8))
        names.append(name)
    return names


def pod(name: str, ns: str, pool: str, run: str, gpus: int = 8, cls: str = "rc-batch", labels: dict | None = None) -> dict:
    """A GPU pod selecting the test's pool."""
    p = gpu_pod(name, ns, gpus=gpus, labels=labels, priorityClassName=cls, restartPolicy="Never")
    p["spec"]["nodeSelector"] = {POOL: f"{pool}-{run}"}
    p["spec"]["terminationGracePeriodSeconds"] = 0
    return p


def bound(kube: Kube, ns: str, name: str, timeout: float = 30.0) -> str:
    """The node the scheduler bound the pod to."""
    return wait_for(f"pod {ns}/{name} bound", lambda: (_get(kube, "pod", ns, name) or {}).get("spec", {}).get("nodeName"),
                    timeout=timeout, every=0.1)


def _get(kube: Kube, kind: str, ns: str, name: str) -> dict | None:
    r = kube.run("get", kind, name, "-n", ns, "-o", "json", "--ignore-not-found", check=False)
    return json.loads(r.stdout) if r.stdout.strip() else None


def pods_in(kube: Kube, *namespaces: str) -> set[tuple[str, str]]:
    """(namespace, name) of the live (not terminating) pods."""
    out = set()
    for ns in namespaces:
        for p in json.loads(kube.run("get", "pods", "-n", ns, "-o", "json").stdout)["items"]:
            if not p["metadata"].get("deletionTimestamp"):
                out.add((ns, p["metadata"]["name"]))
    return out


def admit_and_bind(w, name: str, ns: str, pool: str, **kw) -> tuple[float, dict]:
    """Create the reclaiming pod; (seconds from the create to the scheduler's binding, its plan record)."""
    kube = w["kube"]
    start = time.monotonic()
    r = kube.create(pod(name, ns, pool, w["run"], **kw), check=False)
    assert r.returncode == 0, r.stderr
    bound(kube, ns, name, timeout=60)
    seconds = time.monotonic() - start
    record = plan_record(w, ns, name)
    return seconds, record


def plan_record(w, ns: str, name: str) -> dict:
    """The plan record admitted for pod ns/name (its plan and status decoded)."""
    def find():
        cms = json.loads(w["kube"].run("get", "configmaps", "-n", w["sys"], "-l", "allot.dev/plan=reclaim", "-o", "json").stdout)
        for cm in cms["items"]:
            plan = json.loads(cm["data"]["plan"])
            if plan["workload"] == f"Pod {ns}/{name}":
                return {"plan": plan, "status": json.loads(cm["data"]["status"]), "name": cm["metadata"]["name"]}
        return None
    return wait_for(f"the plan record of {ns}/{name}", find, timeout=20)


def wait_done(w, ns: str, name: str, timeout: float = 60.0) -> dict:
    """The plan record once its phase is final."""
    def final():
        r = plan_record(w, ns, name)
        return r if r["status"]["phase"] in ("done", "failed") else None
    return wait_for(f"the plan of {ns}/{name} to finish", final, timeout=timeout)


EVICTED = re.compile(r"reclaim: evicted pod (\S+)/(\S+) uid=(\S+)")


def evictions(w) -> list[tuple[str, str, str]]:
    """Every eviction any replica logged as answered 201."""
    out = []
    for s in w["servers"]:
        out += EVICTED.findall(s.stderr_path.read_text())
    return out


def check_invariants(w, before: set, after: set, records: list[dict], nominal: set) -> None:
    """0 evictions outside the plans, 0 double evictions, 0 pods within their nominal taken, nothing else gone."""
    victim_pods = {(p["namespace"], p["name"]) for r in records for v, s in zip(r["plan"]["victims"], r["status"]["steps"])
                   if s["state"] != "unavailable" for p in v["pods"]}
    namespaces = {ns for ns, _ in before}
    evicted = [(ns, n, u) for ns, n, u in evictions(w) if ns in namespaces]
    assert len({u for _, _, u in evicted}) == len(evicted), f"a pod evicted twice: {evicted}"
    assert {(ns, n) for ns, n, _ in evicted} <= victim_pods, f"evicted outside the plan: {evicted} vs {victim_pods}"
    gone = before - after
    assert gone <= victim_pods, f"pods gone that no plan named: {gone - victim_pods}"
    assert nominal <= after, f"pods within their quota's nominal were taken: {nominal - after}"


def report(what: str, seconds: float) -> None:
    TIMES.append(f"{what}: bound {seconds:.2f} s after admission")
    print(f"\n[reclaim e2e] {what}: the reclaiming pod bound {seconds:.2f} s after its create was sent")


def test_a_lender_reclaims_from_a_borrowed_job_which_is_suspended_and_its_pod_bound_within_10s(world):
    w, kube, run = world, world["kube"], world["run"]
    nodes(kube, run, "lend")
    a, b = f"lend-a-{run}", f"lend-b-{run}"
    kube.create(pod("b-old", b, "lend", run))
    bound(kube, b, "b-old")
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "b-train", "namespace": b},
           "spec": {"parallelism": 1, "completions": 1, "backoffLimit": 0,
                    "template": {"spec": pod("x", b, "lend", run)["spec"]}}}
    kube.create(job)
    jpod = wait_for("the Job's pod bound", lambda: next((p for p in pods_in(kube, b) if p[1].startswith("b-train-")
                                                          and (_get(kube, "pod", b, p[1]) or {}).get("spec", {}).get("nodeName")), None))
    before = pods_in(kube, a, b)
    seconds, record = admit_and_bind(w, "a-new", a, "lend")
    assert [(v["kind"], v["name"], v["action"]) for v in record["plan"]["victims"]] == [("Job", "b-train", "suspend")]
    stored = kube.get("job", "b-train", b)
    assert stored["spec"]["suspend"] is True
    assert stored["metadata"]["annotations"]["allot.dev/reclaimed-by"] == f"Pod {a}/a-new (quota lend-a, reclaim)"
    events = json.loads(kube.run("get", "events", "-n", b, "--field-selector", "involvedObject.name=b-train", "-o", "json").stdout)
    assert any(e["reason"] == "Reclaimed" and "lend-b borrows 8" in e["message"] for e in events["items"]), events
    done = wait_done(w, a, "a-new")
    after = pods_in(kube, a, b)
    check_invariants(w, before, after, [done], nominal={(b, "b-old")})
    assert jpod not in after and (a, "a-new") in after
    report("lender reclaim (Job suspended)", seconds)
    assert seconds <= 10.0


def test_a_critical_pod_preempts_the_newest_batch_pod_of_its_own_quota(world):
    w, kube, run = world, world["kube"], world["run"]
    nodes(kube, run, "crit")
    ns = f"crit-{run}"
    for name in ("batch-1", "batch-2"):
        kube.create(pod(name, ns, "crit", run))
        bound(kube, ns, name)
        time.sleep(1.1)  # creationTimestamps have whole seconds: "most recently admitted" needs them apart
    before = pods_in(kube, ns)
    seconds, record = admit_and_bind(w, "urgent", ns, "crit", cls="rc-critical")
    assert record["plan"]["kind"] == "preempt"
    assert [(v["kind"], v["name"], v["action"]) for v in record["plan"]["victims"]] == [("Pod", "batch-2", "evict")]
    done = wait_done(w, ns, "urgent")
    after = pods_in(kube, ns)
    check_invariants(w, before, after, [done], nominal=set())
    assert (ns, "batch-1") in after and (ns, "batch-2") not in after
    report("preemption within a quota", seconds)
    assert seconds <= 10.0


def test_a_gang_victim_is_evicted_whole(world):
    w, kube, run = world, world["kube"], world["run"]
    nodes(kube, run, "gang")
    a, b = f"gang-a-{run}", f"gang-b-{run}"
    kube.create(pod("solo", b, "gang", run))
    bound(kube, b, "solo")
    time.sleep(1.1)  # (whole-second creationTimestamps: the gang is the more recent)
    for i in range(2):
        kube.create(pod(f"g-{i}", b, "gang", run, gpus=4, labels={"scheduling.x-k8s.io/pod-group": "g"}))
    for i in range(2):
        bound(kube, b, f"g-{i}")
    before = pods_in(kube, a, b)
    seconds, record = admit_and_bind(w, "a-new", a, "gang")
    (victim,) = record["plan"]["victims"]
    assert (victim["kind"], victim["name"], sorted(p["name"] for p in victim["pods"])) == ("PodGroup", "g", ["g-0", "g-1"])
    done = wait_done(w, a, "a-new")
    after = pods_in(kube, a, b)
    check_invariants(w, before, after, [done], nominal={(b, "solo")})
    assert not {(b, "g-0"), (b, "g-1")} & after
    report("gang victim evicted whole", seconds)
    assert seconds <= 10.0


def test_a_victim_a_pdb_protects_is_passed_over_for_another(world):
    w, kube, run = world, world["kube"], world["run"]
    nodes(kube, run, "pdb")
    a, b = f"pdb-a-{run}", f"pdb-b-{run}"
    for name in ("b-1", "b-2"):
        kube.create(pod(name, b, "pdb", run, labels={"app": name}))
        bound(kube, b, name)
        time.sleep(1.1)  # (whole-second creationTimestamps: b-2 is the more recent)
        kube.run("patch", "pod", name, "-n", b, "--subresource=status", "--type=merge", "-p", json.dumps(
            {"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}), check=False)
    kube.create({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "keep-b-2", "namespace": b},
                 "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "b-2"}}}})
    def guarded():
        status = (_get(kube, "pdb", b, "keep-b-2") or {}).get("status") or {}
        return status.get("currentHealthy") == 1 and status.get("disruptionsAllowed") == 0
    wait_for("the PDB's status from the disruption controller", guarded, timeout=30)
    before = pods_in(kube, a, b)
    seconds, _ = admit_and_bind(w, "a-new", a, "pdb")
    done = wait_done(w, a, "a-new")
    names = [(v["name"], s["state"]) for v, s in zip(done["plan"]["victims"], done["status"]["steps"])]
    assert names == [("b-2", "unavailable"), ("b-1", "done")], names
    after = pods_in(kube, a, b)
    check_invariants(w, before, after, [done], nominal=set())
    assert (b, "b-2") in after and (b, "b-1") not in after
    report("PDB-protected victim passed over (replanned)", seconds)
    assert seconds <= 10.0


def test_the_leader_killed_mid_plan_leaves_the_rest_to_the_other_replica_and_nothing_is_evicted_twice(world):
    w, kube, run = world, world["kube"], world["run"]
    nodes(kube, run, "kill")
    a, b = f"kill-a-{run}", f"kill-b-{run}"
    kube.create(pod("big", b, "kill", run))
    bound(kube, b, "big")
    time.sleep(1.1)  # (whole-second creationTimestamps: the small pods are the more recent, their node is freed)
    for i in range(4):
        kube.create(pod(f"small-{i}", b, "kill", run, gpus=2))
        bound(kube, b, f"small-{i}")
    lease = json.loads(kube.run("get", "lease", "allot-reclaim", "-n", w["sys"], "-o", "json").stdout)
    holder = lease["spec"]["holderIdentity"]
    leader = next(s for s in w["servers"] if f"_{s.proc.pid}_" in holder)
    other = next(s for s in w["servers"] if s is not leader)
    before = pods_in(kube, a, b)
    start = time.monotonic()
    kube.create(pod("a-new", a, "kill", run))
    # the leader carries the plan out one step at a time: kill it once the first victim is gone
    wait_for("the first victim evicted", lambda: len(before - pods_in(kube, a, b)) >= 1, timeout=20, every=0.1)
    leader.proc.send_signal(signal.SIGKILL)
    leader.proc.wait(timeout=10)
    bound(kube, a, "a-new", timeout=60)
    seconds = time.monotonic() - start
    done = wait_done(w, a, "a-new")
    assert sorted(v["name"] for v in done["plan"]["victims"]) == [f"small-{i}" for i in range(4)]
    by = {s["by"] for s in done["status"]["steps"]}
    assert len(by) == 2, done["status"]  # both replicas carried steps out
    after = pods_in(kube, a, b)
    check_invariants(w, before, after, [done], nominal={(b, "big")})
    new_holder = json.loads(kube.run("get", "lease", "allot-reclaim", "-n", w["sys"], "-o", "json").stdout)["spec"]
    assert f"_{other.proc.pid}_" in new_holder["holderIdentity"] and new_holder["leaseTransitions"] >= 1
    report("leader killed mid-plan (includes the 4 s lease expiry)", seconds)
