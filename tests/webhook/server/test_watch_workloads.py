"""The watcher lists and watches the workload kinds Allot holds quota for: a `scale` is judged on the live template, a deleted workload's hold ends, a CRD that is not installed is skipped."""

import asyncio
import copy
import logging

from lang import compile_policies
from policy.cluster.snapshot import ClusterSnapshot
from policy.engine import Engine
from webhook.server.state import State
from webhook.server.watch import RESOURCES, ClusterWatcher

from tests.policy.engine.test_hold_release import dep, review, scale
from tests.policy.engine.test_workloads_decide import OBJECTS
from tests.webhook.server.test_watch import BUILTIN_WORKLOADS, FakeAPI, listing, wait_for
from tests.webhook.wh_standin import admission_module

POLICY = '''
gpu h100 { product "NVIDIA-H100-80GB-HBM3" memory 80Gi }
quota serving { for namespace == "serving"  gpus 4 }
'''


def live(obj, rv):
    """As the API server lists it: with a resourceVersion and managedFields, without kind/apiVersion on list items."""
    obj = copy.deepcopy(obj)
    obj["metadata"]["resourceVersion"] = str(rv)
    obj["metadata"]["managedFields"] = [{"manager": "kubectl-client-side-apply", "operation": "Update", "apiVersion": "apps/v1"}]
    return {k: v for k, v in obj.items() if k not in ("kind", "apiVersion")}


def watch_event(kind, obj):
    return {"type": kind, "object": {"kind": "Deployment", "apiVersion": "apps/v1", **obj}}


def engine():
    ps, diags = compile_policies([("w.policy", POLICY)])
    assert not [d for d in diags if d.severity == "error"], diags
    return Engine(ps)


def test_workloads_are_listed_and_watched_into_the_snapshot(caplog):
    rerank = dep(4)  # 4 x 1 H100: the whole quota, admitted below before the watch starts
    embed = OBJECTS["Deployment"]  # serving/embed, 3 x 0.25 GPU, created before Allot started
    api = FakeAPI({
        **{k: v for k, v in BUILTIN_WORKLOADS.items()},
        ("/api/v1/nodes", False): [(200, listing("Node", 1, []))],
        ("/api/v1/pods", False): [(200, listing("Pod", 1, []))],
        ("/api/v1/namespaces", False): [(200, listing("Namespace", 1, []))],
        ("/apis/scheduling.k8s.io/v1/priorityclasses", False): [(200, listing("PriorityClass", 1, []))],
        ("/apis/apps/v1/deployments", False): [(200, listing("Deployment", 20, [live(embed, 10), live(rerank, 11)]))],
        ("/apis/apps/v1/deployments", True): [(200, [watch_event("DELETED", live(rerank, 21))])],
    })
    api.release_pods.set()
    snap = ClusterSnapshot()
    state = State(snapshot=snap, admission=admission_module())
    e = engine()
    assert e.decide(review(rerank), snap, 0.0).allowed
    assert "wl:serving/Deployment/rerank" in snap.reservations.holds
    watcher = ClusterWatcher(state, api.api_client, resources=RESOURCES, watch_seconds=5)
    seen = {}

    async def scenario():
        task = asyncio.create_task(watcher.run())
        loop = asyncio.get_running_loop()
        seen["synced"] = await loop.run_in_executor(None, wait_for, lambda: state.cluster.synced)
        seen["released"] = await loop.run_in_executor(None, wait_for, lambda: "wl:serving/Deployment/rerank" not in snap.reservations.holds)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    with caplog.at_level(logging.INFO, logger="allot.watch"):
        try:
            asyncio.run(scenario())
        finally:
            api.close()
    assert seen["synced"] and seen["released"]  # the watch's DELETED released the hold at once, not at the expiry
    stored = snap.other("apps/v1", "Deployment", "serving", "embed")
    assert stored is not None and "managedFields" not in stored["metadata"] and stored["spec"]["replicas"] == 3
    assert snap.other("apps/v1", "Deployment", "serving", "rerank") is None
    # a scale is judged on the stored template: 3 -> 12 replicas adds 9 x 0.25 = 2.25, and only 0.75 run...
    d = e.decide(scale(12, 3) | {"name": "embed"}, snap, 1.0, reserve=False)
    assert [r.code for r in d.reasons] == [] and d.allowed, d.reasons
    # ...while 3 -> 20 adds 4.25 > 4: denied with the arithmetic, not warned as not in the cluster state
    d = e.decide(scale(20, 3) | {"name": "embed"}, snap, 1.0, reserve=False)
    assert [r.code for r in d.reasons] == ["QuotaExceeded"] and "added by this update of Deployment embed" in d.reasons[0].message
    # CRDs this cluster does not serve (the fake answers 404): counted as empty, said once each
    kinds = state.cluster.kinds
    assert kinds["JobSet.jobset.x-k8s.io"]["synced"] and kinds["JobSet.jobset.x-k8s.io"].get("absent")
    absent = [r.getMessage() for r in caplog.records if "JobSet.jobset.x-k8s.io is not served" in r.getMessage()]
    assert len(absent) == 1, absent
