"""Upstream PodGroups under a CompositePodGroup (scheduling.k8s.io v1alpha3/v1beta1, `spec.parentCompositePodGroupName`): judged as part of their root.

A PodGroup whose `spec.parentCompositePodGroupName` names a CompositePodGroup (which may
name its own parent, up to the Workload API's tree depth of 4) is one child of a bigger
gang: the root composite's. Its pods are judged as members of that gang — its name is
their `gang`, its minimum their `min_members`, the topmost constraint in the chain their
topology — and planned together with every PodGroup under the root (one pod set each).

A composite's minimum is, as for a Workload's composite templates (gangs.py): its
`gang.minGroupCount` children needing the fewest pods, summed; `basic`: all its children.
A leaf PodGroup needs its `gang.minCount` pods (`basic`: 1).
"""

from __future__ import annotations

import weakref

from policy.subject.model import PodSet, Problem

from .common import BAD_OBJECT
from .gangs import WORKLOAD_MAX_DEPTH, GroupInfo

MISSING_GROUP = "MissingGroup"
_INDEX: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()  # snapshot -> (resource_version, children by (ns, parent))


def chain_of(info: GroupInfo, snapshot, problems: list) -> list[GroupInfo]:
    """The composites above PodGroup `info`, nearest first (empty without a parent, or on a loop); a missing parent or a loop is a problem."""
    out: list[GroupInfo] = []
    cur, seen = info, {info.name}
    while cur.parent:
        if cur.parent in seen or len(out) >= WORKLOAD_MAX_DEPTH:
            problems.append(Problem(BAD_OBJECT, f"spec.parentCompositePodGroupName: the groups above {info.namespace}/{info.name} "
                                                f"loop or nest deeper than {WORKLOAD_MAX_DEPTH} levels (at {cur.parent!r})"))
            return []  # no root to judge it by: its own group (and the problem, a denial)
        parent = snapshot.group(info.namespace, cur.parent, "composite") if snapshot is not None else None
        if parent is None:
            problems.append(Problem(MISSING_GROUP, f"PodGroup {info.namespace}/{cur.name} names parent CompositePodGroup "
                                                   f"{info.namespace}/{cur.parent} (spec.parentCompositePodGroupName), which is not in "
                                                   "the cluster state: judged by its own PodGroup"))
            break
        seen.add(parent.name)
        out.append(parent)
        cur = parent
    return out


def _children(snapshot) -> dict:
    """(namespace, composite name) -> the PodGroups and CompositePodGroups naming it their parent (rebuilt when the snapshot changed)."""
    version = getattr(snapshot, "resource_version", None)
    hit = _INDEX.get(snapshot)
    if hit is not None and hit[0] == version:
        return hit[1]
    index: dict = {}
    for g in snapshot.groups():
        if g.parent and g.family in ("podgroup", "composite"):
            index.setdefault((g.namespace, g.parent), []).append(g)
    _INDEX[snapshot] = (version, index)
    return index


def _need(node: GroupInfo, index: dict, depth: int, leaves: list) -> int:
    """Pods `node` needs at once; its leaf PodGroups go to `leaves` as (name, pods needed)."""
    if node.family == "podgroup":
        need = node.min_members or 1
        leaves.append((node.name, need))
        return need
    kids = index.get((node.namespace, node.name), []) if depth < WORKLOAD_MAX_DEPTH else []
    needs = sorted(_need(k, index, depth + 1, leaves) for k in kids)
    if node.min_groups is not None:
        return sum(needs[: node.min_groups])
    return sum(needs)


def composite_gang(root: GroupInfo, snapshot) -> GroupInfo:
    """The root composite as one gang: its minimum in pods, one pod set per PodGroup under it (shapes: from its members)."""
    leaves: list = []
    minimum = _need(root, _children(snapshot), 1, leaves)
    whole = minimum == sum(n for _, n in leaves)  # every child needed: each set's own minimum holds
    sets = tuple(PodSet(name, n, 0, min_count=None if whole else 0) for name, n in leaves)
    return GroupInfo("composite", root.kind, root.namespace, root.name, minimum or None, root.topology_required,
                     root.topology_preferred, sets, None, root.problems, root.obj, root.min_groups, None)


def pod_composite(info: GroupInfo, snapshot, problems: list):
    """(gang, min_members, topology required, preferred) of a pod of PodGroup `info`: its root composite's, when it has one."""
    chain = chain_of(info, snapshot, problems)
    if not chain:
        return info.name, info.min_members, info.topology_required, info.topology_preferred
    root = composite_gang(chain[-1], snapshot)
    required = next((g.topology_required for g in reversed(chain) if g.topology_required), None) or info.topology_required
    preferred = next((g.topology_preferred for g in reversed(chain) if g.topology_preferred), None) or info.topology_preferred
    return root.name, root.min_members, required, preferred


def group_of_member(info: GroupInfo, snapshot) -> GroupInfo:
    """The gang a pod of PodGroup `info` is planned with: its root composite's, else its own group."""
    chain = chain_of(info, snapshot, []) if info.parent else []
    return composite_gang(chain[-1], snapshot) if chain else info
