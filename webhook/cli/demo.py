"""`allot demo`: the real server on 127.0.0.1 over HTTPS, the demo cluster, a scripted set of AdmissionReviews.

Exit 0 when every scripted expectation held, 1 when one did not, 2 when the
server could not start. The script describes the library's policies (policies/):
`--policy DIR` naming another set runs that set's own `*.test.yaml` cases instead
(webhook/demo/own.py), since the script's expectations measure nothing there.
The self-signed CA and its private key live in a temporary directory removed on
exit, unless `--keep`.
"""

from __future__ import annotations

import base64
import pathlib
import sys

REPO = pathlib.Path(__file__).resolve().parents[2]


def add_arguments(parser) -> None:
    """Where the policies and the cluster come from; output format."""
    parser.add_argument("--policy", metavar="DIR", help="policy set (default: the library, the repository's policies/); "
                        "another set is judged by its own *.test.yaml cases instead of the script")
    parser.add_argument("--cluster", metavar="FILE", help="cluster snapshot (default: the embedded demo cluster)")
    parser.add_argument("--json", action="store_true", help="print one JSON object per request instead of a table")
    parser.add_argument("--log", metavar="FILE", help="also write the server's decision log here")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory of the self-signed CA (and its key)")


def is_library(policy: pathlib.Path) -> bool:
    """Whether `policy` is the library the script was written for (the default policies/ directory)."""
    from webhook.cli import UsageError

    try:
        return policy.resolve() == _default_policy().resolve()
    except UsageError:  # no library here at all: any --policy is another set
        return False


def _default_policy() -> pathlib.Path:
    # The library next to the code first: a user's own policies/ in the working directory is not what the script describes.
    for candidate in (REPO / "policies", pathlib.Path.cwd() / "policies"):
        if candidate.is_dir():
            return candidate
    from webhook.errors import UsageError

    raise UsageError("no policies/ directory here or in the repository; pass --policy DIR")


def _default_cluster() -> pathlib.Path:
    return pathlib.Path(__file__).resolve().parents[1] / "data" / "demo-cluster.yaml"


def summarize_patch(resp: dict) -> tuple[list[dict], str]:
    """(JSONPatch ops, a one-line summary such as `priorityClassName=batch, affinity rack=r13`)."""
    if "patch" not in resp:
        return [], ""
    import orjson

    ops = orjson.loads(base64.b64decode(resp["patch"]))
    parts = []
    for op in ops:
        path, value = op.get("path", ""), op.get("value")
        leaf = path.rsplit("/", 1)[-1].replace("~1", "/").replace("~0", "~")
        if "affinity" in path:
            terms = _affinity_values(value)  # block, rack, host: the last is the domain itself
            parts.insert(0, "affinity " + (terms[-1] if terms else "set"))
        elif leaf == "allot.dev/reservation":
            parts.append("reserved")
        elif isinstance(value, (str, int)) and len(str(value)) <= 24:
            parts.append(f"{leaf}={value}")
        else:
            parts.append(f"{op.get('op')} {leaf}")
    return ops, ", ".join(parts)


def _affinity_values(value) -> list[str]:
    found: list[str] = []

    def walk(v):
        if isinstance(v, dict):
            if "key" in v and "values" in v:
                found.append(f"{v['key'].rsplit('/', 1)[-1]}={','.join(map(str, v['values']))}")
            for x in v.values():
                walk(x)
        elif isinstance(v, list):
            for x in v:
                walk(x)

    walk(value)
    return found


def reasons(resp: dict) -> list[str]:
    """Every reason the server gave: each denial (`block: message (location)`) and each warning."""
    import re

    out = []
    if not resp.get("allowed"):
        msg = (resp.get("status") or {}).get("message", "").removeprefix("allot denied: ")
        out += [r for r in re.split(r"(?<=:\d\)); ", msg) if r]  # each denial ends with its (path:line:col)
    return out + [f"warning: {w}" for w in resp.get("warnings", [])]


def affinity_values(ops: list[dict]) -> list[str]:
    """The label values the node-affinity ops of a patch pin (block, rack, host: widest first)."""
    return [t.split("=", 1)[1] for op in ops if "affinity" in op.get("path", "") or "affinity" in str(op.get("value"))[:40]
            for t in _affinity_values(op.get("value"))]


def check(step, status: int, resp: dict, logged: dict) -> list[str]:
    """What did not hold for `step` (empty: all held); `logged` is its decision-log line (codes, placement)."""
    codes = logged.get("codes", [])
    e = step.expect
    problems = []
    if status != 200:
        return [f"HTTP {status}"]
    if resp.get("allowed") is not e.allowed:
        problems.append(f"expected {'allowed' if e.allowed else 'denied'}")
    if set(codes) != set(e.codes):
        problems.append(f"expected reason codes {', '.join(sorted(set(e.codes))) or 'none'}, got {', '.join(sorted(set(codes))) or 'none'}")
    if e.reason and not any(e.reason in r for r in reasons(resp)):
        problems.append(f"expected a reason saying {e.reason!r}")
    ops, _ = summarize_patch(resp)
    paths = " ".join(op.get("path", "") for op in ops)
    for p in e.patch:
        if p not in paths:
            problems.append(f"expected a patch of {p}")
    if e.affinity and affinity_values(ops)[-1:] != [e.affinity]:
        problems.append(f"expected node affinity to {e.affinity}, got {', '.join(affinity_values(ops)) or 'none'}")
    if e.placement and e.placement != (logged.get("placement") or {}).get("value"):
        problems.append(f"expected placement in {e.placement}, got {(logged.get('placement') or {}).get('value')}")
    if e.warning and not any(e.warning in w for w in resp.get("warnings", [])):
        problems.append(f"expected a warning about {e.warning}")
    return problems


class _Tee:
    """The server's decision log: kept per uid (the demo checks reason codes from it) and copied to --log."""

    def __init__(self, copy) -> None:
        self.copy = copy
        self.lines: dict[str, dict] = {}

    def write(self, data: bytes) -> int:
        import orjson

        for line in data.splitlines():
            rec = orjson.loads(line)
            if rec.get("uid") and "codes" in rec:
                self.lines[rec["uid"]] = rec
        if self.copy is not None:
            self.copy.write(data)
        return len(data)

    def flush(self) -> None:
        if self.copy is not None:
            self.copy.flush()


def _reason(resp: dict, step=None) -> str:
    """The reason the step is about (the one containing its expected text), else the first one."""
    found = reasons(resp)
    want = step.expect.reason if step is not None else None
    shown = next((r for r in found if want and want in r), found[0] if found else "")
    more = len(found) - 1
    return shown + (f" (+{more} more)" if more > 0 else "")


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def run(args) -> int:
    """Start the server, send the script, print the table, stop."""
    import logging
    import shutil
    import tempfile

    import aiohttp
    import orjson

    from webhook.server import tls
    from webhook.cli.serve import run_loop
    from webhook.demo.script import steps
    from webhook.server.serving import ServeOptions, StartError, start

    if args.policy and not is_library(pathlib.Path(args.policy)):
        from webhook.demo.own import run_own_tests

        return run_own_tests(args)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s")
    policy = pathlib.Path(args.policy) if args.policy else _default_policy()
    cluster = pathlib.Path(args.cluster) if args.cluster else _default_cluster()
    log_stream = open(args.log, "ab") if args.log else None  # noqa: SIM115 - closed below
    decisions = _Tee(log_stream)
    outcome = {"code": 0}

    certs_dir = tempfile.mkdtemp(prefix="allot-demo-")  # holds the CA private key: removed on exit unless --keep

    async def main() -> None:
        opts = ServeOptions(policy=str(policy), cluster=str(cluster), host="127.0.0.1", port=0, self_signed=True,
                            certs_dir=certs_dir, decision_log=decisions, buffered_log=False, reload_interval=3600, tls_interval=3600)
        try:
            running = await start(opts)
        except StartError as exc:
            print(f"allot demo: error: the server did not start: {exc}", file=sys.stderr)
            outcome["code"] = 2
            return
        try:
            print(f"allot demo: webhook at {running.url} (HTTPS, CA {running.ca_path}); policies {policy}; "
                  f"cluster {cluster.name} ({len(running.state.snapshot)} objects)\n")
            connector = aiohttp.TCPConnector(ssl=tls.client_context(running.ca_path))
            rows, failed = [], 0
            async with aiohttp.ClientSession(connector=connector) as session:
                for i, step in enumerate(steps(), 1):
                    url = f"{running.url}/{step.endpoint}?timeout=10s"
                    async with session.post(url, data=orjson.dumps(step.review),
                                            headers={"Content-Type": "application/json"}) as r:
                        status, body = r.status, await r.read()
                    resp = orjson.loads(body).get("response", {}) if status == 200 else {}
                    logged = decisions.lines.get(step.review["request"]["uid"], {})
                    problems = check(step, status, resp, logged)
                    failed += bool(problems)
                    _, patch = summarize_patch(resp)
                    if logged.get("placement") and not patch:
                        p = logged["placement"]
                        patch = f"placed {p['level']}={p['value']}" + (" (reserved)" if p.get("reservation") else "")
                    rows.append((i, step, status, resp, patch, problems))
            _print(rows, args.json)
            total = len(rows)
            print(f"\n{total - failed}/{total} scripted expectations held", file=sys.stdout if not args.json else sys.stderr)
            outcome["code"] = 1 if failed else 0
        finally:
            await running.stop()

    try:
        run_loop(main)
    finally:
        if log_stream:
            log_stream.close()
        if args.keep:
            print(f"allot demo: kept {certs_dir} (the self-signed CA, its private key and the serving certificate); "
                  "delete it when done", file=sys.stderr)
        else:
            shutil.rmtree(certs_dir, ignore_errors=True)
    return outcome["code"]


def _print(rows, as_json: bool) -> None:
    import orjson

    if as_json:
        for i, step, status, resp, patch, problems in rows:
            print(orjson.dumps({"n": i, "request": step.title, "endpoint": step.endpoint, "http": status,
                                "allowed": resp.get("allowed"), "reason": _reason(resp, step), "reasons": reasons(resp),
                                "expect": step.expect.describe(), "patch": patch,
                                "warnings": resp.get("warnings", []), "ok": not problems, "problems": problems}).decode())
        return
    header = f"{'#':>2}  {'request':<58} {'endpoint':<8} {'result':<7} {'block / reason':<64} patch"
    print(header)
    print("-" * len(header))
    for i, step, status, resp, patch, problems in rows:
        result = ("ALLOWED" if resp.get("allowed") else "DENIED") if status == 200 else f"HTTP {status}"
        mark = "" if not problems else "   <-- " + "; ".join(problems)
        print(f"{i:>2}  {_cut(step.title, 58):<58} {step.endpoint:<8} {result:<7} {_cut(_reason(resp, step), 64):<64} "
              f"{_cut(patch, 48)}{mark}")
        print(f"    expect {step.expect.describe()}")
