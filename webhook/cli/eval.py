"""`allot eval`: decide one admission request offline, printing exactly what the webhook would send.

    allot eval --policy DIR [--cluster FILE] [--mutate] [--user U] [--group G]…
               [--operation OP] [--namespace NS] [--explain] [--now T] REQUEST
    allot eval --policy DIR [--cluster FILE] [--now T] [--format json] --replay LOG

REQUEST is a manifest (YAML or JSON; wrapped into an AdmissionReview with the
user, groups and operation given) or a full AdmissionReview; `-` reads stdin.
Exit 0 allowed, 3 denied, 1 policy errors, 2 usage errors.

`--replay LOG` decides again every line of a decision log written by
`allot serve --log-requests` (webhook/replay.py) and lists the decisions the
policy set now takes differently: exit 0 when none changed, 1 when some did (or
no line could be replayed).
"""

from __future__ import annotations

import json
import sys

DEFAULT_USER = "kubernetes-admin"


def default_groups(user: str) -> tuple[str, ...]:
    """The groups the API server gives `user` when --group is not given (kubeadm admin, service accounts)."""
    if user == DEFAULT_USER:
        return ("system:masters", "system:authenticated")
    parts = user.split(":")
    if len(parts) == 4 and parts[:2] == ["system", "serviceaccount"]:
        return ("system:serviceaccounts", f"system:serviceaccounts:{parts[2]}", "system:authenticated")
    return ("system:authenticated",)


def add_arguments(parser) -> None:
    """Options of `allot eval`."""
    parser.add_argument("request", metavar="REQUEST", nargs="?", help="manifest or AdmissionReview (YAML/JSON file, - for stdin)")
    parser.add_argument("--replay", metavar="LOG", help="decide again every logged request of a decision log (serve --log-requests) and list what changed")
    parser.add_argument("--policy", action="append", required=True, metavar="DIR", help="policy directory or file (repeatable)")
    parser.add_argument("--cluster", metavar="FILE", help="cluster state: `kubectl get … -o yaml` List (default: empty)")
    parser.add_argument("--mutate", action="store_true", help="decide as the mutating webhook (include the JSONPatch)")
    parser.add_argument("--user", default=DEFAULT_USER, help=f"requesting user for a bare manifest (default {DEFAULT_USER})")
    parser.add_argument("--group", action="append", metavar="G", help="requesting user's group (repeatable; default: what the API server gives the user)")
    parser.add_argument("--operation", default="CREATE", type=str.upper, choices=("CREATE", "UPDATE", "DELETE", "CONNECT"))
    parser.add_argument("--namespace", metavar="NS", help="namespace a bare manifest that names none is judged in, as `kubectl -n` (default: default)")
    parser.add_argument("--explain", action="store_true", help="print a human trace of every block instead of the JSON")
    parser.add_argument("--now", type=float, metavar="T", help="decision time, Unix seconds (default: the clock)")
    parser.add_argument("--format", choices=("text", "json"), default="text", help="--explain or --replay output: text (default) or json")


def load_policy(paths: list[str]):
    """The compiled PolicySet of `paths`; prints diagnostics and returns None on errors."""
    import lang
    from lang.diagnostics import render_all
    from webhook.errors import UsageError
    from webhook.sources import read_policy_sources

    sources = read_policy_sources(paths)
    if not sources:
        raise UsageError("no .policy files found in " + ", ".join(paths))
    policy_set, diags = lang.compile_policies(sources)
    if policy_set is None:
        print(render_all(diags, dict(sources)), file=sys.stderr)
        return None
    return policy_set


def load_snapshot(path: str | None):
    """The cluster snapshot of `path`, or an empty one."""
    if path is None:
        from policy.cluster.snapshot import ClusterSnapshot

        return ClusterSnapshot()
    from webhook.clusterfile import read_cluster_file

    return read_cluster_file(path)


def read_document(path: str) -> dict:
    """One YAML/JSON object from a file or stdin; UsageError with one line otherwise."""
    import yaml

    from webhook.errors import UsageError
    from webhook.textfile import read_text

    text = read_text(path, "request")
    try:
        docs = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f":{mark.line + 1}:{mark.column + 1}" if mark else ""
        raise UsageError(f"{path}{where}: not valid YAML/JSON ({getattr(exc, 'problem', None) or 'syntax error'})") from None
    if len(docs) != 1 or not isinstance(docs[0], dict):
        raise UsageError(f"{path}: expected exactly one object (a manifest or an AdmissionReview), found {len(docs)}")
    return docs[0]


def build_request(doc: dict, *, user: str, groups, operation: str, namespace: str | None = None) -> dict:
    """The AdmissionReview `request` of a document: parsed if it is a review, else the manifest wrapped (in `namespace` when given)."""
    from policy.admission import ReviewError, parse_review, wrap_manifest
    from webhook.errors import UsageError

    try:
        if doc.get("kind") == "AdmissionReview":
            if namespace is not None:
                raise UsageError("--namespace applies to a bare manifest; an AdmissionReview names its own request.namespace")
            return parse_review(doc)
        meta = doc.get("metadata")
        own = meta.get("namespace") if isinstance(meta, dict) else None
        if namespace is not None and own and own != namespace:  # as kubectl refuses `-n` against the manifest's own
            raise UsageError(f"--namespace {namespace}: the manifest names namespace {own!r}")
        return parse_review(wrap_manifest(doc, user=user, groups=groups, operation=operation, namespace=namespace))
    except ReviewError as exc:
        raise UsageError(f"request: {exc}") from None


def run(args) -> int:
    """Decide and print; exit 0 allowed, 3 denied, 1 policy errors."""
    import math
    import time

    from policy.admission import respond
    from policy.engine import Engine
    from webhook.errors import UsageError

    if args.now is not None and not math.isfinite(args.now):  # nan/inf would make every expiry comparison false
        raise UsageError(f"--now {args.now}: give a finite number of Unix seconds")
    if (args.request is None) == (args.replay is None):
        raise UsageError("give a REQUEST to decide, or --replay LOG (not both)")
    if args.replay is not None:
        if args.explain or args.mutate:
            raise UsageError("--replay decides each line as its endpoint did; --explain and --mutate apply to one REQUEST")
        return _replay(args)
    doc = read_document(args.request)
    groups = tuple(args.group) if args.group else default_groups(args.user)
    request = build_request(doc, user=args.user, groups=groups, operation=args.operation, namespace=args.namespace)
    policy_set = load_policy(args.policy)
    if policy_set is None:
        return 1
    snapshot = load_snapshot(args.cluster)
    now = args.now if args.now is not None else time.time()
    engine = Engine(policy_set)
    if args.explain:
        from policy.blocks.priority_origin import global_default_note

        decision, trace, workload = engine.explain(request, snapshot, now, mutate=args.mutate)
        note = global_default_note(request.get("object"), snapshot, policy_set.priorities)
        notes = [note] if note else []
        if args.format == "json":
            steps = [{"block": b, "location": loc, "text": text} for b, loc, text in trace]
            print(json.dumps({"decision": decision.to_json(), "trace": steps, "notes": notes}, indent=2, default=str))
        else:
            print(render_explain(request, workload, decision, trace, policy_set, notes))
    else:
        decision = engine.decide(request, snapshot, now, mutate=args.mutate, reserve=False)
        print(json.dumps(respond(request, decision, mutate=args.mutate), indent=2))
    return 0 if decision.allowed else 3


def _replay(args) -> int:
    from policy.engine import Engine
    from webhook.replay import render, replay
    from webhook.textfile import read_lines

    policy_set = load_policy(args.policy)
    if policy_set is None:
        return 1
    snapshot = load_snapshot(args.cluster)
    report = replay(read_lines(args.replay, "decision log"), Engine(policy_set), snapshot, now=args.now)
    if args.format == "json":
        print(json.dumps(report.to_json(), indent=2))
    else:
        print(render(report))
    if report.replayed == 0:
        print(f"allot eval: nothing to replay in {args.replay}", file=sys.stderr)
        return 1
    return 1 if report.changed else 0


def _source_line(policy_set, location: str) -> str | None:
    path, _, rest = location.rpartition(":")
    path, _, line = path.rpartition(":")
    texts = dict(policy_set.sources)
    if path not in texts or not line.isdigit():
        return None
    lines = texts[path].splitlines()
    n = int(line)
    return lines[n - 1].strip() if 0 < n <= len(lines) else None


def _fmt_subject(w) -> str:
    from lang.quantity import format_bytes_short, format_milli

    def amount(v, f):
        return "none" if v is None else f(v)

    parts = [
        f"gpus={format_milli(w.gpus)}",
        f"total_gpus={format_milli(w.total_gpus)}",
        f"pods={w.pods}",
        f"fraction={amount(w.fraction, format_milli)}",
        f"gpu_memory={amount(w.gpu_memory, format_bytes_short)}",
        f"gpu_model={w.gpu_model or 'none'}",
        f"priority_class={w.priority_class or 'none'}",
        f"gang={w.gang or 'none'}",
        f"min_members={w.min_members if w.min_members is not None else 'none'}",
        f"agent={'true' if w.agent else 'false'}",
    ]
    return " ".join(parts)


def render_plan(plan) -> list[str]:
    """The plan's lines for `--explain`: kind and what it frees, then each victim with its action, pods and reason."""
    if plan is None:
        return []
    from lang.quantity import format_milli

    out = [f"  plan    {plan.kind} for {plan.workload} ({plan.quota}): frees {format_milli(plan.freed)} GPUs"
           + (f", lands on {', '.join(f'{n} x{k}' for n, k in plan.nodes)}" if plan.nodes else "")
           + ("" if plan.placed else " (placement not evaluated)")]
    for v in plan.victims:
        pods = ", ".join(f"{p.name}@{p.node or '-'}" for p in v.pods)
        out.append(f"    {v.action:<7} {v.kind} {v.namespace}/{v.name} uid={v.uid or '-'}: {format_milli(v.gpus)} GPUs [{pods}]; {v.reason}")
    out.append(f"    rules: {', '.join(plan.rules)}")
    return out


def render_explain(request: dict, w, decision, trace, policy_set, notes=()) -> str:
    """The human trace: request, subject, each block's steps with their source line, the outcome."""
    from policy.admission import headline

    res = request.get("resource", {}).get("resource", "")
    sub = request.get("subResource")
    user = request.get("userInfo", {})
    out = [
        f"request   {request.get('operation')} {res}{'/' + sub if sub else ''} {w.namespace or '-'}/{w.name or '-'}"
        f" by {user.get('username')} (groups: {', '.join(user.get('groups') or []) or 'none'})",
        f"subject   {w.kind}: {_fmt_subject(w)}",
    ]
    for n in notes:
        out.append(f"priority  {n}")
    for p in w.problems:
        out.append(f"problem   {p.code}: {p.message}")
    current = None
    for block, location, text in trace:
        if block != current:
            current = block
            out.append(f"\n{block}  ({location})")
            src = _source_line(policy_set, location)
            if src:
                out.append(f"    | {src}")
        out.append(f"    {text}")
    if not trace:
        out.append("\nno block matched this request")
    out.append("")
    out.append("decision  " + ("ALLOWED" if decision.allowed else "DENIED"))
    for r in decision.denials:
        out.append(f"  deny    {headline(r.block, r.message)}  [{r.code} at {r.location}]")
    for wtext in decision.warnings:
        out.append(f"  warning {wtext}")
    for key, value in decision.audit.items():
        out.append(f"  audit   {key}: {value}")
    out.extend(render_plan(decision.plan))
    unsent = "" if decision.allowed else "  (not sent: denied)"
    for op in decision.patch:
        value = f" {json.dumps(op['value'])}" if "value" in op else ""
        out.append(f"  patch   {op['op']} {op['path']}{value}{unsent}")
    return "\n".join(out)
