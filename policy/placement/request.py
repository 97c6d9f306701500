"""From the objects in hand to the gang request: the one path admission, `allot place`, `allot test` and replay share.

A gang is planned as its pod sets, each with its own shape and minimum:

- the sets the group object declares (Volcano `minTaskMember`, KAI `subGroups`, Kueue
  `podSets`, upstream Workload `podGroupTemplates`), a member belonging to the set its
  dialect names (`volcano.sh/task-spec`, `kai.scheduler/subgroup-name`,
  `kueue.x-k8s.io/podset`);
- without declared sets, the members in hand grouped by shape, plus the members not
  seen yet.

A set's shape (GPUs per pod, share, memory, product) comes from its pod template
(Kueue), else from a member of that set in hand (the pod being admitted, members
admitted before it, pods listed in a file), else from the group's `minResources`
left over by the known sets, else from the member being judged. The gang's model is
what its sets' products say, else the gang block's `models`; a group object whose
model is still unknown is not placed where GPU models differ (`model_unknown`).
"""

from __future__ import annotations

from policy.placement.capacity import Toleration, is_map
from policy.placement.members import Seen, tally
from policy.placement.needs import pod_needs
from policy.placement.query import set_counts
from policy.placement.result import GangRequest
from policy.subject.dialects.composite import group_of_member
from policy.subject.dialects.workloads import WORKLOAD_KIND_NAMES
from policy.subject.model import PodSet, Workload, replace_workload

VOLCANO_TASK = "volcano.sh/task-spec"  # the Volcano job controller's task name on each pod
KAI_SUBGROUP = "kai.scheduler/subgroup-name"
KUEUE_PODSET = "kueue.x-k8s.io/podset"
SET_KEYS = (VOLCANO_TASK, KAI_SUBGROUP, KUEUE_PODSET)

def member_set(w: Workload) -> str | None:
    """The pod-set name a Pod member says it belongs to (annotation, else label), or None.

    A pod of an upstream PodGroup under a CompositePodGroup is in its PodGroup's set of the
    root composite's gang (`spec.schedulingGroup.podGroupName`, when the gang is not that group).
    """
    for source in (w.annotations, w.labels):
        if source:
            for key in SET_KEYS:
                value = source.get(key)
                if isinstance(value, str) and value:
                    return value
    spec = w.obj.get("spec") if is_map(w.obj) else None
    sg = spec.get("schedulingGroup") if is_map(spec) else None
    group = sg.get("podGroupName") if is_map(sg) else None
    if isinstance(group, str) and group and group != w.gang:
        return group
    return None


def own_shape(w: Workload) -> PodSet:
    """A Pod's own pod set (count 1): its shape, with the cpu, memory and node filter placement counts."""
    s = w.pod_sets[0] if w.pod_sets else None
    if s is not None and s.needs is not None:
        return s
    spec = w.obj.get("spec") if w.kind == "Pod" and is_map(w.obj) else None
    needs = pod_needs(spec) if is_map(spec) else None
    if s is None:
        return PodSet(w.name or "member", 1, w.gpus, w.fraction, w.gpu_memory, w.gpu_product, needs=needs)
    return s if needs is None else PodSet(s.name, s.count, s.gpus, s.fraction, s.gpu_memory, s.gpu_product, s.min_count, needs=needs)


def _shape(ps: PodSet) -> tuple:
    return (ps.gpus, ps.fraction, ps.gpu_memory, ps.gpu_product, ps.needs)


def _common(shapes: list[tuple[PodSet, int]]) -> PodSet | None:
    """The most frequent shape of (shape, count) pairs (ties: the first seen)."""
    counts: dict[tuple, int] = {}
    first: dict[tuple, PodSet] = {}
    for ps, n in shapes:
        counts[_shape(ps)] = counts.get(_shape(ps), 0) + n
        first.setdefault(_shape(ps), ps)
    if not counts:
        return None
    best = max(counts.values())
    return next(first[k] for k, n in counts.items() if n == best)


def _sized(name: str, count: int, like: PodSet | None, gpus: int | None = None, product: str | None = None, min_count=None,
           needs=None) -> PodSet:
    if like is not None and gpus is None:
        return PodSet(name, count, like.gpus, like.fraction, like.gpu_memory, like.gpu_product, min_count, needs=like.needs)
    return PodSet(name, count, gpus or 0, None, None, product, min_count, needs=needs)


def request_for(
    w: Workload,
    *,
    group=None,
    seen: Seen | None = None,
    topology: str | None = None,
    required: str | None = None,
    preferred: str | None = None,
    per_gpu: int | None = None,
    models: tuple[str, ...] = (),
) -> GangRequest:
    """The gang `w` stands for (a Pod member, or a group object), from its group and the members in hand.

    `group` is the member's `GroupInfo` from the cluster state (None for a group object
    itself, whose own sets are read from `w`); `seen` lists the other members in hand as
    (set, shape, count) (`Members.of`, `tally`), not counting `w`.
    """
    is_pod = w.kind == "Pod"
    if is_pod:
        declared = tuple(group.pod_sets) if group is not None else ()
        min_gpus = group.min_gpus if group is not None else None
    else:
        declared = _template_needs(w, tuple(w.pod_sets))
        min_gpus = w.total_gpus or None
    members = [*(seen or ())]  # (set, shape, count)
    me = None
    if is_pod:
        me = (member_set(w), own_shape(w))
        members.append((me[0], me[1], 1))
    in_hand = sum(c for _s, _p, c in members)
    minimum = w.min_members or (in_hand or None)
    if declared and any(ds.count for ds in declared):
        pod_sets = _declared_sets(declared, members, me, min_gpus)
    else:
        pod_sets = _shaped_sets(members, me, minimum, min_gpus, w)
    pod_sets = _with_product(pod_sets, me)
    unknown = None
    if not is_pod and not models and not members and not _has_templates(w) and not any(ps.gpu_product for ps in pod_sets):
        unknown = (f"the GPU model of {w.kind} {w.namespace or 'default'}/{w.name or ''}'s members is not known yet "
                   "(the object has no pod template, no member has been seen, the gang block names no models)")
    return GangRequest(pod_sets, min_count=minimum, topology=topology, required=required, preferred=preferred,
                       per_gpu=per_gpu, tolerations=_template_tolerations(w) if w.template_paths else tolerations_of(w.obj),
                       models=tuple(models), model_unknown=unknown)


def _template_spec(obj, path):
    """The pod spec at `path` (a workload object's template path) of `obj`, or None."""
    cur = obj
    for step in path or ():
        if is_map(cur):
            cur = cur.get(step)
        elif isinstance(cur, list) and step.isdigit() and int(step) < len(cur):
            cur = cur[int(step)]
        else:
            return None
    return cur if is_map(cur) and path else None


def _template_needs(w: Workload, pod_sets: tuple[PodSet, ...]) -> tuple[PodSet, ...]:
    """A workload object's sets with what each template asks of its node besides GPUs (cpu, memory, nodeSelector, affinity).

    Its pods will be pinned to the domain held for it, so the domain must be one its own
    node filters allow (a template selecting rack r2 is never held, nor pinned, in r1).
    """
    paths = w.template_paths
    if not paths or len(paths) != len(pod_sets):
        return pod_sets
    out = []
    for ps, path in zip(pod_sets, paths):
        spec = _template_spec(w.obj, path)
        needs = pod_needs(spec) if spec is not None and ps.needs is None and ps.count and ps.gpus else None
        out.append(ps if needs is None else PodSet(ps.name, ps.count, ps.gpus, ps.fraction, ps.gpu_memory, ps.gpu_product,
                                                   ps.min_count, needs=needs))
    return tuple(out)


def _template_tolerations(w: Workload) -> tuple:
    """The tolerations of a workload object's first GPU template (its gang's pods are placed as that template says)."""
    for ps, path in zip(w.pod_sets, w.template_paths):
        spec = _template_spec(w.obj, path) if ps.count and ps.gpus else None
        if spec is not None and isinstance(spec.get("tolerations"), list):
            return tuple(Toleration(t) for t in spec["tolerations"] if is_map(t))
    return ()


def _has_templates(w: Workload) -> bool:
    """Whether the group object carries its members' pod templates (Kueue `podSets[].template`): their model is then known, even as "any"."""
    if w.template_paths:  # a workload object (Job, JobSet, ...) carries its pod templates
        return True
    spec = w.obj.get("spec") if isinstance(w.obj, dict) else None
    sets = spec.get("podSets") if isinstance(spec, dict) else None
    return isinstance(sets, list) and any(isinstance(ps, dict) and "template" in ps for ps in sets)  # (any shape a user sends)


def _declared_sets(declared, members: list, me, min_gpus: int | None) -> tuple[PodSet, ...]:
    """Each declared set with its own minimum; shapes from templates, members of the set, leftover minResources."""
    names = {ds.name for ds in declared}
    by_set: dict[str, list[tuple[PodSet, int]]] = {}
    for set_name, shape, n in members:
        if set_name not in names and len(declared) == 1:
            set_name = declared[0].name  # one set: every member is in it
        if set_name in names:
            by_set.setdefault(set_name, []).append((shape, n))
    out: list[PodSet | None] = []
    known_gpus = unknown_pods = 0
    for ds in declared:
        need = ds.min_count if ds.min_count is not None else ds.count
        if ds.gpus or ds.gpu_product:  # a pod template (Kueue) says the shape
            out.append(ds)
        else:
            mine = me if me is not None and me[0] == ds.name else None
            like = mine[1] if mine is not None else _common(by_set.get(ds.name, []))
            out.append(None if like is None else _sized(ds.name, ds.count, like, min_count=ds.min_count))
        if out[-1] is None:
            unknown_pods += need
        else:
            known_gpus += need * out[-1].gpus
    fallback = None
    if me is not None and me[0] not in names and len(declared) > 1:
        fallback = me[1]  # a member naming no set: the unknown sets are shaped like it
    per_pod = None
    if min_gpus is not None and unknown_pods:
        per_pod = max(0, -(-(min_gpus - known_gpus) // unknown_pods))  # what minResources leaves, spread
    final = []
    for ds, ps in zip(declared, out):
        if ps is None:
            if per_pod is not None:
                ps = _sized(ds.name, ds.count, None, gpus=-(-per_pod // 1000) * 1000 if per_pod >= 1000 else per_pod, min_count=ds.min_count)
            else:
                ps = _sized(ds.name, ds.count, fallback or (me[1] if me is not None else None), min_count=ds.min_count)
        final.append(ps)
    return tuple(final)


def _shaped_sets(members: list, me, minimum: int | None, min_gpus: int | None, w: Workload) -> tuple[PodSet, ...]:
    """No declared sets: the members in hand by shape, plus the members not seen yet."""
    groups: dict[tuple, list] = {}
    for _set, shape, n in members:
        if _shape(shape) in groups:
            groups[_shape(shape)][1] += n
        else:
            groups[_shape(shape)] = [shape, n]
    sets = [_sized(f"pods-{i}", n, shape) for i, (shape, n) in enumerate(groups.values())]
    listed = sum(ps.count for ps in sets)
    missing = (minimum or 0) - listed
    if missing > 0:
        if min_gpus is not None and min_gpus > sum(ps.count * ps.gpus for ps in sets):
            left = min_gpus - sum(ps.count * ps.gpus for ps in sets)
            per = -(-left // missing)
            per = -(-per // 1000) * 1000 if per >= 1000 else per  # whole GPUs per pod once a pod needs one
            product = me[1].gpu_product if me is not None else w.gpu_product
            needs = me[1].needs if me is not None else None  # unseen members are taken to ask what the one in hand asks
            sets.append(_sized("unseen", missing, None, gpus=per, product=product, needs=needs))
        elif me is not None:
            sets.append(_sized("unseen", missing, me[1]))
        elif sets:
            sets.append(_sized("unseen", missing, _common([(shape, n) for _s, shape, n in members])))
        else:  # a group object with no member in hand: its declared resources spread over its minimum
            sets.append(PodSet(w.name or "member", missing, w.gpus, w.fraction, w.gpu_memory, w.gpu_product))
    merged: dict[tuple, PodSet] = {}
    for ps in sets:  # the unseen members shaped like seen ones join their set
        had = merged.get(_shape(ps))
        merged[_shape(ps)] = ps if had is None else PodSet(had.name, had.count + ps.count, had.gpus, had.fraction, had.gpu_memory, had.gpu_product,
                                                                     needs=had.needs)
    return tuple(merged.values())


def _with_product(pod_sets: tuple[PodSet, ...], me) -> tuple[PodSet, ...]:
    """Sets without a product take the gang's (the member's, else the one product the other sets agree on)."""
    products = {ps.gpu_product for ps in pod_sets if ps.gpu_product}
    product = me[1].gpu_product if me is not None and me[1].gpu_product else (next(iter(products)) if len(products) == 1 else None)
    if product is None or all(ps.gpu_product or not ps.gpus for ps in pod_sets):
        return pod_sets
    return tuple(ps if ps.gpu_product or not ps.gpus else PodSet(ps.name, ps.count, ps.gpus, ps.fraction, ps.gpu_memory, product, ps.min_count, needs=ps.needs)
                 for ps in pod_sets)


def gang_view(w: Workload, gang: GangRequest | None = None) -> Workload:
    """The workload as its gang: `pods` = the members that must start together, `total_gpus` = their GPUs.

    With `gang`, the numbers are the request's (each set's minimum × its shape); without,
    a Pod member stands for `min_members` pods like it. Others are unchanged.
    """
    if gang is None:
        if w.kind != "Pod" or not w.min_members or w.min_members <= 1 or w.gang is None:
            return w
        return replace_workload(w, pods=w.min_members, total_gpus=w.min_members * w.gpus)
    pods, total = gang_size(gang)
    if pods == w.pods and total == w.total_gpus:
        return w
    return replace_workload(w, pods=pods, total_gpus=total)


def gang_size(gang: GangRequest) -> tuple[int, int]:
    """(pods, milli-GPU) of the members that must fit now (GPU-less members count as pods)."""
    counts = set_counts(gang)
    return sum(counts), sum(c * ps.gpus for c, ps in zip(counts, gang.pod_sets))


def gang_in_hand(objs, snapshot) -> tuple[Workload, object, list] | str:
    """(the subject the gang is judged as, its group from the cluster state, the pods in hand as members) from a gang's objects.

    The subject is the group object when one is given, else the first pod (Kueue and
    KAI annotate pods). Returns an error text for objects that are neither.
    """
    from policy.subject.normalize import normalize_object

    group = None
    pods: list[Workload] = []
    for obj in objs:
        kind = obj.get("kind")
        if kind == "Pod":
            pods.append(normalize_object(obj, snapshot))
        elif kind in ("PodGroup", "Workload") or kind in WORKLOAD_KIND_NAMES:  # a JobSet, LWS, ... is its own gang
            group = normalize_object(obj, snapshot)
        else:
            return f"GANG holds a {kind!r}; expected PodGroup, Workload, a workload object (JobSet, Job, ...) or Pod objects"
    subject = group or (pods[0] if pods else None)
    if subject is None:
        return "GANG holds no objects"
    gpu_pods = [p for p in pods if p.total_gpus > 0]  # a CPU-only launcher is no gang member
    if subject.kind == "Pod":  # the subject is in hand itself: `seen` lists the others
        gpu_pods = [p for p in gpu_pods if p is not subject]
    seen = tally((member_set(p), own_shape(p)) for p in gpu_pods)
    info = group_of(subject, snapshot) if subject.kind == "Pod" else None
    return subject, info, seen


def group_of(w: Workload, snapshot):
    """A Pod member's group object as read from the cluster state (None for Kueue plain pod groups, a missing one, or a Workload's pod group)."""
    from policy.subject.dialects.gangs import pod_group_ref

    if w.gang is None or snapshot is None:
        return None
    obj = w.obj if isinstance(w.obj, dict) else {}
    ref = pod_group_ref(w.labels, w.annotations, obj.get("spec") or {})
    if ref is None or ref[0] == "kueue-pod-group" or ref[2]:
        return None  # no object (Kueue plain pod group), or one pod group of a Workload: its own gang
    info = snapshot.group(w.namespace or "default", ref[1], ref[0])
    if info is not None and info.parent and ref[0] == "podgroup":
        return group_of_member(info, snapshot)  # planned with every PodGroup under its root composite
    return info


def tolerations_of(obj) -> tuple:
    """The tolerations of a Pod, or of the first pod template of a Kueue Workload; () when none are written."""
    if not is_map(obj):
        return ()
    spec = obj.get("spec")
    if not is_map(spec):
        return ()
    found = spec.get("tolerations")
    if found is None and "podSets" not in spec:
        return ()
    if found is None:
        sets = spec.get("podSets")
        for ps in sets if isinstance(sets, list) else ():  # Kueue Workload (any shape a user sends)
            template = ps.get("template") if is_map(ps) else None
            tspec = template.get("spec") if is_map(template) else None
            if is_map(tspec) and tspec.get("tolerations"):
                found = tspec["tolerations"]
                break
    if not isinstance(found, list):
        return ()
    return tuple(Toleration(t) for t in found if is_map(t))  # hashable: answers re-used
