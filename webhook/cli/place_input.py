"""What `allot place` judges: the workloads of a GANG file, and the default topology fitted to the cluster's labels."""

from __future__ import annotations

DEFAULT_LEVELS = (("block", "topology.acme.io/block"), ("rack", "topology.acme.io/rack"), ("host", "kubernetes.io/hostname"))
GIVE = "Give --policy DIR with a `topology` declaration, or label the nodes"


def _meta(obj: dict) -> tuple[str, str]:
    meta = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
    return str(meta.get("namespace") or "default"), str(meta.get("name") or "?")


def _ref(pod: dict) -> str | None:
    """The name of the group a pod points at (PodGroup, Workload, coscheduling, Kueue, Volcano…), or None."""
    from policy.subject.dialects.gangs import pod_group_ref

    meta = pod.get("metadata") if isinstance(pod.get("metadata"), dict) else {}
    spec = pod.get("spec") if isinstance(pod.get("spec"), dict) else {}
    labels, notes = meta.get("labels"), meta.get("annotations")
    ref = pod_group_ref(labels if isinstance(labels, dict) else {}, notes if isinstance(notes, dict) else {}, spec)
    return ref[1] if ref else None


def workload_name(objs: list[dict]) -> str:
    """How an answer names its workload: `Kind namespace/name` of the group object, else of the pods."""
    group = next((o for o in objs if o.get("kind") != "Pod"), None)
    if group is not None:
        ns, name = _meta(group)
        return f"{group.get('kind')} {ns}/{name}"
    ns, name = _meta(objs[0])
    ref = _ref(objs[0])
    if ref is not None:
        return f"pod group {ns}/{ref}"
    return f"Pod {ns}/{name}" if len(objs) == 1 else f"{len(objs)} Pods from {ns}/{name}"


def split_workloads(objs: list[dict], path: str) -> list[list[dict]]:
    """The objects of each workload in the file, in its order: one group object (PodGroup, Job, JobSet…) with the
    pods that name it, or — with no group object — the pods by the group they name. One workload: the objects as given."""
    from webhook.errors import UsageError

    groups = [o for o in objs if o.get("kind") != "Pod"]
    pods = [o for o in objs if o.get("kind") == "Pod"]
    if len(groups) <= 1:
        if groups or len({_ref(p) for p in pods}) <= 1:
            return [objs]
        by_ref: dict = {}
        for p in pods:
            by_ref.setdefault((_meta(p)[0], _ref(p)), []).append(p)
        return list(by_ref.values())
    out = {(*_meta(g),): [g] for g in groups}
    for p in pods:
        key = (_meta(p)[0], _ref(p))
        if key not in out:
            names = ", ".join(workload_name([g]) for g in groups)
            ns, name = _meta(p)
            raise UsageError(f"pod {ns}/{name} belongs to none of the {len(groups)} workloads in {path}: {names}")
        out[key].append(p)
    return list(out.values())


def _and(items: list[str]) -> str:
    return ", ".join(items)


def fit_default(index_of, levels, required: str | None, preferred: str | None, from_policy: bool):
    """(levels to judge on, notes, preferred level, the index over those levels) for the default topology here.

    A level whose label no GPU node carries has no domain: judging on it would say "does not fit" of a gang
    the nodes hold, so it is left out (judged on the levels left, or node by node when none is) — unless the
    gang requires it, when "no such domain" is the true answer, said as such. `index_of(levels)` builds the index.
    """
    index = index_of(levels)
    specs = [s.spec for s in index.nodes.values() if s.spec is not None]
    lacking = {label: sum(1 for sp in specs if label not in sp.labels) for _lv, label in levels}
    missing = [label for _lv, label in levels if lacking[label]]
    if not specs or not missing:
        return levels, [], preferred, index
    absent = {lv for lv, label in levels if lacking[label] == len(specs)}
    kept = [(lv, label) for lv, label in levels if lv not in absent or lv == required]
    if preferred in absent and preferred != required:
        preferred = None
    short = sum(1 for sp in specs if any(label not in sp.labels for _lv, label in levels))
    excluded = sum(1 for sp in specs if any(label not in sp.labels for _lv, label in kept))
    why = "the policy set declares no topology and no --topology was given" if from_policy else \
        "no topology given (--policy DIR with a `topology` declaration, or --topology)"
    shown = ", ".join(f"{lv} {label}" for lv, label in levels)
    first = f"{why}: used the default ({shown}); {short} of {len(specs)} GPU nodes lack {_and(missing)}"
    if excluded:
        first += f": {'they' if excluded == short else f'{excluded} of them'} hold no pods of it"
    notes = [f"{first}. {GIVE}"]
    if required in absent:
        label = dict(levels)[required]
        notes.append(f"no GPU node carries {label} (level {required}), which the gang requires: no {required} can hold it")
    dropped = [(lv, label) for lv, label in levels if lv in absent and lv != required]
    if dropped:
        names = ", ".join(lv for lv, _l in dropped)
        notes.append(f"no GPU node carries {_and([label for _lv, label in dropped])}: level{'s' * (len(dropped) > 1)} {names} "
                     f"left out, the gang judged " + (f"on {', '.join(lv for lv, _l in kept)}" if kept else "node by node"))
    return kept, notes, preferred, (index if kept == list(levels) else index_of(kept))
