"""`allot place --cluster FILE [--policy DIR] GANG`: where would this gang fit now, and if not, why.

GANG is a YAML file (multi-document or a List) of a PodGroup / Workload of any dialect
and/or its pods. The required level comes from the flags, else from the manifest (the
group's or Kueue/KAI pod annotations), else — with `--policy` — from the policy set's
matching `gang` block judged on the gang view, as admission would (`decided_by` names
it). Prints JSON (`fits`, `topology`, `level`, `domain`, `nodes`, `reason`, `reasons`,
`request`, `level_from`, `decided_by`). Exit 0 fits, 3 does not fit, 2 usage errors.
"""

from __future__ import annotations

import math

import json
import sys

DEFAULT_LEVELS = (("block", "topology.acme.io/block"), ("rack", "topology.acme.io/rack"), ("host", "kubernetes.io/hostname"))


def add_arguments(parser) -> None:
    """Options of `allot place`."""
    parser.add_argument("gang", metavar="GANG", help="YAML of the PodGroup/Workload and/or its pods")
    parser.add_argument("--cluster", required=True, metavar="FILE", help="cluster state (kubectl get … -o yaml)")
    parser.add_argument("--policy", metavar="DIR", help="policy set: its topologies and gpu models")
    parser.add_argument(
        "--topology",
        metavar="NAME|LEVEL=LABEL,…",
        help="a topology of the policy set by name, or levels widest first (default block,rack,host on "
        "topology.acme.io/block, topology.acme.io/rack, kubernetes.io/hostname)",
    )
    parser.add_argument("--required", metavar="LEVEL", help="level one domain of which must hold the gang")
    parser.add_argument("--preferred", metavar="LEVEL", help="level to try first (climbs one level at a time)")
    parser.add_argument("--per-gpu", type=int, metavar="N", help="most pods sharing one physical GPU")
    parser.add_argument("--now", type=float, default=0.0, metavar="T", help="clock for reservation expiry (seconds)")


def _parse_levels(text: str):
    from webhook.errors import UsageError

    levels = []
    for part in text.split(","):
        name, sep, label = part.strip().partition("=")
        if not sep or not name.strip() or not label.strip():
            raise UsageError(f"--topology {text!r}: expected LEVEL=LABEL pairs like block=topology.acme.io/block")
        levels.append((name.strip(), label.strip()))
    if len({n for n, _ in levels}) != len(levels):
        raise UsageError(f"--topology {text!r}: a level name appears twice")
    return levels


def _from_policy(path: str):
    from lang import compile_policies
    from webhook.errors import UsageError
    from webhook.sources import read_policy_sources

    sources = read_policy_sources([path])
    policy, diags = compile_policies(sources)
    if policy is None:
        first = next((d for d in diags if d.severity == "error"), diags[0] if diags else None)
        raise UsageError(f"{path}: the policy set has errors (run `allot check {path}`): {first.message if first else ''}")
    topologies = [(t.name, [(lv.name, lv.label) for lv in t.levels]) for t in policy.topologies]
    models = {g.product: (g.name, g.memory) for g in policy.gpus}
    return topologies, models, policy, dict(sources)


def _policy_level(policy, texts: dict, subject, gang, topologies):
    """(the gang request with the level the policy's gang blocks require, `decided_by` text) — unchanged when none applies."""
    from dataclasses import replace

    from policy.engine import Engine
    from policy.blocks.gang import decide_requirement
    from webhook.errors import UsageError

    from policy.subject.model import replace_workload

    if subject is not None and subject.kind == "Pod":  # pods listed without a declared minimum are the gang
        listed = sum(ps.count for ps in gang.pod_sets)
        subject = replace_workload(subject, min_members=subject.min_members or listed, gang=subject.gang or subject.name)
    found = decide_requirement(policy, Engine(policy).enrich(subject)) if subject is not None else None
    if found is None:
        return gang, None
    block, req = found
    if req.topology not in dict(topologies):
        raise UsageError(f"{block.id} requires topology {req.topology}.{req.level}, which --topology replaced; drop --topology or pass --required")
    span = req.span
    lines = texts.get(span.path, "").splitlines()
    text = lines[span.line - 1].strip() if 0 < span.line <= len(lines) else f"require topology {req.topology}.{req.level}"
    return replace(gang, topology=req.topology, required=req.level), f"{block.id} ({span.path}:{span.line}:{span.col}): {text}"


def _read_gang(path: str) -> list[dict]:
    import yaml

    from webhook.errors import UsageError

    try:
        with open(path, encoding="utf-8-sig") as fh:
            docs = list(yaml.safe_load_all(fh))
    except FileNotFoundError:
        raise UsageError(f"{path}: no such gang file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"{path}: cannot read: {exc}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f":{mark.line + 1}:{mark.column + 1}" if mark else ""
        raise UsageError(f"{path}{where}: not YAML: {getattr(exc, 'problem', None) or exc}") from None
    objs: list[dict] = []
    for doc in docs:
        if doc is None:
            continue
        if not isinstance(doc, dict):
            raise UsageError(f"{path}: expected Kubernetes objects, got a {type(doc).__name__}")
        if str(doc.get("kind", "")).endswith("List") and isinstance(doc.get("items"), list):
            objs.extend(i for i in doc["items"] if isinstance(i, dict))
        else:
            objs.append(doc)
    if not objs:
        raise UsageError(f"{path}: no objects")
    return objs


def _gang_request(objs: list[dict], snapshot, topology_name, topology_labels, args):
    """(GangRequest, the subject the gang is judged as: its group, else its first pod) from the gang's objects: pods give pod sets; a group gives the minimum and topology."""
    from policy.subject.normalize import normalize_object, pod_demand
    from policy.placement import GangRequest
    from policy.subject.model import PodSet
    from webhook.errors import UsageError

    counts: dict[tuple, int] = {}
    group = None
    member = None  # the first pod: Kueue / KAI put the topology request and group size on pods
    for obj in objs:
        if obj.get("kind") == "Pod":
            ps = pod_demand(obj, snapshot)
            key = (ps.gpus, ps.fraction, ps.gpu_memory, ps.gpu_product)
            counts[key] = counts.get(key, 0) + 1
            member = member or normalize_object(obj, snapshot)
        elif obj.get("kind") in ("PodGroup", "Workload"):
            group = normalize_object(obj, snapshot)
        else:
            raise UsageError(f"GANG holds a {obj.get('kind')!r}; expected PodGroup, Workload or Pod objects")
    group = group or member
    if counts:
        pod_sets = tuple(PodSet(f"pods-{i}", n, *key) for i, (key, n) in enumerate(counts.items()))
    elif group is not None and group.pod_sets and group.kind != "Pod":
        pod_sets = tuple(group.pod_sets)
    else:
        raise UsageError("GANG declares no pod sets: add its pods, or a group that lists them")
    by_label = {label: level for level, label in topology_labels}

    def level_of(flag, from_group):
        if flag:
            return flag
        if from_group is None:
            return None
        if from_group in by_label:
            return by_label[from_group]
        if from_group in by_label.values():
            return from_group
        raise UsageError(f"the gang asks for topology {from_group!r}, not a level of topology {topology_name}")

    required = level_of(args.required, group.topology_required if group else None)
    preferred = level_of(args.preferred, group.topology_preferred if group else None)
    min_count = group.min_members if group is not None else None
    listed = sum(ps.count for ps in pod_sets)
    if min_count and listed < min_count:  # members not written out yet are shaped like the last listed ones
        last = pod_sets[-1]
        pod_sets = (*pod_sets[:-1], PodSet(last.name, last.count + min_count - listed, last.gpus, last.fraction, last.gpu_memory, last.gpu_product))
    from policy.placement.member import _tolerations

    tolerations = _tolerations(next((o for o in objs if o.get("kind") == "Pod"), None) or (group.obj if group else None))
    return GangRequest(pod_sets, min_count=min_count, topology=topology_name, required=required, preferred=preferred,
                       per_gpu=args.per_gpu, tolerations=tolerations), group


def run(args) -> int:
    """Load the cluster, read the gang, query, print JSON; exit 0 fits, 3 does not."""
    from policy.placement import PlacementIndex
    from webhook.errors import UsageError
    from webhook.clusterfile import read_cluster_file

    if args.per_gpu is not None and args.per_gpu < 1:
        raise UsageError(f"--per-gpu {args.per_gpu}: expected a whole number of pods >= 1")
    if not math.isfinite(args.now):
        raise UsageError(f"--now {args.now}: expected a finite number of seconds")
    topologies, models, policy, texts = [], {}, None, {}
    if args.policy:
        topologies, models, policy, texts = _from_policy(args.policy)
    name = None
    if args.topology and "=" in args.topology:
        topologies = [("default", _parse_levels(args.topology))]
    elif args.topology:
        if args.topology not in dict(topologies):
            known = ", ".join(n for n, _ in topologies) or "none"
            raise UsageError(f"--topology {args.topology!r} is not declared by the policy set (declared: {known})")
        name = args.topology
    if not topologies:
        topologies = [("default", list(DEFAULT_LEVELS))]
    name = name or topologies[0][0]
    levels = [lv for lv, _ in dict(topologies)[name]]
    for flag, value in (("--required", args.required), ("--preferred", args.preferred)):
        if value and value not in levels:
            raise UsageError(f"{flag} {value!r} is not a level of topology {name} (levels: {', '.join(levels)})")
    snapshot = read_cluster_file(args.cluster)
    gang, subject = _gang_request(_read_gang(args.gang), snapshot, name, dict(topologies)[name], args)
    decided_by = None
    if args.required or args.preferred:
        level_from = "flags"
    elif gang.required or gang.preferred:
        level_from = "manifest"
    else:
        level_from = "none"
        if policy is not None:
            gang, decided_by = _policy_level(policy, texts, subject, gang, topologies)
            level_from = "policy" if decided_by else "none"
    index = PlacementIndex.from_snapshot(snapshot, topologies, models)
    index.expire(args.now)
    result = index.query(gang)
    out = result.to_json()
    out["request"] = {
        "pods": sum(ps.count for ps in gang.pod_sets),
        "min_count": gang.min_count,
        "required": gang.required,
        "preferred": gang.preferred,
    }
    out["level_from"] = level_from  # flags | manifest | policy | none
    out["decided_by"] = decided_by
    json.dump(out, sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0 if result.fits else 3
