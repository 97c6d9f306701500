"""Priority: the default class is set by mutation together with spec.priority and preemptionPolicy."""

from __future__ import annotations

import jsonpatch
import pytest
from tests.policy.engine.engine_builders import pod, policy, priority

from policy.admission import wrap_manifest
from policy.cluster.snapshot import ClusterSnapshot
from policy.engine import Engine

CLASSES = [priority("critical", 1000, preempts=True), priority("prod", 500), priority("batch", 100, default=True, line=3)]


def decide(obj, *, classes=CLASSES, mutate=True, operation="CREATE"):
    req = wrap_manifest(obj, user="alice", groups=[], operation=operation)["request"]
    return Engine(policy(priorities=classes)).decide(req, ClusterSnapshot(), 0.0, mutate=mutate)


def test_default_class_patch_sets_priority_and_preemption_policy():
    obj = pod(gpus=1)
    obj["spec"]["priority"] = 0  # what the API server's Priority admission already wrote
    d = decide(obj)
    assert d.allowed
    assert list(d.patch) == [
        {"op": "add", "path": "/spec/priorityClassName", "value": "batch"},
        {"op": "replace", "path": "/spec/priority", "value": 100},
        {"op": "add", "path": "/spec/preemptionPolicy", "value": "Never"},
    ]
    patched = jsonpatch.apply_patch(obj, list(d.patch))
    assert patched["spec"]["priorityClassName"] == "batch" and patched["spec"]["priority"] == 100
    assert d.blocks == ("priority batch",)


def test_default_class_that_preempts_gets_preempt_lower_priority():
    classes = [priority("critical", 1000, preempts=True, default=True)]
    d = decide(pod(gpus=1), classes=classes)
    assert {"op": "add", "path": "/spec/preemptionPolicy", "value": "PreemptLowerPriority"} in d.patch


@pytest.mark.parametrize(
    "obj, want_patch",
    [
        (pod(gpus=None), False),  # no GPU: allowed quickly with no patch
        (pod(gpus=1, priority_class="prod"), False),  # names a declared class
    ],
)
def test_no_default_patch(obj, want_patch):
    d = decide(obj)
    assert d.allowed and bool(d.patch) is want_patch


def test_validating_side_never_patches():
    assert decide(pod(gpus=1), mutate=False).patch == ()


@pytest.mark.parametrize(
    "klass, want_allowed",
    [("prod", True), ("gold", False), ("system-cluster-critical", True)],
)
def test_unknown_class_is_denied(klass, want_allowed):
    d = decide(pod(gpus=1, priority_class=klass))
    assert d.allowed is want_allowed
    if not want_allowed:
        (r,) = d.denials
        assert r.code == "UnknownPriorityClass" and "'gold'" in r.message and "batch, critical, prod" in r.message


def test_unknown_class_on_update_is_not_rejudged():
    # priorityClassName is immutable; only CREATE is judged.
    assert decide(pod(gpus=1, priority_class="gold"), operation="UPDATE").allowed


# ---- the live PriorityClass decides what the patch says (issue 11, problem 1) ----------

def live_class(name, value, policy=None, global_default=False):
    """A PriorityClass as `kubectl get -o yaml` shows it (preemptionPolicy absent = never written)."""
    pc = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name}, "value": value,
          "globalDefault": global_default}
    if policy is not None:
        pc["preemptionPolicy"] = policy
    return pc


@pytest.mark.parametrize(
    "live, want_priority, want_policy",
    [
        (None, 100, "Never"),  # no such class yet: the declaration
        (live_class("batch", 100, "Never"), 100, "Never"),  # agrees
        (live_class("batch", 100, "PreemptLowerPriority"), 100, "PreemptLowerPriority"),  # problem 1
        (live_class("batch", 250, "Never"), 250, "Never"),  # another value
        (live_class("batch", 7), 7, "PreemptLowerPriority"),  # absent policy: what the API server stores
        (live_class("other", 5, "PreemptLowerPriority"), 100, "Never"),  # another class is not ours
    ],
)
def test_default_patch_carries_the_live_class(live, want_priority, want_policy):
    obj = pod(gpus=1)
    obj["spec"]["priority"] = 0
    req = wrap_manifest(obj, user="alice", groups=[], operation="CREATE")["request"]
    snap = ClusterSnapshot.from_objects([live] if live else [])
    d = Engine(policy(priorities=CLASSES)).decide(req, snap, 0.0, mutate=True)
    patched = jsonpatch.apply_patch(obj, list(d.patch))
    assert d.allowed
    assert (patched["spec"]["priorityClassName"], patched["spec"]["priority"], patched["spec"]["preemptionPolicy"]) == (
        "batch", want_priority, want_policy)


def test_default_follows_a_live_class_changed_after_compile():
    # The snapshot is live: a class re-created with another value changes the next patch, no reload needed.
    snap = ClusterSnapshot.from_objects([live_class("batch", 100, "Never")])
    engine = Engine(policy(priorities=CLASSES))
    req = wrap_manifest(pod(gpus=1), user="alice", groups=[], operation="CREATE")["request"]
    snap.apply("DELETED", live_class("batch", 100, "Never"))
    snap.apply("ADDED", live_class("batch", 300, "PreemptLowerPriority"))
    ops = {op["path"]: op["value"] for op in engine.decide(req, snap, 0.0, mutate=True).patch}
    assert (ops["/spec/priority"], ops["/spec/preemptionPolicy"]) == (300, "PreemptLowerPriority")


def test_upstream_podgroup_default_sets_class_and_priority_only():
    # scheduling.k8s.io PodGroups are admitted by the Priority plugin too (1.36, WorkloadAwarePreemption);
    # they have spec.priority but no preemptionPolicy.
    from policy.context import Context
    from policy.blocks.priority import make_check
    from policy.subject.model import Workload

    obj = {"apiVersion": "scheduling.k8s.io/v1alpha2", "kind": "PodGroup", "metadata": {"name": "g", "namespace": "a"},
           "spec": {"schedulingPolicy": {"gang": {"minCount": 2}}}}
    check = make_check(tuple(CLASSES), "enforce")
    snap = ClusterSnapshot.from_objects([live_class("batch", 120, "PreemptLowerPriority")])
    w = Workload(kind="PodGroup", namespace="a", pods=2, gpus=1000, total_gpus=2000, resource="podgroups", obj=obj)
    ctx = Context(w, snap, 0.0, mutate=True)
    check(ctx)
    patched = jsonpatch.apply_patch(obj, list(ctx.patch_ops()))
    assert patched["spec"].get("priorityClassName") == "batch" and patched["spec"]["priority"] == 120
    assert "preemptionPolicy" not in patched["spec"]
    other = {**obj, "apiVersion": "scheduling.x-k8s.io/v1alpha1"}  # coscheduling: the Priority plugin ignores it
    ctx = Context(Workload(kind="PodGroup", namespace="a", pods=2, gpus=1000, total_gpus=2000, obj=other), snap, 0.0, mutate=True)
    check(ctx)
    assert ctx.patch_ops() == ()


@pytest.mark.parametrize(
    "klass, live_priority, want_blocks, want_note",
    [
        ("prod", None, ("priority prod",), "class prod is declared (500)"),
        ("prod", 7, ("priority prod",), "class prod is declared (500); the live class says 7"),
        (None, None, ("priority batch",), "no priority class named; default batch (100, Never: declared; no such class in the cluster yet) applies"),
    ],
)
def test_the_priority_note_is_written_when_explaining_and_the_blocks_are_the_same_either_way(klass, live_priority, want_blocks, want_note):
    """The note is formatted only for --explain (not on every pod): explain still shows it, decide names the same blocks."""
    obj = pod(gpus=1, priority_class=klass)
    if live_priority is not None:
        obj["spec"]["priority"] = live_priority
    req = wrap_manifest(obj, user="alice", groups=[], operation="CREATE")["request"]
    engine = Engine(policy(priorities=CLASSES))
    decision, trace, _ = engine.explain(req, ClusterSnapshot(), 0.0)
    assert decision.blocks == want_blocks
    assert [(b, t) for b, _, t in trace if b.startswith("priority")] == [(want_blocks[0], want_note)]
    assert all(loc.count(":") >= 2 for b, loc, _ in trace if b.startswith("priority"))  # path:line:col
    assert engine.decide(req, ClusterSnapshot(), 0.0, reserve=False).blocks == want_blocks
