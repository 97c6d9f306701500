"""Batch kinds beside batch/v1 Job: CronJob (batch/v1 and Volcano's), Volcano Job, and the CodeFlare AppWrapper.

- A CronJob is judged as one run: the Job of `spec.jobTemplate` (suspended with `spec.suspend`).
  `concurrencyPolicy: Allow` (the default) lets runs overlap: still one run is counted, and
  the `OverlappingRuns` note says so when the run asks GPUs (each run's Job is judged when made).
- A Volcano Job (`batch.volcano.sh/v1alpha1`) runs `spec.tasks[]` (`replicas`, absent 0, as the
  Go type has it) as one gang; its PodGroup's `minMember` is `spec.minAvailable`, defaulted as
  Volcano's webhook does to the sum of each task's `minAvailable` (else its replicas).
- An AppWrapper (`workload.codeflare.dev/v1beta2`) wraps `spec.components[].template` objects;
  `podSets[].path` names each pod template (`replicas` default 1); a component without
  podSets is read by its own kind's reader. All of it is one gang, as Kueue admits it.
Field names as in volcano-sh/volcano pkg/apis/batch/v1alpha1 and project-codeflare/appwrapper v1beta2.
"""

from __future__ import annotations

from collections.abc import Mapping

from policy.subject.model import Problem

from .common import BAD_OBJECT
from .unread import RUNS_NOTHING, UNREAD, accelerator_like
from .workload_parts import Template, _count, _job_pods, _list, _map, _object, _pod
from .workloads_kubeflow import share_minimum

OVERLAPPING = "OverlappingRuns"
REGISTRY: dict = {}  # kinds -> reader names and reader names -> readers, filled by workloads.py (the one table)


def _asks_accelerator(pod: Mapping) -> bool:
    """A cheap look for a GPU ask in a pod's containers (the demand readers do the counting)."""
    spec = _map(pod.get("spec"))
    if spec.get("resourceClaims"):
        return True
    for c in (spec.get("containers") or ()) if type(spec.get("containers")) is list else ():
        res = _map(_map(c).get("resources"))
        for table in (res.get("limits"), res.get("requests")):
            if type(table) is dict and any(type(k) is str and accelerator_like(k) for k in table):
                return True
    return False


def _cronjob(obj: Mapping, spec: Mapping, ns, problems: list) -> tuple[list[Template], bool]:
    jt = _object(spec.get("jobTemplate"), "spec.jobTemplate", problems)
    jspec = _object(jt.get("spec"), "spec.jobTemplate.spec", problems)
    n = _job_pods(jspec, "spec.jobTemplate.spec", problems)
    pod = _pod(jspec.get("template"), ns, "spec.jobTemplate.spec.template", problems)
    policy = spec.get("concurrencyPolicy")
    if policy in (None, "Allow") and n and _asks_accelerator(pod):
        problems.append(Problem(OVERLAPPING, "spec.concurrencyPolicy: Allow lets runs overlap; one run's GPUs are counted "
                                             "(each run's Job is judged when the CronJob makes it)"))
    suspended = spec.get("suspend") is True or jspec.get("suspend") is True
    return [Template("job", n, None, pod, ("spec", "jobTemplate", "spec", "template", "spec"))], suspended


def _tasks(jspec: Mapping, prefix: tuple[str, ...], ns, problems: list) -> list[Template]:
    where = ".".join(prefix)
    out = []
    for i, task in enumerate(_list(jspec.get("tasks"), f"{where}.tasks", problems)):
        at = f"{where}.tasks[{i}]"
        task = _object(task, at, problems)
        n = _count(task.get("replicas"), 0, f"{at}.replicas", problems)
        least = task.get("minAvailable")
        own = _count(least, n, f"{at}.minAvailable", problems) if least is not None else None
        name = task.get("name") if type(task.get("name")) is str and task.get("name") else f"task-{i}"
        out.append(Template(name, n, own, _pod(task.get("template"), ns, f"{at}.template", problems),
                            (*prefix, "tasks", str(i), "template", "spec")))
    return out


def _volcano_job_sets(jspec: Mapping, prefix: tuple[str, ...], ns, problems: list) -> list[Template]:
    templates = _tasks(jspec, prefix, ns, problems)
    least = jspec.get("minAvailable")
    path = ".".join((*prefix, "minAvailable"))
    minimum = _count(least, 0, path, problems) if least not in (None, 0) else None  # 0 is Volcano's "unset"
    if minimum is None:  # Volcano's default: each task's own minimum, else all its replicas
        return [Template(t.name, t.count, t.minimum if t.minimum is not None else t.count, t.pod, t.spec_path, t.where) for t in templates]
    return share_minimum(templates, minimum, path, problems)


def _volcano_job(obj: Mapping, spec: Mapping, ns, problems: list) -> tuple[list[Template], bool]:
    return _volcano_job_sets(spec, ("spec",), ns, problems), False


def _volcano_cronjob(obj: Mapping, spec: Mapping, ns, problems: list) -> tuple[list[Template], bool]:
    jt = _object(spec.get("jobTemplate"), "spec.jobTemplate", problems)
    jspec = _object(jt.get("spec"), "spec.jobTemplate.spec", problems)
    return _volcano_job_sets(jspec, ("spec", "jobTemplate", "spec"), ns, problems), spec.get("suspend") is True


def _at(obj, path: str):
    """The value at a dotted path (`template.spec.template`) of an AppWrapper component, or None."""
    here = obj
    for part in path.split("."):
        if type(here) is dict:
            here = here.get(part)
        elif type(here) is list and part.isdigit() and int(part) < len(here):
            here = here[int(part)]
        else:
            return None
    return here


def _appwrapper(obj: Mapping, spec: Mapping, ns, problems: list) -> tuple[list[Template], bool]:
    kinds, readers = REGISTRY["kinds"], REGISTRY["readers"]

    out: list[Template] = []
    for i, comp in enumerate(_list(spec.get("components"), "spec.components", problems)):
        at = f"spec.components[{i}]"
        comp = _object(comp, at, problems)
        inner = _object(comp.get("template"), f"{at}.template", problems)
        pod_sets = comp.get("podSets")
        if pod_sets is not None:
            for j, ps in enumerate(_list(pod_sets, f"{at}.podSets", problems)):
                ps = _object(ps, f"{at}.podSets[{j}]", problems)
                n = _count(ps.get("replicas"), 1, f"{at}.podSets[{j}].replicas", problems)
                path = ps.get("path")
                if type(path) is not str or not path:
                    problems.append(Problem(BAD_OBJECT, f"{at}.podSets[{j}].path: expected the path of a pod template, got {path!r}"))
                    continue
                keys = tuple(path.split("."))
                out.append(Template(f"{i}-{j}", n, None, _pod(_at(comp, path), ns, f"{at}.{path}", problems),
                                    ("spec", "components", str(i), *keys, "spec")))
            continue
        api, kind = inner.get("apiVersion"), inner.get("kind")
        kind = kind if type(kind) is str else None
        group = api.split("/", 1)[0] if type(api) is str and "/" in api else ""
        reader = kinds.get((group, kind)) if kind else None
        if reader is None or reader in ("appwrapper", "workspace", "inferenceset"):
            if inner and kind not in RUNS_NOTHING:  # a Service or ConfigMap beside the workload runs nothing
                problems.append(Problem(UNREAD, f"{at}: a {kind or 'component'} without podSets, of a kind Allot does not read "
                                                "here; its pods are not counted (give podSets[].path)"))
            continue
        ins = _object(inner.get("spec"), f"{at}.template.spec", problems)
        inner_problems: list = []
        sets, _ = readers[reader](inner, ins, ns, inner_problems)
        problems.extend(Problem(p.code, f"{at}.template: {p.message}") for p in inner_problems)
        prefix = ("spec", "components", str(i), "template")
        out.extend(Template(f"{i}-{t.name}", t.count, t.minimum, t.pod, (*prefix, *t.spec_path) if t.spec_path else None, t.where)
                   for t in sets)
    return out, spec.get("suspend") is True


KINDS = {
    ("batch", "CronJob"): "cronjob",
    ("batch.volcano.sh", "Job"): "volcanojob",
    ("batch.volcano.sh", "CronJob"): "volcanocronjob",
    ("workload.codeflare.dev", "AppWrapper"): "appwrapper",
}
READERS = {"cronjob": _cronjob, "volcanojob": _volcano_job, "volcanocronjob": _volcano_cronjob, "appwrapper": _appwrapper}
GANG_READERS = frozenset({"volcanojob", "volcanocronjob", "appwrapper"})
# RESOURCES is keyed by kind; Volcano's kinds share their names with batch/v1's, so theirs are keyed `Kind.group`.
RESOURCES = {
    "CronJob": ("cronjobs", "batch", ("v1",)),
    "Job.batch.volcano.sh": ("jobs", "batch.volcano.sh", ("v1alpha1",)),
    "CronJob.batch.volcano.sh": ("cronjobs", "batch.volcano.sh", ("v1alpha1",)),
    "AppWrapper": ("appwrappers", "workload.codeflare.dev", ("v1beta2",)),
}
