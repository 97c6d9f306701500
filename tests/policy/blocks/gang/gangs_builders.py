"""Builders for the gang-member tests: a small fabric cluster, policy text, Kueue/coscheduling objects, reviews."""

from __future__ import annotations

from lang import compile_policies
from policy.cluster.snapshot import ClusterSnapshot
from policy.engine import Engine

H100 = "NVIDIA-H100-80GB-HBM3"
L4 = "NVIDIA-L4"
DECLS = f"""
gpu h100 {{ product "{H100}" memory 80Gi }}
gpu l4 {{ product "{L4}" memory 24Gi }}
topology fabric {{
  block "topology.acme.io/block"
  rack  "topology.acme.io/rack"
  host  "kubernetes.io/hostname"
}}
"""
# The contract's gang block: a member's `total_gpus` is its gang's inside it.
CONTRACT_GANG = """
gang training {
  for labels["acme.io/workload"] == "training"
  require min_members
  require topology fabric.rack  when total_gpus > 8
  require topology fabric.block when total_gpus > 64
  on unplaceable deny
}
"""
LABELS = {"acme.io/workload": "training"}


def engine(text: str = CONTRACT_GANG) -> Engine:
    """An Engine over the declarations plus `text`."""
    policy, diags = compile_policies([("decls.policy", DECLS), ("gang.policy", text)])
    assert policy is not None, [d.message for d in diags]
    return Engine(policy)


def node(name: str, rack: str, *, gpus: int = 8, block: str = "b1", product: str = H100) -> dict:
    """A Ready node of `product` GPUs (H100 by default) in `block`/`rack` with `gpus` allocatable."""
    labels = {"kubernetes.io/hostname": name, "topology.acme.io/block": block, "topology.acme.io/rack": rack,
              "nvidia.com/gpu.product": product}
    status = {"allocatable": {"nvidia.com/gpu": str(gpus)}, "conditions": [{"type": "Ready", "status": "True"}]}
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}, "spec": {}, "status": status}


def bound(name: str, node_name: str, gpus: int, ns: str = "other") -> dict:
    """A Running pod on `node_name` holding `gpus`."""
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns},
            "spec": {"nodeName": node_name, "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]},
            "status": {"phase": "Running"}}


def cluster(*objs) -> ClusterSnapshot:
    """A snapshot of `objs`."""
    return ClusterSnapshot.from_objects(list(objs))


def kueue_member(name: str, group: str, gpus: int, total: int, ns: str = "train") -> dict:
    """A Pod of a Kueue plain pod group (label + total-count annotation, no group object needed)."""
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": ns,
                         "labels": {**LABELS, "kueue.x-k8s.io/pod-group-name": group},
                         "annotations": {"kueue.x-k8s.io/pod-group-total-count": str(total)}},
            "spec": {"nodeSelector": {"nvidia.com/gpu.product": H100},
                     "containers": [{"name": "w", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]}}


def kueue_workload(name: str, count: int, gpus: int, ns: str = "train") -> dict:
    """A Kueue Workload of one pod set of `count` pods with `gpus` each."""
    template = {"spec": {"nodeSelector": {"nvidia.com/gpu.product": H100},
                         "containers": [{"name": "w", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]}}
    return {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "Workload",
            "metadata": {"name": name, "namespace": ns, "labels": dict(LABELS)},
            "spec": {"queueName": "q", "podSets": [{"name": "workers", "count": count, "template": template}]}}


def request(obj: dict, *, dry_run: bool = False) -> dict:
    """An AdmissionReview v1 request creating `obj`."""
    kind = obj["kind"]
    group, version = (obj["apiVersion"].split("/") + [""])[:2] if "/" in obj["apiVersion"] else ("", obj["apiVersion"])
    resource = {"Pod": "pods", "Workload": "workloads", "PodGroup": "podgroups"}[kind]
    m = obj["metadata"]
    return {"uid": f"uid-{m['name']}", "kind": {"group": group, "version": version, "kind": kind},
            "resource": {"group": group, "version": version, "resource": resource},
            "requestKind": {"group": group, "version": version, "kind": kind},
            "name": m["name"], "namespace": m["namespace"], "operation": "CREATE",
            "userInfo": {"username": "alice", "groups": ["dev"]}, "object": obj, "oldObject": None, "dryRun": dry_run}


def rack_of(patch) -> list[str] | None:
    """The rack values of the affinity a patch adds (None when it adds none)."""
    for op in patch:
        value = op.get("value")
        if "affinity" not in op["path"] and not (isinstance(value, dict) and "affinity" in value):
            continue
        text = repr(value)
        for expr in _exprs(value):
            if expr["key"] == "topology.acme.io/rack":
                return expr["values"]
        raise AssertionError(f"affinity without a rack: {text}")
    return None


def _exprs(value):
    if isinstance(value, dict):
        if "key" in value and "values" in value:
            yield value
        for v in value.values():
            yield from _exprs(v)
    elif isinstance(value, list):
        for v in value:
            yield from _exprs(v)


def podgroup(name: str, min_member: int, *, gpus: int | None = None, tasks: dict | None = None, family: str = "coscheduling",
             ns: str = "train") -> dict:
    """A coscheduling (or Volcano, with `tasks` as minTaskMember) PodGroup; `gpus` is spec.minResources' GPUs."""
    api = {"coscheduling": "scheduling.x-k8s.io/v1alpha1", "volcano": "scheduling.volcano.sh/v1beta1", "kai": "scheduling.run.ai/v2alpha2"}[family]
    spec: dict = {"minMember": min_member}
    if gpus is not None:
        spec["minResources"] = {"nvidia.com/gpu": str(gpus)}
    if tasks is not None and family == "kai":
        spec["subGroups"] = [{"name": t, "minMember": n} for t, n in tasks.items()]
    elif tasks is not None:
        spec["minTaskMember"] = dict(tasks)
    return {"apiVersion": api, "kind": "PodGroup", "metadata": {"name": name, "namespace": ns, "labels": dict(LABELS)}, "spec": spec}


def member(name: str, group: str, gpus: int, *, family: str = "coscheduling", task: str | None = None,
           product: str | None = H100, ns: str = "train") -> dict:
    """A Pod of a coscheduling, Volcano or KAI PodGroup (`task`: Volcano's volcano.sh/task-spec, KAI's subgroup label), pinned to `product`."""
    labels, annotations = dict(LABELS), {}
    if family == "coscheduling":
        labels["scheduling.x-k8s.io/pod-group"] = group
    elif family == "kai":
        annotations["pod-group-name"] = group
    else:
        annotations["scheduling.k8s.io/group-name"] = group
    if task is not None and family == "kai":
        labels["kai.scheduler/subgroup-name"] = task
    elif task is not None:
        annotations["volcano.sh/task-spec"] = task
    spec: dict = {"containers": [{"name": "w", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]}
    if product is not None:
        spec["nodeSelector"] = {"nvidia.com/gpu.product": product}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns, "labels": labels, "annotations": annotations},
            "spec": spec}
