"""Allot in a real API server's admission chain: decisions, patches, quota, exec and what never reaches it."""

from __future__ import annotations

import json

import pytest

from kit import GPU, H100, RACK, gpu_pod, wait_for

pytestmark = pytest.mark.e2e


def ns(cluster, prefix: str) -> str:
    """This run's namespace of a prefix (q quota, s set, g gang, a agents, p priority, o ordinary)."""
    return f"{prefix}-{cluster['run']}"


def decided(allot, name: str) -> list[dict]:
    """Decision-log lines about an object name."""
    return [d for d in allot.decisions() if d.get("name") == name]


# ---- decisions as the API server reports them -----------------------------------------------


def test_denial_message_is_what_kubectl_create_prints(allot, kube, cluster):
    r = kube.create(gpu_pod("too-big", ns(cluster, "o"), gpus=9), check=False)
    assert r.returncode != 0
    # The mutating entry runs first in the chain and decides the same: its denial is the one reported.
    assert ('Error from server (Forbidden): error when creating "STDIN": admission webhook "pods.mutate.allot.io" '
            "denied the request: allot denied: rule at-most-eight: too-big: at most 8 GPUs per pod, asked 9 "
            "(e2e.policy:16:3)") in r.stderr, r.stderr
    assert kube.run("get", "pod", "too-big", "-n", ns(cluster, "o"), check=False).returncode != 0  # not stored


def test_a_warn_rule_is_a_kubectl_warning_and_the_pod_is_stored(allot, kube, cluster):
    r = kube.create(gpu_pod("warned", ns(cluster, "o"), labels={"e2e": "warn"}))
    assert "Warning: " in r.stderr and "warned: GPU pods should name an owner" in r.stderr, r.stderr
    assert kube.get("pod", "warned", ns(cluster, "o"))["metadata"]["name"] == "warned"


# ---- priority defaulting the API server accepts (issue 11, problem 1) --------------------------


def test_default_class_with_a_preempting_live_class_is_accepted(allot, kube, cluster):
    live = kube.get("priorityclass", "batch")
    assert live["preemptionPolicy"] == "PreemptLowerPriority"  # the cluster's, not the declared Never
    kube.create(gpu_pod("defaulted", ns(cluster, "p")))
    spec = kube.get("pod", "defaulted", ns(cluster, "p"))["spec"]
    assert (spec["priorityClassName"], spec["priority"], spec["preemptionPolicy"]) == ("batch", 100, "PreemptLowerPriority")


def test_the_declared_policy_in_the_patch_is_what_the_api_server_refuses(allot, kube, cluster):
    # What Allot used to write (Never under a class that says PreemptLowerPriority), sent by hand: the
    # Priority plugin refuses it with the message of the issue, so the test above is not vacuous.
    pod = gpu_pod("by-hand", ns(cluster, "p"), priorityClassName="batch", preemptionPolicy="Never")
    r = kube.create(pod, "--dry-run=server", check=False)
    assert r.returncode != 0
    assert ("the string value of PreemptionPolicy (Never) must not be provided in pod spec; priority admission "
            "controller computed PreemptLowerPriority from the given PriorityClass name") in r.stderr


def test_drift_of_the_live_class_is_reported(allot, kube, cluster):
    drift = allot.readyz()["priority_classes"]["drift"]
    assert {(d["class"], d["field"], d["live"]) for d in drift} == {("batch", "preemptionPolicy", "PreemptLowerPriority")}
    assert allot.metric("allot_priority_class_drift", **{"class": "batch", "field": "preemptionPolicy"}) == 1.0
    # `prod` came from allot compile's priorityclasses.yaml and agrees: the compile output is the fix.
    prod = kube.get("priorityclass", "prod")
    assert (prod["value"], prod["preemptionPolicy"], prod.get("globalDefault", False)) == (500, "PreemptLowerPriority", False)


def test_a_declared_class_named_by_the_pod_is_not_patched(allot, kube, cluster):
    kube.create(gpu_pod("named", ns(cluster, "p"), priorityClassName="prod"))
    spec = kube.get("pod", "named", ns(cluster, "p"))["spec"]
    assert (spec["priorityClassName"], spec["priority"], spec["preemptionPolicy"]) == ("prod", 500, "PreemptLowerPriority")


# ---- rule `set`, keys with `/` and `~` ----------------------------------------------------------


def test_set_rules_land_on_the_stored_pod(allot, kube, cluster):
    kube.create(gpu_pod("tagged", ns(cluster, "s"), labels={"app": "x"}))
    meta = kube.get("pod", "tagged", ns(cluster, "s"))["metadata"]
    assert meta["labels"] == {"app": "x", "acme.io/team": "ml"}  # added into an existing map: /metadata/labels/acme.io~1team
    assert meta["annotations"]["acme.io/owner"] == "e2e"  # a missing map: one add of /metadata/annotations


def test_set_replaces_a_value_under_a_slashed_key(allot, kube, cluster):
    kube.create(gpu_pod("retag", ns(cluster, "s"), labels={"acme.io/team": "web"}, annotations={"acme.io/owner": "x"}))
    meta = kube.get("pod", "retag", ns(cluster, "s"))["metadata"]
    assert (meta["labels"]["acme.io/team"], meta["annotations"]["acme.io/owner"]) == ("ml", "e2e")


def test_a_tilde_key_is_patched_exactly_and_then_judged_by_validation(allot, kube, cluster):
    # `~` is not valid in an annotation key, so no pod can store one; but the API server applies the patch
    # first: its validation error names the exact key, which only a correct `~0` escape produces (a wrong
    # pointer fails to apply with a different message).
    pod = gpu_pod("tilde", ns(cluster, "s"), labels={"e2e": "tilde"})
    r = kube.create(pod, "--dry-run=server", check=False)
    assert r.returncode != 0
    assert 'metadata.annotations: Invalid value: "acme.io/a~b"' in r.stderr, r.stderr
    assert "jsonpatch" not in r.stderr.lower()


# ---- gang node-affinity pinning ------------------------------------------------------------------


def test_gang_members_are_pinned_to_the_rack_that_holds_the_gang(allot, kube, cluster):
    g = ns(cluster, "g")
    labels = {"kueue.x-k8s.io/pod-group-name": "train"}
    annotations = {"kueue.x-k8s.io/pod-group-total-count": "3"}
    # The last member already has required node affinity of its own: the rack is added into its term.
    own = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "nvidia.com/gpu.product", "operator": "In", "values": [H100]}]}]}}}
    for i in range(3):  # 3 x 4 GPUs: only rack r1 (2 nodes x 8) holds 12
        extra = {"affinity": own} if i == 2 else {}
        kube.create(gpu_pod(f"train-{i}", g, gpus=4, labels=labels, annotations=annotations, **extra))
    racks = set()
    for i in range(3):
        pod = kube.get("pod", f"train-{i}", g)
        terms = pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
        assert len(terms) == 1
        exprs = [e for e in terms[0]["matchExpressions"] if e["key"] == RACK]
        assert [(e["operator"], len(e["values"])) for e in exprs] == [("In", 1)]
        racks.add(exprs[0]["values"][0])
        assert "allot.dev/reservation" in pod["metadata"]["annotations"]
        if i == 2:
            assert {"key": "nvidia.com/gpu.product", "operator": "In", "values": [H100]} in terms[0]["matchExpressions"]
    assert racks == {f"r1-{cluster['run']}"}


def test_a_gang_no_rack_holds_is_denied(allot, kube, cluster):
    labels = {"kueue.x-k8s.io/pod-group-name": "huge"}
    annotations = {"kueue.x-k8s.io/pod-group-total-count": "5"}  # 5 x 8 = 40 GPUs; the racks hold 16 and 8
    r = kube.create(gpu_pod("huge-0", ns(cluster, "g"), gpus=8, labels=labels, annotations=annotations), check=False)
    assert r.returncode != 0 and "denied the request: allot denied: gang racks: topology fabric has room for" in r.stderr
    assert "of 5 pods of 8 GPUs" in r.stderr, r.stderr


# ---- live quota accumulation over real creates --------------------------------------------------


def test_quota_counts_real_pods_and_frees_on_delete(allot, kube, cluster):
    q = ns(cluster, "q")
    kube.create(gpu_pod("q1", q, gpus=2))
    kube.create(gpu_pod("q2", q, gpus=2))
    r = kube.create(gpu_pod("q3", q, gpus=1), check=False)
    assert r.returncode != 0 and "e2e-quota" in r.stderr and "4 in use" in r.stderr, r.stderr
    kube.run("delete", "pod", "q1", "-n", q, "--grace-period=0", "--force")  # unscheduled: gone at once

    def admitted():
        return kube.create(gpu_pod("q3", q, gpus=1), check=False).returncode == 0

    wait_for("the quota to see q1 deleted", admitted, timeout=30, every=0.5)
    assert sum(int(p["spec"]["containers"][0]["resources"]["limits"][GPU])
               for p in json.loads(kube.run("get", "pods", "-n", q, "-o", "json").stdout)["items"]) == 3


# ---- CONNECT: exec by an agent identity ----------------------------------------------------------


def test_agent_exec_outside_its_namespace_is_denied_by_allot(allot, kube, cluster):
    agent = f"e2e-agent-{cluster['run']}"
    for where in (ns(cluster, "a"), ns(cluster, "o")):
        kube.create(gpu_pod("target", where, gpus=None))
        # RBAC lets the agent exec anywhere, so whatever refuses it below is admission.
        kube.run("create", "rolebinding", "agent-exec", "--clusterrole=admin", f"--user={agent}", "-n", where)
    denied = kube.run("--as", agent, "exec", "-n", ns(cluster, "o"), "target", "--", "true", check=False)
    assert denied.returncode != 0
    assert 'admission webhook "agents.validate.allot.io" denied the request' in denied.stderr, denied.stderr
    allowed = kube.run("--as", agent, "exec", "-n", ns(cluster, "a"), "target", "--", "true", check=False)
    # Admitted: the API server goes on to the kubelet, and this kit has none (the pod has no node).
    assert allowed.returncode != 0 and "denied the request" not in allowed.stderr, allowed.stderr

    def connects():
        got = [d for d in decided(allot, "target") if d["operation"] == "CONNECT"]
        return got if {d["namespace"] for d in got} == {ns(cluster, "a"), ns(cluster, "o")} else None

    seen = wait_for("both exec decisions in the log", connects, timeout=10)
    # kubectl tries websockets, then SPDY: one CONNECT review per attempt, all decided the same way.
    assert {(d["namespace"], d["result"]) for d in seen} == {(ns(cluster, "a"), "allowed"), (ns(cluster, "o"), "denied")}


# ---- ordinary traffic never reaches the webhook --------------------------------------------------


def test_ordinary_objects_are_never_sent_to_allot(allot, kube, cluster):
    o = ns(cluster, "o")
    before = allot.metric("allot_decisions")
    kube.create(gpu_pod("plain", o, gpus=None))
    kube.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "plain-cm", "namespace": o}, "data": {"k": "v"}})
    kube.create({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "plain-svc", "namespace": o},
                 "spec": {"ports": [{"port": 80}]}})
    kube.run("label", "pod", "plain", "-n", o, "touched=yes")
    kube.run("delete", "configmap", "plain-cm", "-n", o)
    # A GPU pod afterwards is seen: the log is live, so the absence of the others means something.
    kube.create(gpu_pod("marker", o))
    wait_for("the marker pod's decisions", lambda: decided(allot, "marker"), timeout=10)
    for name in ("plain", "plain-cm", "plain-svc"):
        assert decided(allot, name) == [], name
    after = allot.metric("allot_decisions")
    marker = decided(allot, "marker")
    assert {d["endpoint"] for d in marker} == {"mutate", "validate"}
    assert after - before == len(marker)  # nothing else was decided meanwhile


# ---- upstream PodGroups: only class-less ones reach the default-priority entry --------------------


def test_only_classless_upstream_podgroups_reach_the_mutating_entry(allot, kube, cluster):
    rows = [line.split() for line in kube.run("api-resources", "--api-group=scheduling.k8s.io", "--no-headers").stdout.splitlines()]
    versions = [r[-3] for r in rows if r and r[0] == "podgroups"]  # NAME [SHORTNAMES] APIVERSION NAMESPACED KIND
    if not versions:
        pytest.skip("the kit serves no scheduling.k8s.io PodGroups (start it with ALPHA=1)")
    o, version = ns(cluster, "o"), versions[0]

    def group(name, **spec):
        return {"apiVersion": version, "kind": "PodGroup", "metadata": {"name": name, "namespace": o},
                "spec": {"schedulingPolicy": {"gang": {"minCount": 2}}, **spec}}

    kube.create(group("pg-plain"))
    named = kube.create(group("pg-named", priorityClassName="prod"), check=False)
    assert named.returncode == 0 or "priorityClassName" in named.stderr, named.stderr  # gate off: the field is refused
    seen = wait_for("pg-plain's mutate decision",
                    lambda: [d for d in decided(allot, "pg-plain") if d["endpoint"] == "mutate"], timeout=10)
    assert [(d["kind"], d["result"]) for d in seen] == [("PodGroup", "allowed")]
    assert [d for d in decided(allot, "pg-named") if d["endpoint"] == "mutate"] == []
    # The watcher lists and watches them too (the snapshot's gang objects), not "absent".
    status = allot.readyz()["cluster"]["kinds"]["PodGroup.scheduling.k8s.io"]
    assert status["synced"] and not status.get("absent"), status
    wait_for("the PodGroups' watch events", lambda: allot.metric(
        "allot_watch_events", kind="PodGroup.scheduling.k8s.io", type="ADDED") >= (2 if named.returncode == 0 else 1))
    spec = kube.get(f"podgroups.{version.split('/')[1]}.scheduling.k8s.io", "pg-named", o)["spec"]
    if spec.get("priorityClassName"):  # WorkloadAwarePreemption on: the Priority plugin resolved the group's class
        assert spec["priority"] == 500


# ---- last: a PriorityClass re-created while Allot runs (the watch keeps the patch right) -----------


def test_a_class_recreated_with_other_values_is_followed_without_a_reload(allot, kube, cluster):
    kube.run("delete", "priorityclass", "batch")
    kube.create({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": "batch"},
                 "value": 150, "preemptionPolicy": "Never", "globalDefault": False})

    def value_drift():
        got = [d for d in allot.readyz()["priority_classes"]["drift"] if d["class"] == "batch"]
        return got if any(d["field"] == "value" for d in got) else None  # not the moment it was missing

    drift = wait_for("the watch to deliver the new batch class", value_drift, timeout=20)
    assert [(d["field"], d["declared"], d["live"]) for d in drift] == [("value", 100, 150)]  # Never now agrees
    kube.create(gpu_pod("after-recreate", ns(cluster, "p")))
    spec = kube.get("pod", "after-recreate", ns(cluster, "p"))["spec"]
    assert (spec["priorityClassName"], spec["priority"], spec["preemptionPolicy"]) == ("batch", 150, "Never")
