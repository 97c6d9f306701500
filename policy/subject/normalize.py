"""Normalization of admission requests and live objects into the `Workload` subject, whatever the dialect."""

from __future__ import annotations

from typing import Mapping

from policy.subject.demand import pod_demand, read_demand
from policy.subject.dialects.common import BAD_OBJECT, EMPTY, MALFORMED, MISSING_GROUP, ceil_div
from policy.subject.dialects.composite import pod_composite
from policy.subject.dialects.gangs import KUEUE_TOTAL_ANNOTATION, GroupInfo, group_family, pod_group_ref, read_group
from policy.subject.dialects.security import escalations
from policy.subject.dialects.shape import locate, mapping, string_map, wrong
from policy.subject.dialects.topology import pod_topology
from policy.subject.dialects.unread import unread_problem
from policy.subject.model import Problem, Workload, make_workload
from policy.subject.workloads import NOT_IN_STATE, SCALABLE, scale_subject, workload_reader, workload_subject

__all__ = ["normalize", "normalize_object", "pod_demand", "read_demand", "service_account"]

_SA_PREFIX = "system:serviceaccount:"
_CONNECT_SUBRESOURCES = frozenset({"exec", "attach", "portforward"})
_WITH_OBJECT = frozenset({"CREATE", "UPDATE"})
_SETATTR = object.__setattr__  # a Workload just built here, held by no one else: set in place
_FAMILY_NAMES = {
    "coscheduling": "coscheduling PodGroup",
    "volcano": "Volcano PodGroup",
    "kai": "KAI PodGroup",
    "podgroup": "PodGroup (scheduling.k8s.io)",
    "workload": "Workload (scheduling.k8s.io)",
}


def service_account(user: str | None) -> str | None:
    """`NS/NAME` of a `system:serviceaccount:NS:NAME` user, else None."""
    if user and user.startswith(_SA_PREFIX):
        ns, _, name = user[len(_SA_PREFIX):].partition(":")
        if ns and name:
            return f"{ns}/{name}"
    return None


def _priority(spec: Mapping, snapshot, problems: list, pod: bool = True) -> tuple[int | None, str | None]:
    """(value, class): spec.priority as set by the Priority admission plugin, else the class's value."""
    pc = spec.get("priorityClassName")
    if type(pc) is not str:
        if pc is not None:
            problems.append(wrong("spec.priorityClassName", "a string", pc))
        pc = None
    pc = pc or None
    value = spec.get("priority")
    if type(value) is int:
        return value, pc
    if value is not None:
        problems.append(Problem(MALFORMED, f"spec.priority: {value!r} is not an integer"))
    if pc and snapshot is not None:
        obj = snapshot.priority_class(pc)
        if obj is not None and type(obj.get("value")) is int:
            return obj["value"], pc
    elif pod and pc is None and value is None and snapshot is not None:
        # No class, no value: what the API server's Priority admission would have set (offline requests).
        default = snapshot.default_priority_class()
        if default is not None:
            return default["value"], default["metadata"]["name"]
    return None, pc


def _pod_gang(ref: tuple, annotations: Mapping, ns: str, snapshot, problems: list):
    """(gang, min_members, group topology required, preferred) for a pod's group reference."""
    family, name, sub = ref
    if family == "kueue-pod-group":
        raw = annotations.get(KUEUE_TOTAL_ANNOTATION)
        if raw is None:
            return name, None, None, None
        if isinstance(raw, str) and raw.isascii() and raw.isdigit() and int(raw) >= 1:
            return name, int(raw), None, None
        problems.append(Problem(MALFORMED, f"metadata.annotations[{KUEUE_TOTAL_ANNOTATION}]: {raw!r} is not a whole number >= 1"))
        return name, None, None, None
    info: GroupInfo | None = snapshot.group(ns, name, family) if snapshot is not None else None
    if info is None:
        problems.append(Problem(MISSING_GROUP, f"pod names {_FAMILY_NAMES[family]} {ns}/{name}, which is not in the cluster state"))
        return name, None, None, None
    problems.extend(info.problems)
    if family == "workload":
        for ps in info.pod_sets:
            if ps.name == sub:
                return f"{name}/{sub}", ps.count or None, info.topology_required, info.topology_preferred
        problems.append(Problem(MISSING_GROUP, f"spec.workloadRef.podGroup: {sub!r} is not a pod group of Workload {ns}/{name}"))
        return f"{name}/{sub}" if sub else name, None, None, None
    if info.parent is not None and family == "podgroup":  # under a CompositePodGroup: judged as part of its root
        return pod_composite(info, snapshot, problems)
    return name, info.min_members, info.topology_required, info.topology_preferred


def _pod_workload(obj: dict, snapshot, r: tuple, problems: list) -> Workload:
    """A Pod's subject; `r` = (operation, name, namespace, user, groups, serviceaccount, resource, sub, uid, dry_run, old)."""
    meta = obj.get("metadata")
    spec = obj.get("spec")
    if type(meta) is not dict or type(spec) is not dict:  # reported by read_demand
        meta = meta if type(meta) is dict else EMPTY
        spec = spec if type(spec) is dict else EMPTY
    ns = r[2] or meta.get("namespace") or "default"
    # The pod's claims are the judged namespace's (the request's), whatever its manifest says or omits.
    podset, demand_problems = read_demand(obj if meta.get("namespace") == ns or not spec.get("resourceClaims")
                                          else {**obj, "metadata": {**meta, "namespace": ns}}, snapshot)
    if demand_problems:
        problems.extend(demand_problems)
    # Inline loops, not a call per map: this runs on every request (string_map words the problem).
    labels = meta.get("labels")
    if type(labels) is not dict:
        labels = string_map(labels, "metadata.labels", problems)
    else:
        for v in labels.values():
            if type(v) is not str:
                labels = string_map(labels, "metadata.labels", problems)
                break
    annotations = meta.get("annotations")
    if type(annotations) is not dict:
        annotations = string_map(annotations, "metadata.annotations", problems)
    else:
        for v in annotations.values():
            if type(v) is not str:
                annotations = string_map(annotations, "metadata.annotations", problems)
                break
    required = preferred = gang = minimum = None
    if annotations:
        required, preferred = pod_topology(annotations)
    ref = pod_group_ref(labels, annotations, spec)
    if ref is not None:
        gang, minimum, g_required, g_preferred = _pod_gang(ref, annotations, ns, snapshot, problems)
        required = required or g_required
        preferred = preferred or g_preferred
    # priority: spec.priority as the API server's Priority admission set it, else the class's value
    pc = spec.get("priorityClassName")
    priority = spec.get("priority")
    if type(priority) is not int or (pc is not None and type(pc) is not str):
        priority, pc = _priority(spec, snapshot, problems)
    else:
        pc = pc or None
    privileged, host_path, host_network = escalations(spec, problems)
    gpus = podset.gpus
    # Positional, in `Workload` field order (see tests/policy/normalize/test_request.py): keyword
    # matching of 35 arguments costs more than the rest of normalization.
    return make_workload(
        "Pod", r[0], r[1], ns, snapshot.namespace_labels(ns) if snapshot is not None else EMPTY,
        labels, annotations, r[3], r[4], r[5], priority, pc,
        1, gpus, gpus, podset.fraction, podset.gpu_memory, podset.gpu_product, None,
        gang, minimum, required, preferred, False, privileged, host_path, host_network,
        r[6], r[7], r[8], r[9], (podset,), tuple(problems) if problems else (), obj, r[10],
    )


def _group_workload(obj: Mapping, family: str, snapshot, base: dict, problems: list) -> Workload:
    meta = mapping(obj.get("metadata"), "metadata", problems)
    spec = obj.get("spec") if type(obj.get("spec")) is dict else EMPTY  # a bad spec is read_group's problem
    labels = string_map(meta.get("labels"), "metadata.labels", problems)
    annotations = string_map(meta.get("annotations"), "metadata.annotations", problems)
    ns = base["namespace"] or meta.get("namespace") or "default"
    base = {k: v for k, v in base.items() if k not in ("kind", "namespace")}
    info = read_group(obj, family, lambda p: pod_demand(p, snapshot))
    problems.extend(info.problems)
    pods = info.min_members or 1
    total = gpus = 0
    fraction = memory = product = None
    privileged = host_path = host_network = False
    if info.min_gpus:
        # The minimum group's GPUs; per pod is the mean, rounded up, when members differ.
        total, gpus = info.min_gpus, ceil_div(info.min_gpus, pods)
        asking = [ps for ps in info.pod_sets if ps.gpus]
        fractions = {ps.fraction for ps in asking}
        fraction = fractions.pop() if len(fractions) == 1 else None
        mems = [ps.count * ps.gpu_memory for ps in asking if ps.gpu_memory]
        memory = ceil_div(sum(mems), sum(ps.count for ps in info.pod_sets) or 1) if mems else None
        products = {ps.gpu_product for ps in asking if ps.gpu_product}
        product = products.pop() if len(products) == 1 else None
    for i, ps in enumerate(spec.get("podSets") or ()):  # Kueue Workload templates carry container specs
        tmpl = ps.get("template") if type(ps) is dict else None  # shapes reported by read_group
        tspec = tmpl.get("spec") if type(tmpl) is dict else None
        p, h, n = escalations(tspec if type(tspec) is dict else EMPTY, problems)
        privileged, host_path, host_network = privileged or p, host_path or h, host_network or n
    # The Priority plugin defaults Pods and (1.36, WorkloadAwarePreemption) upstream scheduling.k8s.io PodGroups.
    upstream = (obj.get("kind") or base.get("kind")) in ("PodGroup", "CompositePodGroup") and str(obj.get("apiVersion") or "").startswith("scheduling.k8s.io/")
    priority, pc = _priority(spec, snapshot, problems, pod=upstream)
    return make_workload(
        kind=obj.get("kind") or base.get("kind") or "", labels=labels, annotations=annotations,
        namespace_labels=snapshot.namespace_labels(ns) if snapshot is not None else EMPTY,
        priority=priority, priority_class=pc, pods=pods, gpus=gpus, total_gpus=total, fraction=fraction,
        gpu_memory=memory, gpu_product=product, gang=info.name or None, min_members=info.min_members,
        topology_required=info.topology_required, topology_preferred=info.topology_preferred,
        privileged=privileged, host_path=host_path, host_network=host_network, pod_sets=info.pod_sets,
        problems=tuple(problems), obj=obj, namespace=ns, **base,
    )


def _build(obj, kind: str, snapshot, r: tuple, problems: list) -> Workload:
    """Dispatch on the object's kind; unknown kinds come back quickly with gpus=0."""
    if type(obj) is dict:
        if kind == "Pod":
            return _pod_workload(obj, snapshot, r, problems)
        api = obj.get("apiVersion")
        if type(api) is not str:  # a group object without a readable apiVersion must not pass as an unknown kind
            if api is not None:
                problems.append(wrong("apiVersion", "a string", api))
            api = ""
        reader = workload_reader(api, kind)
        if reader is not None:  # Job, JobSet, Deployment, ...: pod sets from the templates
            return workload_subject(obj, reader, kind, snapshot, r, problems)
        family = group_family(api, kind)
        if family is not None:
            return _group_workload(obj, family, snapshot, {**_base(r), "kind": kind}, problems)
        meta = mapping(obj.get("metadata"), "metadata", problems)
        labels = string_map(meta.get("labels"), "metadata.labels", problems)
        annotations = string_map(meta.get("annotations"), "metadata.annotations", problems)
        # A kind without a reader must not pass as "no GPUs" in silence (a bad apiVersion is already denied above).
        unread = unread_problem(obj, kind) if type(obj.get("apiVersion")) is str else None
        if unread is not None:
            problems.append(unread)
            w = _bare(kind, obj, snapshot, r, problems, labels, annotations)
            _SETATTR(w, "unread", True)
            return w
    else:
        labels = annotations = EMPTY
    return _bare(kind, obj if type(obj) is dict else None, snapshot, r, problems, labels, annotations)


_BASE_NAMES = ("operation", "name", "namespace", "user", "groups", "serviceaccount", "resource", "subresource", "uid", "dry_run", "old_obj")


def _base(r: tuple) -> dict:
    return dict(zip(_BASE_NAMES, r))


def _bare(kind: str, obj, snapshot, r: tuple, problems: list, labels=EMPTY, annotations=EMPTY) -> Workload:
    """A subject with no GPU reading: unknown kinds (0 pods: none is known), CONNECT to pods not in the cluster state (1 pod)."""
    operation, name, ns, user, groups, sa, resource, sub, uid, dry_run, old = r
    return make_workload(  # positional, in `Workload` field order (fast path)
        kind, operation, name, ns, snapshot.namespace_labels(ns) if snapshot is not None and ns else EMPTY,
        labels, annotations, user, groups, sa, None, None, 1 if kind == "Pod" else 0, 0, 0, None, None, None, None,
        None, None, None, None, False, False, False, False,
        resource, sub, uid, dry_run, (), tuple(problems) if problems else (), obj, old,
    )


def normalize(request: Mapping, snapshot) -> Workload:
    """The subject of an AdmissionReview v1 `request`; bad input becomes `problems`, never an exception."""
    operation = request.get("operation") or "CREATE"
    resource = request.get("resource") or EMPTY
    res_name = resource.get("resource") or "pods"
    sub = request.get("subResource") or None
    kind = (request.get("kind") or EMPTY).get("kind") or ""
    user_info = request.get("userInfo") or EMPTY
    user = user_info.get("username")
    groups = user_info.get("groups")
    obj = request.get("object")
    old = request.get("oldObject")
    ns = request.get("namespace") or None
    name = request.get("name") or None
    problems: list[Problem] = []
    missing = False
    if obj is None:
        if operation == "DELETE":
            obj = old
        elif operation in _WITH_OBJECT and not sub:
            # The webhook answers this 400 (policy/envelope.py); a caller that skipped the envelope
            # parser must not get the live pod of that name judged instead, nor an empty subject allowed.
            problems.append(Problem(BAD_OBJECT, f"request.object is missing: a {operation} must carry the object it creates or updates"))
            missing = True
    if not missing and res_name == "pods" and (sub in _CONNECT_SUBRESOURCES or obj is None):
        # CONNECT carries PodExecOptions (or nothing): the subject is the live pod, when known.
        kind = "Pod"
        obj = snapshot.pod(ns or "default", name) if snapshot is not None and name else None
    if obj is not None and type(obj) is not dict:
        problems.append(Problem(BAD_OBJECT, f"request.object: expected an object, got {type(obj).__name__}"))
        obj = None
    if obj is not None and not name:
        m = obj.get("metadata")
        name = m.get("name") if type(m) is dict and type(m.get("name")) is str else None
    r = (
        operation, name, ns, user, tuple(groups) if type(groups) is list else (),
        service_account(user) if user and user.startswith(_SA_PREFIX) else None,
        res_name, sub, request.get("uid"), request.get("dryRun") is True, old if type(old) is dict else None,
    )
    if sub == "scale" and res_name in SCALABLE and operation == "UPDATE":  # kubectl scale, an HPA: the live workload resized
        try:
            w = scale_subject(request, snapshot, r, problems)
        except (AttributeError, TypeError, KeyError, IndexError, ValueError):
            w = None  # a live object of an unexpected shape: reported as not judged, below
        if w is not None:
            return w
        problems.append(Problem(NOT_IN_STATE, f"{res_name}/scale of {ns or 'default'}/{name}: the {SCALABLE[res_name]} is not in the cluster state, so its pod template (and the GPUs the new replicas add) is not known; not judged"))
    if obj is None:
        return _bare(kind, None, snapshot, r, problems)
    if not kind:
        kind = obj.get("kind") if type(obj.get("kind")) is str else ""
    try:
        return _build(obj, kind, snapshot, r, problems)
    except (AttributeError, TypeError, KeyError, IndexError, ValueError) as exc:
        # A field of an unexpected JSON type deep inside the object: explain, never raise.
        return _bare(kind, obj, snapshot, r, [*problems, _shape_problem(obj, exc)])


def _shape_problem(obj: dict, exc: Exception) -> Problem:
    located = locate(obj) if obj.get("kind") == "Pod" else None
    if located is not None:
        return located
    meta = obj.get("metadata") if type(obj.get("metadata")) is dict else EMPTY
    who = f"{meta.get('namespace') or ''}/{meta.get('name') or meta.get('generateName') or '?'}".lstrip("/")
    return Problem(BAD_OBJECT, f"{obj.get('kind') or 'object'} {who}: a field has an unexpected type ({type(exc).__name__}: {exc})")


def normalize_object(obj: Mapping, snapshot) -> Workload:
    """The subject of a live object (usage accounting): no request, no user."""
    meta = obj.get("metadata") if type(obj.get("metadata")) is dict else EMPTY
    r = ("CREATE", meta.get("name"), meta.get("namespace"), None, (), None, "pods", None, meta.get("uid"), False, None)
    try:
        return _build(obj, obj.get("kind") or "", snapshot, r, [])
    except (AttributeError, TypeError, KeyError, IndexError, ValueError) as exc:
        return _bare(obj.get("kind") or "", obj, snapshot, r, [_shape_problem(obj, exc)])
