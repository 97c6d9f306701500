"""Serving kinds: KServe InferenceService and LLMInferenceService, KAITO InferenceSet.

- InferenceService (`serving.kserve.io/v1beta1`): `spec.predictor`, `spec.transformer` and
  `spec.explainer` are each a pod spec inline plus a model-format field (`model`, `sklearn`,
  `pytorch`, ..., `art`) that is one more container, `resources` on it directly. Each runs
  `minReplicas` pods at admission (default 1; 0 scales to zero); `maxReplicas` is the ceiling
  its autoscaler may add later, each pod judged as it comes. `predictor.workerSpec` (multi-node)
  adds `pipelineParallelSize - 1` worker pods per replica (default size 1).
- LLMInferenceService (`serving.kserve.io/v1alpha1`): `spec.template` (a PodSpec) runs `replicas`
  pods (or `scaling.minReplicas`, default 1); with `spec.worker` each replica is a group of
  `parallelism` size pods (the head runs the template, the rest the worker spec:
  size = data / dataLocal when data-parallel, else pipeline, else 1); `spec.prefill` is a second such workload.
- InferenceSet (`kaito.sh`): `spec.replicas` (default 1) Workspaces of `spec.template`, each read
  as a KAITO Workspace (policy/subject/dialects/kaito.py).
None is a gang at Allot's level: serving replicas start one by one.
Field names as in kserve/kserve pkg/apis/serving and kaito-project/kaito api/v1beta1.
"""

from __future__ import annotations

from collections.abc import Mapping

from policy.subject.model import Problem

from .common import BAD_OBJECT
from .kaito import read_workspace
from .workload_parts import Template, _count, _object, _pod

COMPONENTS = ("predictor", "transformer", "explainer")
# Model-format fields of a component: each is a container (`resources` directly on it).
FORMATS = ("model", "sklearn", "xgboost", "tensorflow", "pytorch", "triton", "onnx", "huggingface", "pmml",
           "lightgbm", "paddle", "art", "alibi")
# Component fields that are not pod spec fields (KServe's ComponentExtensionSpec and the worker spec).
EXTENSION = frozenset({"minReplicas", "maxReplicas", "scaleTarget", "scaleMetric", "scaleMetricType", "autoScaling",
                       "containerConcurrency", "timeout", "canaryTrafficPercent", "logger", "batcher", "labels",
                       "annotations", "deploymentStrategy", "storageUris", "workerSpec", *FORMATS})


def _component_pod(comp: Mapping, ns, at: str, problems: list) -> tuple[dict, bool]:
    """(Pod of a component, whether its containers sit where the object has them: no model-format container prepended)."""
    spec = {k: v for k, v in comp.items() if k not in EXTENSION}
    containers = spec.get("containers")
    own = containers if type(containers) is list else []
    if containers is not None and type(containers) is not list:
        problems.append(Problem(BAD_OBJECT, f"{at}.containers: expected a list, got {type(containers).__name__}"))
    fmt = []
    for name in FORMATS:
        f = comp.get(name)
        if f is not None:
            f = _object(f, f"{at}.{name}", problems)
            fmt.append({"name": "kserve-container", "resources": f.get("resources")})
    meta = {}
    if type(comp.get("labels")) is dict:
        meta["labels"] = comp["labels"]
    if type(comp.get("annotations")) is dict:
        meta["annotations"] = comp["annotations"]
    pod = _pod({"metadata": meta, "spec": {**spec, "containers": [*fmt, *own]}}, ns)
    return pod, not fmt


def _inference_service(obj: Mapping, spec: Mapping, ns, problems: list) -> tuple[list[Template], bool]:
    out = []
    for name in COMPONENTS:
        if spec.get(name) is None:
            continue
        at = f"spec.{name}"
        comp = _object(spec.get(name), at, problems)
        replicas = _count(comp.get("minReplicas"), 1, f"{at}.minReplicas", problems)
        _count(comp.get("maxReplicas"), 0, f"{at}.maxReplicas", problems)  # checked, not counted: the autoscaler's ceiling
        pod, in_place = _component_pod(comp, ns, at, problems)
        out.append(Template(name, replicas, None, pod, ("spec", name) if in_place else None, at))
        worker = comp.get("workerSpec") if name == "predictor" else None
        if worker is not None:
            worker = _object(worker, f"{at}.workerSpec", problems)
            size = _count(worker.get("pipelineParallelSize"), 1, f"{at}.workerSpec.pipelineParallelSize", problems)
            wspec = {k: v for k, v in worker.items() if k not in ("pipelineParallelSize", "tensorParallelSize")}
            wpod = _pod({"spec": wspec}, ns)
            out.append(Template("worker", replicas * max(0, size - 1), None, wpod, ("spec", name, "workerSpec")))
    return out, False


def _group_size(par: Mapping, at: str, problems: list) -> int:
    """Pods per replica of a multi-node LLMInferenceService (KServe's ParallelismSpec.GetSize)."""
    data, local, pipeline = par.get("data"), par.get("dataLocal"), par.get("pipeline")
    if data or local:
        d = _count(data, 1, f"{at}.parallelism.data", problems) or 1
        dl = _count(local, 1, f"{at}.parallelism.dataLocal", problems) or 1
        return max(d // dl, 1)
    if pipeline:
        return _count(pipeline, 1, f"{at}.parallelism.pipeline", problems) or 1
    return 1


def _llm_workload(ws: Mapping, name: str, prefix: tuple[str, ...], ns, problems: list) -> list[Template]:
    at = ".".join(prefix)
    scaling = _object(ws.get("scaling"), f"{at}.scaling", problems)
    if ws.get("replicas") is not None:
        replicas = _count(ws.get("replicas"), 1, f"{at}.replicas", problems)
    else:
        replicas = _count(scaling.get("minReplicas"), 1, f"{at}.scaling.minReplicas", problems)
    meta = {k: ws[k] for k in ("labels", "annotations") if type(ws.get(k)) is dict}
    template = _object(ws.get("template"), f"{at}.template", problems)
    head = Template(name, replicas, None, _pod({"metadata": meta, "spec": template}, ns), (*prefix, "template"))
    if ws.get("worker") is None:
        return [head]
    size = _group_size(_object(ws.get("parallelism"), f"{at}.parallelism", problems), at, problems)
    worker = _pod({"metadata": meta, "spec": _object(ws.get("worker"), f"{at}.worker", problems)}, ns)
    return [head, Template(f"{name}-worker", replicas * (size - 1), None, worker, (*prefix, "worker"))]


def _llm_inference_service(obj: Mapping, spec: Mapping, ns, problems: list) -> tuple[list[Template], bool]:
    out = _llm_workload(spec, "decode" if spec.get("prefill") is not None else "main", ("spec",), ns, problems)
    if spec.get("prefill") is not None:
        out += _llm_workload(_object(spec.get("prefill"), "spec.prefill", problems), "prefill", ("spec", "prefill"), ns, problems)
    return out, False


def read_inference_set(obj: Mapping, ns, snapshot, problems: list) -> list[Template]:
    """An InferenceSet: `spec.replicas` Workspaces of `spec.template`, pinned to `spec.labelSelector`."""
    spec = _object(obj.get("spec"), "spec", problems)
    replicas = _count(spec.get("replicas"), 1, "spec.replicas", problems)
    tpl = _object(spec.get("template"), "spec.template", problems)
    resource = dict(_object(tpl.get("resource"), "spec.template.resource", problems))
    if spec.get("labelSelector") is not None:
        resource["labelSelector"] = spec.get("labelSelector")
    workspace = {"resource": resource, "inference": tpl.get("inference")}
    inner: list = []
    sets = read_workspace(workspace, ns, snapshot, inner)
    problems.extend(Problem(p.code, "spec.template." + p.message) for p in inner)
    return [Template(s.name, replicas * s.count, None, s.pod, ("spec", "template", *s.spec_path) if s.spec_path else None,
                     "spec.template." + s.where) for s in sets]


KINDS = {
    ("serving.kserve.io", "InferenceService"): "inferenceservice",
    ("serving.kserve.io", "LLMInferenceService"): "llminferenceservice",
    ("kaito.sh", "InferenceSet"): "inferenceset",
}
READERS = {"inferenceservice": _inference_service, "llminferenceservice": _llm_inference_service}
GANG_READERS: frozenset[str] = frozenset()
RESOURCES = {
    "InferenceService": ("inferenceservices", "serving.kserve.io", ("v1beta1",)),
    "LLMInferenceService": ("llminferenceservices", "serving.kserve.io", ("v1alpha1",)),
    "InferenceSet": ("inferencesets", "kaito.sh", ("v1beta1", "v1alpha1")),
}
