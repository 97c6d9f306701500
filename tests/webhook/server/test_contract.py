"""The admission.k8s.io/v1 contract over real HTTPS with the real engine, a real policy set and a file snapshot."""

import asyncio
import base64
import io

import aiohttp
import orjson
import pytest

from webhook.server import tls
from webhook.server.reload import PolicyReloader, PolicySource
from webhook.server.serving import ServeOptions, StartError, prepare, start

from tests.webhook.wh_harness import pod, review
from tests.webhook.wh_policy import BROKEN, QUOTA_4, write


def options(tmp_path, **kw) -> ServeOptions:
    pdir, cluster = write(tmp_path)
    base = dict(policy=str(pdir), cluster=str(cluster), host="127.0.0.1", port=0, self_signed=True,
                certs_dir=str(tmp_path / "certs"), decision_log=io.BytesIO(), buffered_log=False,
                reload_interval=3600, tls_interval=3600)
    base.update(kw)
    return ServeOptions(**base)


async def call(session, url, body) -> dict:
    async with session.post(url, data=orjson.dumps(body)) as resp:
        assert resp.status == 200
        return (await resp.json())["response"]


def serve(opts, scenario):
    """Start the real server, run `scenario(running, session)`, stop."""
    async def main():
        running = await start(opts)
        try:
            async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=tls.client_context(running.ca_path))) as s:
                return await scenario(running, s)
        finally:
            await running.stop()

    return asyncio.run(main())


def owned(**kw):
    labels = {"acme.io/owner": "alice", "team": "team-a", **kw.pop("labels", {})}
    return pod(labels=labels, **kw)


def test_each_contract_field(tmp_path):
    async def scenario(running, s):
        base = running.url
        allowed_body = review(owned(name="small", gpus=1, priority_class="batch"))
        allowed = await call(s, base + "/validate", allowed_body)
        mutated = await call(s, base + "/mutate", review(pod(name="nb", gpus=1)))
        denied = await call(s, base + "/validate", review(owned(name="huge", gpus=7, priority_class="batch")))
        return allowed_body, allowed, mutated, denied

    allowed_body, allowed, mutated, denied = serve(options(tmp_path), scenario)
    assert allowed["uid"] == allowed_body["request"]["uid"] and allowed["allowed"] is True
    assert "patch" not in allowed and "patchType" not in allowed and "warnings" not in allowed
    # /mutate: defaulted priority and the team label, as a base64 RFC 6902 patch
    assert mutated["allowed"] is True and mutated["patchType"] == "JSONPatch"
    ops = {op["path"]: op.get("value") for op in orjson.loads(base64.b64decode(mutated["patch"]))}
    assert ops["/spec/priorityClassName"] == "batch" and ops["/metadata/labels/team"] == "team-a"
    # warn-mode rule -> a warning cut to 120 characters
    assert mutated["warnings"] and all(len(w) <= 120 for w in mutated["warnings"])
    assert any("acme.io/owner" in w for w in mutated["warnings"])
    # denial: status code and the quota arithmetic; audit-mode rule -> auditAnnotations
    assert denied["allowed"] is False and denied["status"]["code"] == 403
    assert "3 in use + 7 requested > 8" in denied["status"]["message"]  # 2 running + 1 reserved by "small"
    assert any("big pod" in v for v in denied["auditAnnotations"].values())


def test_dry_run_is_decided_the_same_but_never_reserves(tmp_path):
    async def scenario(running, s):
        url = running.url + "/validate"
        results = []
        for name, dry in (("a", True), ("b", True), ("c", False), ("d", False), ("e", True)):
            results.append((await call(s, url, review(owned(name=name, gpus=6, priority_class="batch"), dryRun=dry)))["allowed"])
        return results

    # 2 in use + 6 fits 8: dry runs leave it so; the first real one reserves, after which nothing fits.
    assert serve(options(tmp_path), scenario) == [True, True, True, False, False]


def test_file_snapshot_is_ready_and_charged(tmp_path):
    async def scenario(running, s):
        async with s.get(running.url + "/readyz") as r:
            ready = (r.status, await r.json())
        denied = await call(s, running.url + "/validate", review(owned(name="x", gpus=7, priority_class="batch")))
        return ready, denied

    (status, detail), denied = serve(options(tmp_path), scenario)
    assert status == 200 and detail["cluster"]["synced"] and detail["cluster"]["source"].startswith("file ")
    assert detail["policy"]["generation"] == 1 and detail["policy"]["digest"].startswith("sha256:")
    assert "2 in use" in denied["status"]["message"]  # the running pod in the file holds 2 GPUs


def test_reload_keeps_the_running_set_when_the_new_one_is_broken(tmp_path):
    opts = options(tmp_path)
    policy_file = tmp_path / "policies" / "test.policy"

    async def scenario(running, s):
        state = running.state
        reloader = PolicyReloader(state, PolicySource(opts.policy), interval=3600)
        reloader._seen = None  # force a look at the files
        body = lambda n: review(owned(name=n, gpus=3, priority_class="batch"), dryRun=True)  # noqa: E731
        before = (await call(s, running.url + "/validate", body("a")))["allowed"]
        policy_file.write_text(BROKEN)
        rejected = await reloader.check()
        async with s.get(running.url + "/readyz") as r:
            ready_broken = (r.status, await r.json())
        still = (await call(s, running.url + "/validate", body("b")))["allowed"]
        policy_file.write_text(QUOTA_4)
        swapped = await reloader.check()
        after = (await call(s, running.url + "/validate", body("c")))["allowed"]
        return before, rejected, ready_broken, still, swapped, after, state

    before, rejected, (status, detail), still, swapped, after, state = serve(opts, scenario)
    assert (before, rejected, still) == (True, False, True)
    assert status == 200 and detail["policy"]["generation"] == 1 and detail["policy"]["rejected"] == 1
    assert "gpus eight" not in detail["policy"]["last_error"] and "test.policy:" in detail["policy"]["last_error"]
    assert (swapped, after) == (True, False)  # quota 4 now: 2 in use + 3 > 4
    assert state.policy.generation == 2
    assert state.metrics.value("allot_policy_reloads_total", {"result": "error"}) == 1
    assert state.metrics.value("allot_policy_reloads_total", {"result": "ok"}) == 2


def test_start_refuses_a_broken_set_and_bad_options(tmp_path):
    opts = options(tmp_path)
    (tmp_path / "policies" / "test.policy").write_text(BROKEN)
    with pytest.raises(StartError, match="rejected"):
        prepare(opts)
    with pytest.raises(StartError, match="exactly one of --policy"):
        prepare(options(tmp_path, bundle="x.bundle"))
    with pytest.raises(StartError, match="--trust"):
        prepare(options(tmp_path, policy=None, bundle="x.bundle"))
    with pytest.raises(StartError, match="--self-signed"):
        prepare(options(tmp_path, self_signed=False))


@pytest.mark.parametrize("mode,want_allowed", [(None, False), ("warn", True), ("audit", True)])
def test_mode_override_turns_denials_into_warnings_or_audit(tmp_path, mode, want_allowed):
    async def scenario(running, s):
        return await call(s, running.url + "/validate", review(owned(name="huge", gpus=7, priority_class="batch")))

    got = serve(options(tmp_path, mode=mode), scenario)
    assert got["allowed"] is want_allowed
    if mode == "warn":
        assert any("7 requested > 8" in w for w in got["warnings"])
    if mode == "audit":
        assert any("7 requested > 8" in v for v in got["auditAnnotations"].values()) and "warnings" not in got


def test_signed_bundle_loads_and_a_tampered_one_is_refused_on_reload(tmp_path):
    from webhook import bundle

    pdir, cluster = write(tmp_path)
    key, pub = bundle.keygen(tmp_path / "ops")
    path = tmp_path / "policy.bundle.json"
    path.write_bytes(bundle.encode_bundle([("test.policy", (pdir / "test.policy").read_text())]))
    bundle.sign(path, key)
    opts = options(tmp_path, policy=None, bundle=str(path), trust=(str(pub),))

    async def scenario(running, s):
        reloader = PolicyReloader(running.state, PolicySource(str(path), bundle=True, trust=(str(pub),)))
        reloader._seen = None
        data = path.read_bytes()
        path.write_bytes(data.replace(b"gpus 8", b"gpus 9"))  # same length, digest no longer matches
        rejected = await reloader.check()
        got = await call(s, running.url + "/validate", review(owned(name="x", gpus=7, priority_class="batch"), dryRun=True))
        return rejected, got, running.state.policy

    rejected, got, status = serve(opts, scenario)
    assert rejected is False and status.generation == 1 and "refused" in status.last_error
    assert status.source.startswith("bundle ") and got["allowed"] is False  # still the signed quota of 8


def test_a_directory_and_its_bundle_serve_one_digest_and_one_set_of_locations(tmp_path):
    # What `allot compile` writes for a directory is what a server of that directory reports:
    # operators compare /readyz's digest with the bundle's, and messages name the same lines.
    from webhook import bundle
    from webhook.sources import read_policy_sources, relative_sources

    pdir, _ = write(tmp_path)
    key, pub = bundle.keygen(tmp_path / "ops")
    path = tmp_path / "policy.bundle.json"
    path.write_bytes(bundle.encode_bundle(relative_sources(str(pdir), read_policy_sources([str(pdir)]))))
    bundle.sign(path, key)
    body = review(owned(name="x", gpus=7, priority_class="batch"), dryRun=True)

    async def scenario(running, s):
        return running.state.policy.digest, (await call(s, running.url + "/validate", body))["status"]["message"]

    from_dir = serve(options(tmp_path), scenario)
    from_bundle = serve(options(tmp_path, policy=None, bundle=str(path), trust=(str(pub),)), scenario)
    assert from_dir == from_bundle
    assert from_dir[0] == bundle.compute_digest(relative_sources(str(pdir), read_policy_sources([str(pdir)])))
    assert "(test.policy:" in from_dir[1]  # relative to the policy directory, wherever it is mounted
