"""Objects Allot does not read that may still ask for GPUs: a pod template or an accelerator resource anywhere in them.

A kind with no reader would otherwise pass as "0 pods, 0 GPUs" in silence. `unread_problem`
walks the object (bounded, iteratively: a hostile object cannot make it recurse or run long)
and names the first pod-template-shaped value and the first accelerator-looking resource
it finds. `accelerator_like` is the test for a resource name (also used for resource names no
GPU dialect reads: `UncountedAccelerator`).
"""

from __future__ import annotations

from collections.abc import Mapping

from policy.subject.model import Problem

UNREAD = "UnreadWorkload"
UNCOUNTED = "UncountedAccelerator"
# Resource names of accelerators no GPU dialect counts as GPUs, but that are devices all the same.
_VENDORS = ("habana.ai/", "aws.amazon.com/neuron", "google.com/tpu", "intel.com/gpu", "huawei.com/ascend", "xilinx.com/")
_SKIP = frozenset({"metadata", "status"})  # what the object says of itself, not what it runs
# Kinds that run no pods of their own though they name templates or GPU resources (quotas, capacity, schemas, config):
# never reported. Any other kind without a reader is scanned.
RUNS_NOTHING = frozenset({
    "ConfigMap", "Secret", "Service", "ServiceAccount", "Namespace", "Node", "Endpoints", "EndpointSlice", "Event",
    "Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding", "ResourceQuota", "LimitRange", "PriorityClass",
    "PodTemplate", "ControllerRevision", "HorizontalPodAutoscaler", "PodDisruptionBudget", "NetworkPolicy", "Ingress",
    "CustomResourceDefinition", "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration",
    "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding", "APIService", "StorageClass",
    "PersistentVolume", "PersistentVolumeClaim", "VolumeAttachment", "CSIDriver", "CSINode", "RuntimeClass", "Lease",
    "ResourceClaim", "ResourceClaimTemplate", "DeviceClass", "ResourceSlice", "DeviceTaintRule",
    "ClusterQueue", "LocalQueue", "ResourceFlavor", "Cohort", "WorkloadPriorityClass", "AdmissionCheck", "Topology",
    "Queue", "HyperNode", "TrainingRuntime", "ClusterTrainingRuntime", "ServingRuntime", "ClusterServingRuntime",
    "LLMInferenceServiceConfig", "InferenceGraph", "TrainedModel", "ClusterPolicy", "NVIDIADriver", "Machine", "NodeClaim",
    "NodePool", "ScaledObject", "ServiceMonitor", "PodMonitor", "PrometheusRule", "List",
})
WALK_LIMIT = 20_000  # values looked at per object (a 5,000-manifest lint stays cheap; a huge object is cut short)


def accelerator_like(name: str) -> bool:
    """Whether a resource name looks like an accelerator (`*/gpu`, `*/vgpu`, `*gpu*`, a known device vendor)."""
    low = name.lower()
    return "gpu" in low or low.startswith(_VENDORS)


def _dotted(path: tuple) -> str:
    out = ""
    for p in path:
        out += f"[{p}]" if type(p) is int else ("." + p if out else p)
    return out


def _pod_shaped(value: Mapping) -> bool:
    """A PodTemplateSpec (`spec.containers`) or a PodSpec (`containers`, a list)."""
    spec = value.get("spec")
    if type(spec) is dict and type(spec.get("containers")) is list:
        return True
    return type(value.get("containers")) is list


def scan(obj: Mapping) -> tuple[str | None, str | None]:
    """(path of the first pod template, `path[name]` of the first accelerator-looking key) in `obj`, outside metadata and status."""
    template = resource = None
    stack: list[tuple[tuple, object]] = [((k,), v) for k, v in reversed(list(obj.items())) if k not in _SKIP and k not in ("apiVersion", "kind")]
    seen = 0
    while stack and seen < WALK_LIMIT and (template is None or resource is None):
        path, value = stack.pop()
        seen += 1
        if type(value) is dict:
            if template is None and _pod_shaped(value):
                template = _dotted(path)
            for k, v in reversed(list(value.items())):
                if type(k) is str and resource is None and accelerator_like(k):
                    resource = f"{_dotted(path)}[{k}]"
                stack.append(((*path, k), v))
        elif type(value) is list:
            stack.extend(((*path, i), v) for i, v in reversed(list(enumerate(value))))
        elif type(value) is str and resource is None and "/" in value and accelerator_like(value) and len(value) < 64:
            resource = f"{_dotted(path)} = {value}"  # e.g. SparkApplication `gpu: {name: nvidia.com/gpu}`
    return template, resource


def unread_problem(obj: Mapping, kind: str) -> Problem | None:
    """An `UnreadWorkload` problem when an object of a kind Allot does not read holds a pod template or asks an accelerator."""
    if kind in RUNS_NOTHING:
        return None
    template, resource = scan(obj)
    if template is None and resource is None:
        return None
    api = obj.get("apiVersion") if type(obj.get("apiVersion")) is str else "?"
    found = []
    if template is not None:
        found.append(f"a pod template at {template}")
    if resource is not None:
        found.append(f"an accelerator at {resource}")
    # Said first what and where: an admission warning keeps 120 characters.
    return Problem(UNREAD, f"{kind or 'object'} not read, GPUs not counted: holds {' and '.join(found)} "
                           f"({api} is a kind Allot does not read; docs/kinds.md)")
