"""`allot place --cluster FILE [--policy DIR] GANG`: where would this gang fit now, and if not, why.

GANG is a YAML file (multi-document or a List) of a PodGroup / Workload of any dialect
and/or its pods. The required level comes from the flags, else from the manifest (the
group's or Kueue/KAI pod annotations), else — with `--policy` — from the policy set's
matching `gang` block judged on the gang view, as admission would (`decided_by` names
it). Prints JSON (`notes`, `workload`, `fits`, `topology`, `level`, `domain`, `nodes`, `reason`,
`reasons`, `request`, `level_from`, `decided_by`); a file of several workloads gets a list
of such answers, one per workload in order. Exit 0 all fit, 3 one does not, 2 usage errors.
"""

from __future__ import annotations

import json
import math
import sys

from webhook.cli.place_input import DEFAULT_LEVELS, fit_default, split_workloads, workload_name

__all__ = ["DEFAULT_LEVELS", "add_arguments", "run"]


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


def _policy_level(policy, texts: dict, subject, gang, topologies, build):
    """(the gang request with the level and models of the policy's deciding gang block, `decided_by` text) — unchanged when none applies."""
    from dataclasses import replace

    from policy.blocks.gang import decide_requirement
    from webhook.errors import UsageError

    found = decide_requirement(policy, subject, gang)
    if found is None:
        return gang, None
    block, req = found
    if req.topology not in dict(topologies):
        raise UsageError(f"{block.id} requires topology {req.topology}.{req.level}, which --topology replaced; drop --topology or pass --required")
    span = req.span
    lines = texts.get(span.path, "").splitlines()
    text = lines[span.line - 1].strip() if 0 < span.line <= len(lines) else f"require topology {req.topology}.{req.level}"
    gang = replace(build(block.models), topology=req.topology, required=req.level, preferred=gang.preferred)
    return gang, f"{block.id} ({span.path}:{span.line}:{span.col}): {text}"


def _read_gang(path: str) -> list[dict]:
    import yaml

    from webhook.errors import UsageError
    from webhook.textfile import read_text

    text = read_text(path, "gang")
    try:
        docs = list(yaml.safe_load_all(text))
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


def _gang_request(objs: list[dict], snapshot, topology_name, topology_labels, args, policy=None):
    """(GangRequest, the subject the gang is judged as, a builder of the request for a block's `models`), by the path admission takes."""
    from dataclasses import replace

    from policy.placement.request import gang_in_hand, request_for
    from webhook.errors import UsageError

    found = gang_in_hand(objs, snapshot)
    if isinstance(found, str):
        raise UsageError(found)
    subject, group, seen = found
    if policy is not None:
        from policy.engine import Engine

        subject = Engine(policy).enrich(subject)
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

    required = level_of(args.required, subject.topology_required)
    preferred = level_of(args.preferred, subject.topology_preferred)

    def build(models=()):
        gang = request_for(subject, group=group, seen=seen, per_gpu=args.per_gpu, models=tuple(models))
        return replace(gang, topology=topology_name, required=required, preferred=preferred)

    return build(), subject, build


def run(args) -> int:
    """Load the cluster, read the gang file, judge each workload in it, print JSON; exit 0 all fit, 3 one does not."""
    from webhook.clusterfile import read_cluster_file
    from webhook.errors import UsageError

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
    default = not topologies  # nothing declared or given: the default, fitted to the cluster's labels
    if default:
        topologies = [("default", list(DEFAULT_LEVELS))]
    name = name or topologies[0][0]
    levels = [lv for lv, _ in dict(topologies)[name]]
    for flag, value in (("--required", args.required), ("--preferred", args.preferred)):
        if value and value not in levels:
            raise UsageError(f"{flag} {value!r} is not a level of topology {name} (levels: {', '.join(levels)})")
    snapshot = read_cluster_file(args.cluster, needs_nodes="a gang cannot be placed on a cluster with no nodes")
    workloads = split_workloads(_read_gang(args.gang), args.gang)
    indexes: dict = {}  # one index per set of levels, shared by the workloads judged on it

    def index_of(tops):
        key = repr(tops)
        if key not in indexes:
            from policy.placement import PlacementIndex

            indexes[key] = PlacementIndex.from_snapshot(snapshot, tops, models)
            indexes[key].expire(args.now)
        return indexes[key]

    answers = [_judge(objs, snapshot, name, topologies, args, policy, texts, index_of, default) for objs in workloads]
    fits = all(out["fits"] for out in answers)
    json.dump(answers[0] if len(answers) == 1 else answers, sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0 if fits else 3


def _judge(objs, snapshot, name, topologies, args, policy, texts, index_of, default) -> dict:
    """The answer for one workload: `notes` first (what was assumed), then the placement and the request."""
    from dataclasses import replace

    from lang.quantity import format_milli
    from policy.placement.query import set_counts
    from policy.placement.request import gang_size
    from policy.placement.result import PlacementReason, PlacementResult

    gang, subject, build = _gang_request(objs, snapshot, name, dict(topologies)[name], args, policy)
    decided_by = None
    if args.required or args.preferred:
        level_from = "flags"
    elif gang.required or gang.preferred:
        level_from = "manifest"
    else:
        level_from = "none"
        if policy is not None:
            gang, decided_by = _policy_level(policy, texts, subject, gang, topologies, build)
            level_from = "policy" if decided_by else "none"
    notes: list[str] = []
    if default:
        levels = dict(topologies)[name]
        kept, notes, preferred, index = fit_default(lambda lv: index_of([(name, lv)]), levels, gang.required, gang.preferred,
                                                    policy is not None)
        gang = replace(gang, preferred=preferred)
    else:
        index = index_of(topologies)
    for note in notes:  # a person at the terminal reads these before the JSON
        sys.stderr.write(f"allot place: note: {note}\n")
    pods, total = gang_size(gang)
    if total <= 0:  # as on admission: a GPU-less gang has nothing to place and passes
        reason = PlacementReason("NothingToPlace", "the gang asks for no GPUs: nothing to place", {})
        result = PlacementResult(True, topology=gang.topology, reasons=(reason,))
    else:
        result = index.query(gang)
    out = {"notes": notes, "workload": workload_name(objs), **result.to_json()}
    out["request"] = {
        "pods": pods,
        "total_gpus": format_milli(total),
        "pod_sets": [{"name": ps.name, "pods": c, "gpus": format_milli(ps.gpus), "model": ps.gpu_product}
                     for ps, c in zip(gang.pod_sets, set_counts(gang)) if c],
        "models": list(gang.models),
        "min_count": gang.min_count,
        "required": gang.required,
        "preferred": gang.preferred,
    }
    out["level_from"] = level_from  # flags | manifest | policy | none
    out["decided_by"] = decided_by
    if policy is not None and not result.fits:  # what would make room: the engine's reclaim or preemption plan
        out["plan"] = _plan(objs, snapshot, policy, args.now)
    return out


def _plan(objs, snapshot, policy, now: float) -> dict | None:
    """The plan the policy set's engine would admit the workload with (offline: nothing reserved or pledged), else None."""
    from policy.admission import wrap_manifest
    from policy.engine import Engine

    gpu_pods = [o for o in objs if o.get("kind") == "Pod"] or objs
    request = wrap_manifest(gpu_pods[0], user="allot-place", groups=[], operation="CREATE")["request"]
    decision = Engine(policy).decide(request, snapshot, now, reserve=False)
    return decision.plan.to_json() if decision.plan is not None else None
