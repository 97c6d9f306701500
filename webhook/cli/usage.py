"""`allot usage`: each budget's use this period, what is left, the burn rate and the day it runs out at that rate.

    allot usage --policy DIR (--cluster DUMP | --kubeconfig FILE) [--namespace NS] [--at TIME] [--json]

From a dump (`kubectl get nodes,pods -A -o yaml` plus `kubectl get configmap allot-meter -n NS
-o yaml`, in one file or a List) or the live cluster. The stored meter is adopted as a replica
adopts it; without one, use is counted from the pods running now (from their start in the period).
Exit 0 printed, 1 the policy does not compile, 2 usage errors.
"""

from __future__ import annotations

import datetime
import json
import sys

from webhook.meter import store


def add_arguments(parser) -> None:
    """Options of `allot usage`."""
    parser.add_argument("--policy", action="append", metavar="DIR", required=True, help="policy directory or file (repeatable)")
    src = parser.add_mutually_exclusive_group(required=True)
    src.add_argument("--cluster", metavar="DUMP", help="a cluster dump: nodes and pods, and the allot-meter ConfigMap if it was dumped")
    src.add_argument("--kubeconfig", metavar="FILE", help="read the live cluster and its meter object")
    parser.add_argument("--namespace", default="allot-system", help="where the allot-meter ConfigMap lives (serve --ledger; default allot-system)")
    parser.add_argument("--at", metavar="TIME", help="report at this RFC 3339 time (default: now; for --kubeconfig the API server's time)")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")


def _policy(args):
    from webhook.cli.eval import load_policy  # the same reader `allot eval` uses

    return load_policy(args.policy)


def _from_dump(path: str):
    from policy.cluster.snapshot import ClusterSnapshot
    from policy.cluster.text import load_documents
    from webhook.clusterfile import read_text_file

    text = read_text_file(path, "cluster")
    meter_cm, objs = None, []
    for _, obj, _kind, _ in load_documents(text):
        if isinstance(obj, dict) and obj.get("kind") == "ConfigMap":
            if (obj.get("metadata") or {}).get("name") == store.NAME:
                meter_cm = obj
            continue
        objs.append(obj)
    return ClusterSnapshot.from_objects(objs), meter_cm, None


def _from_cluster(kubeconfig: str, namespace: str):
    import email.utils

    import orjson
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    from policy.cluster.snapshot import ClusterSnapshot
    from webhook.server.watch import api_client_from

    core = client.CoreV1Api(api_client_from(kubeconfig))
    objs = []
    server_ms = None
    for kind, call in (("Node", core.list_node), ("Pod", core.list_pod_for_all_namespaces)):
        resp = call(_preload_content=False, _request_timeout=(10, 60))
        date = resp.headers.get("Date")
        if date and server_ms is None:  # the API server's clock is the meter's reference
            server_ms = int(email.utils.parsedate_to_datetime(date).timestamp() * 1000)
        for item in orjson.loads(resp.data).get("items") or []:
            item.setdefault("kind", kind)
            objs.append(item)
    try:
        cm = orjson.loads(core.read_namespaced_config_map(store.NAME, namespace, _preload_content=False).data)
    except ApiException as exc:
        if exc.status != 404:
            raise
        cm = None
    return ClusterSnapshot.from_objects(objs), cm, server_ms


def _time(text: str | None) -> int | None:
    from policy.budget.calendar import parse_time
    from webhook.errors import UsageError

    if text is None:
        return None
    t = parse_time(text)
    if t is None:
        raise UsageError(f"--at {text!r} is not an RFC 3339 time like 2025-06-03T10:00:00Z")
    return t


def rows_at(policy_set, snapshot, meter_cm, t_ms: int) -> tuple[list[dict], list[str]]:
    """The usage rows at `t_ms`, with the stored meter adopted; and what about the meter object is worth saying."""
    from policy.budget.report import usage
    from policy.engine import Engine

    meter = Engine(policy_set).state_for(snapshot).meter_at(t_ms)
    if meter is None:
        return [], []
    notes = []
    stored = store.decode(meter_cm)
    if stored is None:
        notes.append(f"no {store.NAME} object: use counted from the pods running now, from their start in the period")
    else:
        notes.extend(stored.problems)
        for name, e in stored.entries.items():
            if stored.at is not None and meter.adopt(name, e.period, e.used, stored.at, t_ms, e.previous) == "unknown":
                notes.append(f"{name}: in the meter object, declared by no budget (renamed or removed)")
    return usage(meter, t_ms), notes


def _when(t_ms: int | None, zone: str) -> str:
    from webhook.meter.zones import _zone

    if t_ms is None:
        return "not this period"
    return datetime.datetime.fromtimestamp(t_ms / 1000, _zone(zone)).strftime("%Y-%m-%d %H:%M %Z")


def run(args) -> int:
    """Print every budget's usage."""
    from policy.budget import figures

    policy_set = _policy(args)
    if policy_set is None:
        return 1
    if args.cluster:
        snapshot, cm, server_ms = _from_dump(args.cluster)
    else:
        snapshot, cm, server_ms = _from_cluster(args.kubeconfig, args.namespace)
    import time

    t_ms = _time(args.at) or server_ms or int(time.time() * 1000)
    rows, notes = rows_at(policy_set, snapshot, cm, t_ms)
    if args.json:
        print(json.dumps({"at": t_ms, "budgets": rows, "notes": notes}, indent=2))
        return 0
    if not rows:
        print("the policy set declares no budget")
        return 0
    head = ("budget", "period", "used", "of", "left", "burn (GPUs)", "runs out")
    table = [head]
    for r in rows:
        unit = figures.unit(r["model"])
        table.append((r["budget"], r["period"], f"{figures.hours(r['used'])} {unit}", figures.hours(r["amount"]),
                      figures.hours(r["left"]), f"{r['rate'] / 1000:g}", "spent" if r["spent"] else _when(r["runs_out"], r["zone"])))
    widths = [max(len(row[c]) for row in table) for c in range(len(head))]
    for row in table:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())
    for n in notes:
        print(f"note: {n}", file=sys.stderr)
    return 0
