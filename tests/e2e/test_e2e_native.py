"""Native policies in a real API server: accepted at create time (cost, types), and the webhook's verdicts and words.

Differential (issue 30 item 4): every library Pod case that the native policies can judge is
sent twice with `--dry-run=server`, once with only the native ValidatingAdmissionPolicies
installed and once with only Allot's validating webhook, and the allow/deny and the message
(after the API server's own prefix) must be equal.
"""

from __future__ import annotations

import copy
import json
import pathlib
import secrets
import sys
import time

import kit
import pytest
from kit import wait_for

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "deploy"))
import deploy_native as dn

pytestmark = pytest.mark.e2e
LIBRARY = kit.REPO / "policies"
ADMIN = "allot-e2e-native-admin"  # impersonated case users need RBAC to create pods at all


def _words(stderr: str) -> str | None:
    """The deny message without the API server's prefix (webhook or policy), None when admitted."""
    for mark in ("denied the request: ", "denied request: "):
        if mark in stderr:
            return stderr.split(mark, 1)[1].strip()
    return None


def _send(kube, request: dict) -> tuple[bool, str | None, str]:
    obj = copy.deepcopy(request["object"])
    obj["metadata"].pop("namespace", None)
    user = request["userInfo"]
    who = ["--as", user["username"], *[a for g in user.get("groups", []) if g != "system:authenticated" for a in ("--as-group", g)]]
    r = kube.run("create", "-n", request["namespace"], "-f", "-", "--dry-run=server", "-o", "json", *who,
                 stdin=json.dumps(obj), check=False)
    return r.returncode == 0, _words(r.stderr), r.stderr


@pytest.fixture(scope="module", autouse=True)
def without_the_suites_webhook(kube):
    """Only this module's admission objects while it runs: the session's `allot` fixture (conftest) may have installed
    Allot's webhook configurations under the same names; they are set aside and put back afterwards."""
    kinds = {"allot-validating": "validatingwebhookconfiguration", "allot-mutating": "mutatingwebhookconfiguration"}
    saved = []
    for name, kind in kinds.items():
        r = kube.run("get", kind, name, "-o", "json", check=False)
        if r.returncode == 0:
            obj = json.loads(r.stdout)
            for key in ("resourceVersion", "uid", "creationTimestamp", "generation", "managedFields"):
                obj["metadata"].pop(key, None)
            saved.append(obj)
            kube.run("delete", kind, name)
    if saved:
        time.sleep(2)  # the API server drops a deleted configuration within a second or so
    yield
    for obj in saved:
        kube.create(obj, check=False)
    if saved:
        time.sleep(2)


@pytest.fixture(scope="module")
def library(kube, tmp_path_factory):
    """The library compiled, its classes and namespaces created, case users allowed to create pods."""
    out = tmp_path_factory.mktemp("native") / "compiled"
    kit.run_allot("compile", "--policy", str(LIBRARY), "-o", str(out))
    # Only the classes this test creates are removed again: other e2e tests declare their own `batch` and `prod`.
    r = kube.run("create", "-f", str(out / "priorityclasses.yaml"), "-o", "name", check=False)
    created = [line.strip() for line in r.stdout.splitlines() if line.strip()]
    kube.run("create", "clusterrolebinding", ADMIN, "--clusterrole=cluster-admin", "--group=system:authenticated", check=False)
    from lang import compile_policies
    from policy.cluster.snapshot import ClusterSnapshot
    from policy.engine import Engine
    from policy.testing.cases import build_review
    from webhook.sources import read_policy_sources, relative_sources

    # What the webhook serves: the whole library, not one test file's directory.
    policy_set, _ = compile_policies(relative_sources(str(LIBRARY), read_policy_sources([str(LIBRARY)])))
    plan, _ = dn.plans(policy_set)
    native = {v.rule.id for v in plan.validations}
    agent_denies = dn.agent_deny_locations(plan)
    cases = []
    for path, case, _set, objects in dn.library_cases():
        request = build_review(case)["request"]
        decision = Engine(policy_set).decide(copy.deepcopy(request), ClusterSnapshot.from_objects(copy.deepcopy(objects)),
                                            0.0, mutate=False, reserve=False)
        # Only cases no stateful block has a say in: the live cluster's state is not the case's fixture.
        # Quotas and priorities may look on: live usage is nil, below any fixture's, so they admit what they admitted.
        # An agents block counts when it denies with one of its native denies.
        lookers = {b for b in decision.blocks if b.startswith(("quota ", "priority "))}
        judged = native | {r.block for r in decision.reasons if r.location in agent_denies.get(r.block, ())}
        if not set(decision.blocks) & judged or not set(decision.blocks) <= judged | lookers or any(
                r.block not in judged for r in decision.reasons):
            continue
        cases.append((f"{path}::{case.name}", request))
    for ns in sorted({r["namespace"] for _, r in cases}):
        kube.run("create", "namespace", ns, check=False)
    for ns in sorted({r["namespace"] for _, r in cases}):
        wait_for(f"serviceaccount default in {ns}",
                 lambda ns=ns: kube.run("get", "serviceaccount", "default", "-n", ns, check=False).returncode == 0)
    yield out, cases
    kube.run("delete", "clusterrolebinding", ADMIN, "--ignore-not-found", check=False)
    for name in created:
        kube.run("delete", name, "--ignore-not-found", check=False)


def test_every_native_policy_of_the_library_is_accepted_by_the_api_server(kube, library):
    out, _ = library
    r = kube.run("create", "-f", str(out / "validating-policies.yaml"), "--dry-run=server", check=False)
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("validatingadmissionpolicy.") >= 2


def test_native_and_webhook_give_the_same_verdict_and_words(kube, library, tmp_path):
    out, cases = library
    assert len(cases) >= 3, cases
    native_file = out / "validating-policies.yaml"
    kube.run("create", "-f", str(native_file))
    try:
        def active():
            r = kube.run("get", "validatingadmissionpolicy", "-o", "json")
            return all(i.get("status", {}).get("observedGeneration") for i in json.loads(r.stdout)["items"])

        wait_for("native policies to be type-checked", active, timeout=30)
        time.sleep(2)  # policies take effect on the API server's informer resync, a second or so
        native = {name: _send(kube, req) for name, req in cases}
    finally:
        kube.run("delete", "-f", str(native_file), "--ignore-not-found", check=False)
    server = kit.Allot(LIBRARY, kube.kubeconfig, tmp_path)
    try:
        server.wait_ready()
        hooks = tmp_path / "hooks"
        kit.run_allot("compile", "--policy", str(LIBRARY), "-o", str(hooks), "--url", server.url, "--ca-bundle", str(server.ca),
                      "--kube-version", "1.29")  # before VAP: the webhook judges every rule
        kube.run("create", "-f", str(hooks / "validating-webhook.yaml"))
        try:
            time.sleep(2)
            webhook = {name: _send(kube, req) for name, req in cases}
        finally:
            kube.run("delete", "validatingwebhookconfiguration", "allot-validating", "--ignore-not-found", check=False)
    finally:
        server.stop()
    denied = [n for n, (ok, _, _) in native.items() if not ok]
    assert denied, "no case was denied natively"
    for name in native:
        assert native[name][:2] == webhook[name][:2], f"{name}: native {native[name][2]!r} != webhook {webhook[name][2]!r}"


SET_RULE = """rule tag-owner {
  for kind == "Pod" and namespace == "NS"
  set annotations["acme.io/owner"] = "platform"
  set labels["acme.io/ns"] = namespace
}
"""


def _made(kube, ns: str, name: str) -> dict:
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"keep": "me"}},
           "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}}
    r = kube.run("create", "-n", ns, "-f", "-", "--dry-run=server", "-o", "json", stdin=json.dumps(pod))
    meta = json.loads(r.stdout)["metadata"]
    return {"labels": meta.get("labels", {}), "annotations": meta.get("annotations", {})}


def test_a_mutating_admission_policy_makes_the_webhooks_patch(kube, tmp_path):
    ns = f"native-set-{secrets.token_hex(3)}"
    kube.run("create", "namespace", ns, check=False)
    wait_for(f"serviceaccount default in {ns}",
             lambda: kube.run("get", "serviceaccount", "default", "-n", ns, check=False).returncode == 0)
    pdir = tmp_path / "policy"
    pdir.mkdir()
    (pdir / "set.policy").write_text(SET_RULE.replace("NS", ns))
    out = tmp_path / "native"
    kit.run_allot("compile", "--policy", str(pdir), "-o", str(out))
    assert not (out / "mutating-webhook.yaml").read_text().count("pods.mutate.allot.io")
    kube.run("create", "-f", str(out / "mutating-policies.yaml"))
    try:
        time.sleep(3)  # policies take effect on the API server's informer resync
        native = _made(kube, ns, "by-policy")
    finally:
        kube.run("delete", "-f", str(out / "mutating-policies.yaml"), "--ignore-not-found", check=False)
    (tmp_path / "serve").mkdir()
    server = kit.Allot(pdir, kube.kubeconfig, tmp_path / "serve")
    try:
        server.wait_ready()
        hooks = tmp_path / "hooks"
        kit.run_allot("compile", "--policy", str(pdir), "-o", str(hooks), "--url", server.url, "--ca-bundle", str(server.ca),
                      "--kube-version", "1.35")  # before MAP: the webhook patches
        kube.run("create", "-f", str(hooks / "mutating-webhook.yaml"))
        try:
            time.sleep(2)
            webhook = _made(kube, ns, "by-webhook")
        finally:
            kube.run("delete", "mutatingwebhookconfiguration", "allot-mutating", "--ignore-not-found", check=False)
    finally:
        server.stop()
    assert native["labels"]["acme.io/ns"] == ns and native["annotations"]["acme.io/owner"] == "platform"
    assert native == webhook
