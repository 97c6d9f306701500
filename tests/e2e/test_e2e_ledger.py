"""Three `allot serve --ledger` replicas behind a round-robin proxy, called by the real API server: one quota, exact.

The compiled validating configuration points the API server at a TCP proxy that deals
connections to the replicas in turn (TLS passes through; all serve one certificate).
1,000 pod creates go through the API server concurrently; the quota admits exactly its
GPUs. A replica killed mid-burst over-admits nothing, and once its holds have expired
the ledger ConfigMap holds none of them (the survivors' watch-fed prune dropped them).
A Deployment's hold, written by the replica that admitted it, is counted by every
replica; its pods take from it whichever replica answers them; its deletion releases it on all.
"""

from __future__ import annotations

import concurrent.futures
import json
import threading
import time

import pytest

# pytest's hypothesis plugin first imports this at the end of the session, and CPython 3.11.7's
# AST state is not thread-safe (gh-106905): after this suite's threaded creates that late import
# failed with "AST constructor recursion depth mismatch" although every test had passed.
import hypothesis.internal.observability  # noqa: F401

import kit
from kit import RACK, gpu_pod, revive, wait_for
from proxy import RoundRobin

pytestmark = pytest.mark.e2e
QUOTA = 64
WL_QUOTA = 4  # the workload-hold tests' quota
CREATES = 1000
REPLICAS = 3


@pytest.fixture(scope="module")
def replicas(kube, cluster, tmp_path_factory):
    """REPLICAS replicas sharing a ledger namespace, the proxy, and a validating configuration naming the proxy."""
    from webhook.server.serving import self_signed

    run = cluster["run"]
    ns, killed_ns, ledger_ns, wl_ns, gang_ns = f"lq-{run}", f"lk-{run}", f"ledger-{run}", f"lw-{run}", f"lg-{run}"
    paused_ns = f"lp-{run}"
    for name in (ns, killed_ns, ledger_ns, wl_ns, gang_ns, paused_ns):
        kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    # A rack of its own for the gang test, larger than any the other suites use (rack r1 may be held
    # by their gangs' annotated pods: a replica restores such holds from the pods it watches).
    rack_nodes = [f"e2e-{run}-lg{i}" for i in range(3)]
    for name in rack_nodes:
        kube.create(kit.node(name, f"lg-{run}"))
        kube.run("patch", "node", name, "--subresource=status", "--type=merge", "-p", kit.node_status(8))
    for name in (ns, killed_ns, wl_ns, gang_ns, paused_ns):
        wait_for(f"serviceaccount default in {name}",
                 lambda name=name: kube.run("get", "serviceaccount", "default", "-n", name, check=False).returncode == 0)
    work = tmp_path_factory.mktemp("allot-ledger-e2e")
    certs = work / "certs"
    self_signed(str(certs), "127.0.0.1")
    pdir = work / "policies"
    pdir.mkdir()
    (pdir / "q.policy").write_text(f'quota ledger-e2e {{\n  for namespace == "{ns}"\n  gpus {QUOTA}\n}}\n'
                                   f'quota ledger-kill {{\n  for namespace == "{killed_ns}"\n  gpus {QUOTA}\n}}\n'
                                   f'quota ledger-pause {{\n  for namespace == "{paused_ns}"\n  gpus {QUOTA}\n}}\n'
                                   f'quota ledger-wl {{\n  for namespace == "{wl_ns}"\n  gpus {WL_QUOTA}\n}}\n'
                                   f'topology fabric {{\n  rack "{RACK}"\n  host "kubernetes.io/hostname"\n}}\n'
                                   f'gang ledger-racks {{\n  for namespace == "{gang_ns}"\n  require topology fabric.rack\n'
                                   f'  on unplaceable deny\n}}\n')
    servers = kit.start_replicas(REPLICAS, pdir, kube.kubeconfig, work, certs, ledger_ns)
    proxy = None
    try:
        proxy = RoundRobin([s.port for s in servers])
        out = work / "compiled"
        kit.run_allot("compile", "--policy", str(pdir), "-o", str(out), "--url", f"https://127.0.0.1:{proxy.port}",
                      "--ca-bundle", str(certs / "ca.crt"))
        text = (out / "validating-webhook.yaml").read_text().replace("allot-validating", f"allot-ledger-{run}")
        kube.run("create", "-f", "-", stdin=text)

        def called():  # the configuration is live once a replica logs the dry-run probe (other suites' webhooks may deny it)
            kube.create(gpu_pod("probe", ns, gpus=1), "--dry-run=server", check=False)
            return any(d.get("name") == "probe" and d.get("namespace") == ns for s in servers for d in s.decisions())

        wait_for("the ledger webhook configuration to take effect", called, timeout=30, every=0.5)
        yield {"ns": ns, "killed_ns": killed_ns, "paused_ns": paused_ns, "ledger_ns": ledger_ns, "wl_ns": wl_ns, "gang_ns": gang_ns,
               "servers": servers, "run": run, "proxy": proxy, "rack_nodes": rack_nodes}
    finally:
        kube.run("delete", "validatingwebhookconfiguration", f"allot-ledger-{run}", "--ignore-not-found", check=False)
        if proxy is not None:
            proxy.stop()
        for s in servers:
            s.stop()
        for name in (ns, killed_ns, ledger_ns, wl_ns, gang_ns, paused_ns):
            kube.run("delete", "namespace", name, "--wait=false", "--ignore-not-found", check=False)
        for name in rack_nodes:
            kube.run("delete", "node", name, "--ignore-not-found", check=False)


def _shard_holds(core, ledger_ns: str, quota: str) -> dict:
    """hold key -> [expires_at, holds, replica, seen_at] in the ledger shard of `quota`."""
    shard = next((cm for cm in core.list_namespaced_config_map(ledger_ns).items
                  if quota in cm.metadata.name and not cm.metadata.name.endswith("-want")), None)  # (escrow's want objects)
    return json.loads((shard.data or {}).get("holds") or "{}") if shard is not None else {}


def test_concurrent_creates_through_the_api_server_admit_exactly_the_quota(kube, replicas):
    core = kit.core_api(kube.kubeconfig)
    ns = replicas["ns"]
    servers = replicas["servers"]
    before = sum(s.metric("allot_ledger_writes", result="conflict") for s in servers)
    t0 = time.perf_counter()
    created = kit.create_pods(core, ns, [f"p{i}" for i in range(CREATES)])
    seconds = time.perf_counter() - t0
    stored = core.list_namespaced_pod(ns).items
    assert created == QUOTA and len(stored) == QUOTA
    writes = sum(s.metric("allot_ledger_writes", result="ok") for s in servers)
    conflicts = sum(s.metric("allot_ledger_writes", result="conflict") for s in servers) - before
    asks = {r: sum(s.metric("allot_ledger_peer_asks", result=r) for s in servers) for r in ("admitted", "declined", "unanswered")}
    print(f"\n{CREATES} creates through the API server in {seconds:.1f}s ({CREATES / seconds:.0f}/s), {created} admitted, "
          f"{writes:.0f} ledger writes, {conflicts:.0f} conflicts, peer asks {asks}")
    answered = [[d for d in s.decisions() if d.get("namespace") == ns and d.get("operation") == "CREATE"
                 and not d.get("dry_run") and d.get("endpoint") != "peer"] for s in servers]  # (peer: asked by a replica)
    assert all(answered)  # the API server called both replicas (the proxy deals its connections in turn)
    assert sum(1 for a in answered for d in a if d["result"] == "allowed") == QUOTA  # together, exact
    shards = core.list_namespaced_config_map(replicas["ledger_ns"], label_selector="allot.dev/ledger=reservations").items
    shards = [c for c in shards if not c.metadata.name.endswith("-want")]  # escrow's want objects hold no quota
    # one per quota root that has taken a hold or keeps a slice: ledger-e2e, and ledger-kill and ledger-pause
    # (64 GPUs each: sliced) once their replicas' keepers claim there
    assert 1 <= len(shards) <= 3
    # Pods a replica admitted inside its slice are charged as sums (webhook/ledger/admitted.py): "unseen" until
    # the writer's own watch shows them, then "seen" (a reader whose watch is past it counts the pods instead).
    wait_for("every slice pod moved to a seen sum", lambda: not any(
        "/unseen-" in k for k in _shard_holds(core, replicas["ledger_ns"], "ledger-e2e")), timeout=15)
    holds = _shard_holds(core, replicas["ledger_ns"], "ledger-e2e")
    names = {f"{ns}/{p.metadata.name}" for p in stored}
    pods = {k: v for k, v in holds.items() if not k.startswith(("escrow/", "admitted/", "peer/"))}  # (slices, sums, peers)
    assert set(pods) <= names  # every hold in the API is an admitted pod (a denied request left none)
    assert all(sum(h[1] for h in v[1]) == 1000 for v in pods.values())
    summed = sum(h[1] for k, v in holds.items() if k.startswith("admitted/") for h in v[1])
    assert 1000 * len(pods) + summed <= 1000 * QUOTA  # charged once each, by a hold or in a sum
    # What a replica whose watch shows the pods counts: the live pods and the slices, within the quota.
    assert sum(h[1] for k, v in holds.items() if k.startswith("escrow/") for h in v[1]) + 1000 * len(names) <= 1000 * QUOTA


def test_a_replica_paused_past_its_slices_lifetime_over_admits_nothing(kube, replicas):
    """SIGSTOP one of the three replicas longer than a slice lives, send a burst (its share waits on it), SIGCONT: at most the quota."""
    import signal

    from webhook.ledger.escrow import SLICE_TTL

    core = kit.core_api(kube.kubeconfig)
    ns = replicas["paused_ns"]
    live = [s for s in replicas["servers"] if s.proc.poll() is None]
    assert len(live) == REPLICAS  # (runs before the killed-replica test)
    first = kit.create_pods(core, ns, [f"p{i}" for i in range(QUOTA // 4)])  # every replica busy in this quota's shard
    paused = live[0]
    paused.proc.send_signal(signal.SIGSTOP)
    try:
        time.sleep(SLICE_TTL + 5)  # past its slice's lifetime: the others count it no longer
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            burst = pool.submit(kit.create_pods, core, ns, [f"q{i}" for i in range(2 * QUOTA)])
            time.sleep(3)  # requests dealt to the paused replica are waiting on it
            paused.proc.send_signal(signal.SIGCONT)
            more = burst.result()
    finally:
        paused.proc.send_signal(signal.SIGCONT)
    stored = len(core.list_namespaced_pod(ns).items)
    assert first + more == stored <= QUOTA, (first, more, stored)
    wait_for("the resumed replica to be ready again", lambda: paused.readyz()["ledger"]["synced"], timeout=30)


def test_a_replica_killed_mid_burst_over_admits_nothing_and_its_holds_expire(kube, replicas):
    from policy.blocks.quota import RESERVATION_TTL
    from webhook.ledger.cluster import PRUNE_INTERVAL

    core = kit.core_api(kube.kubeconfig)
    ns = replicas["killed_ns"]
    servers = replicas["servers"]

    def admitting():
        return next((s for s in servers if any(d.get("namespace") == ns and d.get("result") == "allowed"
                                               and not d.get("dry_run") for d in s.decisions())), None)

    diag = _Diag(kube, replicas["ledger_ns"], ns)  # on failure: every shard version and pod event, in a file
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        burst = pool.submit(kit.create_pods, core, ns, [f"k{i}" for i in range(CREATES)])
        first = wait_for("a replica to admit", admitting, timeout=30, every=0.02)
        killed_id = first.readyz()["ledger"]["replica"]
        first.proc.kill()  # mid-burst: some of its requests are between a commit and their answer
        created = burst.result()
    survivors = [s for s in servers if s is not first]
    assert len(core.list_namespaced_pod(ns).items) == created <= QUOTA
    replicas["proxy"].ports = [s.port for s in survivors]
    holders = {v[2] for v in _shard_holds(core, replicas["ledger_ns"], "ledger-kill").values()}
    assert killed_id in holders  # the dead replica did leave holds behind (else the expiry below proves nothing)
    time.sleep(RESERVATION_TTL + 2 * PRUNE_INTERVAL + 1)  # past every hold's expiry, and an idle prune after it
    holds = _shard_holds(core, replicas["ledger_ns"], "ledger-kill")
    # No hold of the burst is left in the API, the dead replica's included (nor its slice); the survivors
    # keep slices ahead of demand (with escrow): those are not holds of the burst.
    assert not {k: v for k, v in holds.items() if not k.startswith(("escrow/", "peer/")) or v[2] == killed_id}
    diag.views = _views(survivors, ns)  # what each survivor counts in use before the second wave
    more = kit.create_pods(core, ns, [f"m{i}" for i in range(2 * QUOTA)])
    stored = len(core.list_namespaced_pod(ns).items)
    allowed = {s.port: sorted(d["name"] for d in s.decisions() if d.get("namespace") == ns and d.get("result") == "allowed"
                              and not d.get("dry_run") and str(d.get("name", "")).startswith("m")) for s in survivors}
    # the whole quota, no more, no less (on failure: who admitted which of the second wave, and the dump)
    assert created + more == QUOTA == stored, (created, more, stored, allowed, diag.dump(servers, first, created, more))
    now = time.time()
    assert all(v[0] > now for v in _shard_holds(core, replicas["ledger_ns"], "ledger-kill").values())


class _Diag:
    """Every ledger shard version and pod event of a namespace with its time, for a JSON dump when a count is off."""

    def __init__(self, kube, ledger_ns, ns):
        from kubernetes import client, config, watch

        self.events = []
        cfg = client.Configuration()
        config.load_kube_config(config_file=str(kube.kubeconfig), client_configuration=cfg)
        api = client.CoreV1Api(client.ApiClient(cfg))

        def cms():
            w = watch.Watch()
            for ev in w.stream(api.list_namespaced_config_map, ledger_ns, timeout_seconds=600):
                o = ev["object"]
                self.events.append({"t": time.time(), "kind": "cm", "type": ev["type"], "name": o.metadata.name,
                                    "rv": o.metadata.resource_version, "data": (o.data or {}).get("holds")})

        def pods():
            w = watch.Watch()
            for ev in w.stream(api.list_namespaced_pod, ns, timeout_seconds=600):
                o = ev["object"]
                self.events.append({"t": time.time(), "kind": "pod", "type": ev["type"], "name": o.metadata.name,
                                    "rv": o.metadata.resource_version})

        def quietly(f):
            try:
                f()
            except Exception:  # noqa: BLE001 - a recorder only: the kit's API server stopping at session end ends its stream
                pass

        for f in (cms, pods):  # daemons: they end with the session
            threading.Thread(target=quietly, args=(f,), daemon=True).start()

    def dump(self, servers, first, created, more) -> str:
        """Write what was recorded, the survivors' views and every decision log; the file's path."""
        import tempfile

        out = {"views": getattr(self, "views", None), "created": created, "more": more, "killed": first.port,
               "events": self.events, "decisions": {s.port: s.decisions() for s in servers}}
        with tempfile.NamedTemporaryFile("w", prefix="allot-e2e-killed-", suffix=".json", delete=False) as f:
            json.dump(out, f, default=str)
        return f.name


def _views(servers, ns) -> dict:
    """Each replica's answer to a dry-run pod of the whole quota: its denial names the GPUs it counts in use."""
    return {s.port: _ask(s, ns, QUOTA) for s in servers}


def test_concurrent_gangs_through_every_replica_take_the_one_rack_that_holds_them_once(kube, replicas):
    """12 gangs of 3 x 8 GPUs, rack-required, their first members created at once: only the fixture's rack of three
    8-GPU nodes holds one (the suite's other racks have 16 and 8), so exactly one gang is admitted whichever
    replicas answer; its next member joins it."""
    from kubernetes.client.rest import ApiException

    core = kit.core_api(kube.kubeconfig)
    ns = replicas["gang_ns"]

    def member(gang: int, i: int) -> bool:
        p = gpu_pod(f"g{gang}-{i}", ns, gpus=8, labels={"kueue.x-k8s.io/pod-group-name": f"g{gang}"},
                    annotations={"kueue.x-k8s.io/pod-group-total-count": "3"})
        try:
            core.create_namespaced_pod(ns, p, _preload_content=False)
            return True
        except ApiException as exc:
            assert exc.status == 403 and "gang ledger-racks" in (exc.body or ""), exc.body
            reasons.append(json.loads(exc.body).get("message", "")[:300])
            return False

    for name in replicas["rack_nodes"]:  # (the kill test's wait outlived their last status: the node controller tainted them)
        revive(kube, name)
    probe = gpu_pod("probe", ns, gpus=8, labels={"kueue.x-k8s.io/pod-group-name": "probe"},
                    annotations={"kueue.x-k8s.io/pod-group-total-count": "3"})
    wait_for("the replicas to see the rack ready", lambda: all(
        kube.create(probe, "--dry-run=server", check=False).returncode == 0 for _ in replicas["servers"]), timeout=30)
    reasons: list[str] = []
    gangs = 12
    with concurrent.futures.ThreadPoolExecutor(gangs) as pool:
        first = list(pool.map(lambda g: member(g, 0), range(gangs)))
    def answered():
        return [{d["name"] for d in s.decisions() if d.get("namespace") == ns and not d.get("dry_run")}
                for s in replicas["servers"] if s.proc.poll() is None]

    wait_for("every first member in a decision log", lambda: sum(map(len, answered())) >= gangs, timeout=10)
    assert sum(1 for a in answered() if a) >= 2, answered()  # the replicas raced for the rack (else this proves nothing)
    assert sum(first) == 1, (first, answered(), reasons[:2])  # one rack, one gang: not one per replica
    winner = first.index(True)
    assert member(winner, 1)  # its second member fits the rack held for it, whichever replica answers
    assert not member((winner + 1) % gangs, 1)  # a losing gang's next member is still denied: the rack is held
    holds = _shard_holds(core, replicas["ledger_ns"], "gangs")
    assert [k for k in holds if k.startswith("gang:") and k.endswith(f"/g{winner}")], holds  # its domain is in the cluster ledger


def _deployment(name: str, ns: str, replicas: int, *, paused: bool) -> dict:
    pod = gpu_pod(name, ns, gpus=1)
    labels = {"app": name}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": ns},
            "spec": {"replicas": replicas, "paused": paused, "selector": {"matchLabels": labels},
                     "template": {"metadata": {"labels": labels}, "spec": pod["spec"]}}}


def _dry_runs(core, ns: str, gpus: int, n: int) -> list[bool]:
    """`n` concurrent dry-run creates of a `gpus`-GPU pod (many connections: every replica answers some); which were admitted."""
    from kubernetes.client.rest import ApiException

    def create(i: int) -> bool:
        try:
            core.create_namespaced_pod(ns, gpu_pod(f"dry{i}", ns, gpus=gpus), dry_run="All", _preload_content=False)
            return True
        except ApiException as exc:
            assert exc.status == 403 and "quota" in (exc.body or "").lower(), exc.body
            return False

    with concurrent.futures.ThreadPoolExecutor(n) as pool:
        return list(pool.map(create, range(n)))


def _ask(server, ns: str, gpus: int) -> dict:
    """A dry-run AdmissionReview of a `gpus`-GPU pod in `ns` sent to `server`'s own /validate: its response."""
    import ssl
    import urllib.request
    import uuid

    body = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": str(uuid.uuid4()), "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": "pods"}, "name": "ask", "namespace": ns,
        "operation": "CREATE", "userInfo": {"username": "e2e", "groups": ["system:authenticated"]},
        "object": gpu_pod("ask", ns, gpus=gpus), "oldObject": None, "dryRun": True}}
    req = urllib.request.Request(f"{server.url}/validate?timeout=10s", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, context=ssl.create_default_context(cafile=str(server.ca)), timeout=10) as r:
        return json.loads(r.read())["response"]


def _each_admits(servers, ns: str, gpus: int) -> list[bool]:
    """Whether each replica, asked directly, would admit a `gpus`-GPU pod in `ns`."""
    return [_ask(s, ns, gpus)["allowed"] for s in servers]


def _answering(servers, ns: str, since: list[int]) -> int:
    """How many replicas answered a dry-run pod create in `ns` after their first `since` decision lines."""
    return sum(1 for s, n in zip(servers, since) if any(d.get("namespace") == ns and d.get("dry_run") and d.get("kind") == "Pod"
                                                        for d in s.decisions()[n:]))


def test_a_deployments_hold_counts_on_every_replica_and_its_delete_releases_it_on_all(kube, replicas):
    core = kit.core_api(kube.kubeconfig)
    ns = replicas["wl_ns"]
    servers = [s for s in replicas["servers"] if s.proc.poll() is None]  # (the kill test may have stopped one)
    assert kube.create(_deployment("held", ns, WL_QUOTA, paused=True)).returncode == 0  # paused: no pods, the hold alone
    uid = kube.get("deployment", "held", ns)["metadata"]["uid"]
    entry = _shard_holds(core, replicas["ledger_ns"], "ledger-wl")[f"wl:{ns}/Deployment/held"]
    assert sum(h[1] for h in entry[1]) == 1000 * WL_QUOTA and entry[4]["uid"] == uid  # in the API before "allowed"
    since = [len(s.decisions()) for s in servers]
    assert not any(_dry_runs(core, ns, 1, 24))  # the whole quota is held, whichever replica the API server asks
    wait_for("replicas that did not admit the Deployment to deny too", lambda: _answering(servers, ns, since) >= 2, timeout=5)
    assert _each_admits(servers, ns, 1) == [False] * len(servers)  # each replica, asked itself
    kube.run("delete", "deployment", "held", "-n", ns, "--wait=false")
    wait_for("every replica to count the release", lambda: all(_each_admits(servers, ns, WL_QUOTA)), timeout=20, every=0.5)
    wait_for("the hold to leave the shard",
             lambda: f"wl:{ns}/Deployment/held" not in _shard_holds(core, replicas["ledger_ns"], "ledger-wl"), timeout=20)


def test_a_deployments_pods_take_from_its_hold_whichever_replica_answers(kube, replicas):
    from kubernetes.client.rest import ApiException

    core = kit.core_api(kube.kubeconfig)
    ns = replicas["wl_ns"]
    servers = [s for s in replicas["servers"] if s.proc.poll() is None]  # (the kill test may have stopped one)
    wait_for("an empty quota", lambda: all(_each_admits(servers, ns, WL_QUOTA)), timeout=30, every=0.5)
    assert kube.create(_deployment("taken", ns, WL_QUOTA, paused=True)).returncode == 0  # holds the whole quota

    def admitter():
        return next((s for s in servers if any(d.get("namespace") == ns and d.get("kind") == "Deployment"
                                               and d.get("name") == "taken" and d.get("result") == "allowed"
                                               and not d.get("dry_run") for d in s.decisions())), None)

    holder = wait_for("the Deployment's decision in a log", admitter, timeout=10, every=0.25)
    proxy = replicas["proxy"]
    ports = proxy.ports
    proxy.reroute([s.port for s in servers if s is not holder])  # its pods are answered by the other replicas only
    since = [len(s.decisions()) for s in servers]

    def member(i: int) -> bool:  # its pods as its ReplicaSet makes them, created at once (many connections)
        p = gpu_pod(f"taken-abc12-{i}", ns, gpus=1, labels={"app": "taken", "pod-template-hash": "abc12"})
        p["metadata"]["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "taken-abc12",
                                             "uid": "00000000-0000-0000-0000-000000000001", "controller": True}]
        try:
            core.create_namespaced_pod(ns, p, _preload_content=False)
            return True
        except ApiException as exc:
            assert exc.status == 403, exc.body
            return False

    try:
        with concurrent.futures.ThreadPoolExecutor(WL_QUOTA) as pool:
            assert all(pool.map(member, range(WL_QUOTA)))  # each takes its share from the hold: all fit
    finally:
        proxy.reroute(ports)

    def answered():
        return [{d["name"] for d in s.decisions()[n:] if d.get("namespace") == ns and d.get("kind") == "Pod"
                 and d.get("result") == "allowed" and not d.get("dry_run") and d.get("endpoint") != "peer"}
                for s, n in zip(servers, since)]

    wait_for("the decision logs to show the pods", lambda: sum(map(len, answered())) == WL_QUOTA, timeout=10)
    answered = answered()
    assert not answered[servers.index(holder)] and any(answered), answered  # none by the replica that admitted the Deployment
    holds = _shard_holds(core, replicas["ledger_ns"], "ledger-wl")
    assert sum(h[1] for h in holds.get(f"wl:{ns}/Deployment/taken", [0, []])[1]) == 0  # all moved to the pods' holds
    pods = {k: sum(h[1] for h in v[1]) for k, v in holds.items() if k.startswith(f"{ns}/taken-")}
    assert pods == {f"{ns}/taken-abc12-{i}": 1000 for i in range(WL_QUOTA)}  # each pod holds its own share
    # (the garbage collector deletes the pods: their ReplicaSet does not exist) once gone, the whole
    # quota is free on every replica: a replica still holding a share its pod took would deny
    kube.run("delete", "pods", "--all", "-n", ns, "--grace-period=0", "--force", check=False)
    # (other replicas' holds of pods already gone count until SETTLE after their writer saw the pods)
    wait_for("every replica to count the quota free", lambda: all(_each_admits(servers, ns, WL_QUOTA)), timeout=45, every=0.5)
    kube.run("delete", "deployment", "taken", "-n", ns, "--wait=false")
