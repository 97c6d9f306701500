"""Small builders of Kubernetes objects and admission requests for policy tests (others may import these)."""

from __future__ import annotations

import itertools

from policy.cluster.snapshot import ClusterSnapshot

_uid = itertools.count(1)


def meta(name, namespace=None, labels=None, annotations=None, **extra) -> dict:
    """ObjectMeta with a uid and resourceVersion, as kubectl prints it."""
    n = next(_uid)
    m = {"name": name, "uid": f"00000000-0000-0000-0000-{n:012d}", "resourceVersion": str(1000 + n),
         "creationTimestamp": "2026-11-30T06:00:00Z"}
    if namespace is not None:
        m["namespace"] = namespace
    if labels:
        m["labels"] = dict(labels)
    if annotations:
        m["annotations"] = dict(annotations)
    m.update(extra)
    return m


def container(name="main", limits=None, requests=None, privileged=None, restart_policy=None) -> dict:
    """A container asking `limits`/`requests` (e.g. {"nvidia.com/gpu": "1"})."""
    c = {"name": name, "image": "busybox"}
    res = {}
    if limits is not None:
        res["limits"] = dict(limits)
    if requests is not None:
        res["requests"] = dict(requests)
    if res:
        c["resources"] = res
    if privileged is not None:
        c["securityContext"] = {"privileged": privileged}
    if restart_policy is not None:
        c["restartPolicy"] = restart_policy
    return c


def gpu_container(n="1", **more) -> dict:
    """A container with `nvidia.com/gpu: n` limits plus any other resources."""
    return container(limits={"nvidia.com/gpu": n, **more})


def pod(name="p", namespace="team-a", containers=None, labels=None, annotations=None, node=None,
        phase=None, gpus=None, init_containers=None, **spec) -> dict:
    """A Pod; `gpus="2"` is a shortcut for one container with nvidia.com/gpu limits."""
    if containers is None:
        containers = [gpu_container(gpus)] if gpus is not None else [container()]
    s = {"containers": list(containers), **spec}
    if init_containers:
        s["initContainers"] = list(init_containers)
    if node:
        s["nodeName"] = node
    p = {"apiVersion": "v1", "kind": "Pod", "metadata": meta(name, namespace, labels, annotations), "spec": s}
    if phase:
        p["status"] = {"phase": phase}
    return p


def node(name, product="NVIDIA-H100-80GB-HBM3", memory_mib="81559", gpus="8", labels=None) -> dict:
    """A GPU Node with GFD labels and allocatable nvidia.com/gpu (product=None for a CPU node)."""
    lab = {"kubernetes.io/hostname": name}
    alloc = {"cpu": "64", "memory": "512Gi", "pods": "110"}
    if product:
        lab.update({"nvidia.com/gpu.product": product, "nvidia.com/gpu.count": gpus})
        if memory_mib:
            lab["nvidia.com/gpu.memory"] = memory_mib
        alloc["nvidia.com/gpu"] = gpus
    lab.update(labels or {})
    return {"apiVersion": "v1", "kind": "Node", "metadata": meta(name, labels=lab),
            "status": {"capacity": dict(alloc), "allocatable": alloc}}


def namespace(name, labels=None) -> dict:
    """A Namespace with the automatic metadata.name label."""
    return {"apiVersion": "v1", "kind": "Namespace",
            "metadata": meta(name, labels={"kubernetes.io/metadata.name": name, **(labels or {})})}


def priority_class(name, value, preempts=False) -> dict:
    """A scheduling.k8s.io/v1 PriorityClass."""
    return {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": meta(name), "value": value,
            "preemptionPolicy": "PreemptLowerPriority" if preempts else "Never"}


def podgroup(name, namespace="team-a", api="scheduling.x-k8s.io/v1alpha1", **spec) -> dict:
    """A PodGroup of any dialect (`api` picks it: coscheduling, scheduling.volcano.sh/v1beta1, scheduling.run.ai/v2alpha2, scheduling.k8s.io/v1alpha2)."""
    return {"apiVersion": api, "kind": "PodGroup", "metadata": meta(name, namespace), "spec": spec}


def workload(name, namespace="team-a", api="scheduling.k8s.io/v1alpha1", **spec) -> dict:
    """A Workload (upstream scheduling.k8s.io or kueue.x-k8s.io/v1beta1)."""
    return {"apiVersion": api, "kind": "Workload", "metadata": meta(name, namespace), "spec": spec}


def claim(name, namespace="team-a", requests=(), api="resource.k8s.io/v1") -> dict:
    """A ResourceClaim with `spec.devices.requests`."""
    return {"apiVersion": api, "kind": "ResourceClaim", "metadata": meta(name, namespace),
            "spec": {"devices": {"requests": list(requests)}}}


def claim_template(name, namespace="team-a", requests=(), api="resource.k8s.io/v1") -> dict:
    """A ResourceClaimTemplate with `spec.spec.devices.requests`."""
    return {"apiVersion": api, "kind": "ResourceClaimTemplate", "metadata": meta(name, namespace),
            "spec": {"spec": {"devices": {"requests": list(requests)}}}}


def device_request(name="gpu", device_class="gpu.nvidia.com", count=None, memory=None, v1=True) -> dict:
    """A DRA device request, v1 (`exactly`) or v1beta1 (flat) shape."""
    body = {"deviceClassName": device_class}
    if count is not None:
        body["count"] = count
    if memory is not None:
        body["capacity"] = {"requests": {"memory": memory}}
    return {"name": name, "exactly": body} if v1 else {"name": name, **body}


def request(obj=None, operation="CREATE", user="alice", groups=("dev",), namespace=None, name=None,
            resource="pods", sub=None, kind=None, old=None, dry_run=False) -> dict:
    """An AdmissionReview v1 `request` object around `obj`."""
    m = (obj or {}).get("metadata") or {}
    return {
        "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
        "kind": {"group": "", "version": "v1", "kind": kind or (obj or {}).get("kind") or "Pod"},
        "resource": {"group": "", "version": "v1", "resource": resource},
        "subResource": sub,
        "requestKind": {"group": "", "version": "v1", "kind": kind or (obj or {}).get("kind") or "Pod"},
        "name": name if name is not None else m.get("name"),
        "namespace": namespace if namespace is not None else m.get("namespace"),
        "operation": operation,
        "userInfo": {"username": user, "groups": list(groups)},
        "object": obj,
        "oldObject": old,
        "dryRun": dry_run,
    }


def snapshot(*objs) -> ClusterSnapshot:
    """A ClusterSnapshot holding `objs`."""
    return ClusterSnapshot.from_objects(objs)
