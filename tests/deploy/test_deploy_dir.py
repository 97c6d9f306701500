"""deploy/: what `kubectl apply -k deploy/` applies is complete, schema-valid, least-privilege, hardened, and not drifted."""

import pathlib

import kubernetes_validate
import pytest
import yaml

from webhook.cli import main

ROOT = pathlib.Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
K8S_VERSIONS = ("1.33.0", kubernetes_validate.latest_version())


def kustomize(directory: pathlib.Path) -> tuple[list[dict], set[pathlib.Path]]:
    """The objects a kustomization (no transformers) yields, and every file it references."""
    kust = yaml.safe_load((directory / "kustomization.yaml").read_text())
    assert set(kust) <= {"apiVersion", "kind", "resources", "configMapGenerator", "generatorOptions"}, "no transformers"
    docs: list[dict] = []
    used = {directory / "kustomization.yaml"}
    for res in kust.get("resources", []):
        path = directory / res
        if path.is_dir():
            sub_docs, sub_used = kustomize(path)
            docs += sub_docs
            used |= sub_used
        else:
            docs += [d for d in yaml.safe_load_all(path.read_text()) if d]
            used.add(path)
    labels = (kust.get("generatorOptions") or {}).get("labels", {})
    for gen in kust.get("configMapGenerator", []):
        data = {}
        for f in gen["files"]:
            data[pathlib.Path(f).name] = (directory / f).read_text()
            used.add(directory / f)
        meta = {"name": gen["name"], "namespace": gen["namespace"], "labels": dict(labels)}
        docs.append({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data})
    return docs, used


DOCS, USED = kustomize(DEPLOY)


def find(kind: str, name: str | None = None) -> dict:
    (doc,) = [d for d in DOCS if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]
    return doc


def test_kustomization_lists_every_manifest_file():
    manifests = {p for p in DEPLOY.rglob("*") if p.suffix in (".yaml", ".yml", ".json")}
    assert manifests - USED == set()


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_every_applied_object_validates_against_the_openapi_schema(version):
    assert len(DOCS) >= 12
    for doc in DOCS:
        kubernetes_validate.validate(doc, version, strict=True)


def test_everything_namespaced_lives_in_allot_system():
    cluster_scoped = {"Namespace", "ClusterRole", "ClusterRoleBinding", "PriorityClass",
                      "ValidatingWebhookConfiguration", "MutatingWebhookConfiguration",
                      "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}
    assert {d["metadata"].get("namespace") for d in DOCS if d["kind"] not in cluster_scoped} == {"allot-system"}


# ---- the pod -------------------------------------------------------------------------------

DEPLOYMENT = find("Deployment", "allot")
POD = DEPLOYMENT["spec"]["template"]["spec"]
(CONTAINER,) = POD["containers"]


def test_deployment_is_highly_available():
    assert DEPLOYMENT["spec"]["replicas"] >= 2
    assert DEPLOYMENT["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    (term,) = POD["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert term["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    pdb = find("PodDisruptionBudget")
    assert pdb["spec"]["minAvailable"] == 1
    labels = DEPLOYMENT["spec"]["template"]["metadata"]["labels"]
    for selector in (pdb["spec"]["selector"]["matchLabels"], find("Service")["spec"]["selector"],
                     term["podAffinityTerm"]["labelSelector"]["matchLabels"]):
        assert selector.items() <= labels.items()


def test_restricted_security_context():
    pod_sc, sc = POD["securityContext"], CONTAINER["securityContext"]
    assert pod_sc["runAsNonRoot"] is True and pod_sc["runAsUser"] != 0
    assert pod_sc["seccompProfile"] == {"type": "RuntimeDefault"}
    assert sc["runAsNonRoot"] is True
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert sc["seccompProfile"] == {"type": "RuntimeDefault"}
    assert "hostNetwork" not in POD and "hostPID" not in POD
    assert find("Namespace")["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"


def test_resources_have_requests_and_limits():
    res = CONTAINER["resources"]
    assert set(res["requests"]) == set(res["limits"]) == {"cpu", "memory"}


def test_probes_are_https_on_healthz_and_readyz():
    assert CONTAINER["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "https", "scheme": "HTTPS"}
    assert CONTAINER["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "https", "scheme": "HTTPS"}
    assert CONTAINER["ports"] == [{"name": "https", "containerPort": 8443, "protocol": "TCP"}]
    svc_port = find("Service")["spec"]["ports"][0]
    assert (svc_port["port"], svc_port["targetPort"]) == (443, "https")


def mounted_path(volume_name: str) -> str:
    (mount,) = [m for m in CONTAINER["volumeMounts"] if m["name"] == volume_name]
    assert mount.get("readOnly", False) or volume_name == "tmp"
    return mount["mountPath"]


def test_serve_args_point_into_the_mounted_bundle_trust_and_tls():
    args = CONTAINER["args"]
    assert args[0] == "serve"
    flags = dict(zip(args[1::2], args[2::2]))
    volumes = {v["name"]: v for v in POD["volumes"]}
    bundle_cm = find("ConfigMap", volumes["bundle"]["configMap"]["name"])
    assert flags["--bundle"] == f"{mounted_path('bundle')}/{next(iter(bundle_cm['data']))}"
    assert flags["--trust"].startswith(mounted_path("trust") + "/")
    assert flags["--tls-cert"] == f"{mounted_path('tls')}/tls.crt"
    assert flags["--tls-key"] == f"{mounted_path('tls')}/tls.key"
    assert volumes["tls"]["secret"]["secretName"] == "allot-tls"  # what `allot certs` tells the operator to create


def test_every_replica_offers_the_peer_channel_at_its_pod_ip_with_the_shared_serving_key(monkeypatch):
    import argparse

    from webhook.cli.serve import add_arguments, options_from

    env = {e["name"]: e for e in CONTAINER["env"]}
    assert env["POD_IP"]["valueFrom"]["fieldRef"]["fieldPath"] == "status.podIP"
    args = [a.replace("$(POD_IP)", "10.4.2.17") for a in CONTAINER["args"][1:]]  # as the kubelet expands it
    assert CONTAINER["args"][CONTAINER["args"].index("--peer-address") + 1] == "$(POD_IP)"
    monkeypatch.delenv("ALLOT_LEDGER_ESCROW", raising=False)
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")  # in a Pod: in-cluster config
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    options = options_from(parser.parse_args(args), None)
    assert options.peer_address == "10.4.2.17" and options.ledger and options.ledger_escrow
    assert options.tls_key == f"{mounted_path('tls')}/tls.key"  # one Secret for every replica: the channel's proof


def test_webhook_configurations_call_the_service():
    svc = find("Service")["metadata"]
    for kind in ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"):
        for w in find(kind)["webhooks"]:
            s = w["clientConfig"]["service"]
            assert (s["name"], s["namespace"], s["port"]) == (svc["name"], svc["namespace"], 443)


# ---- RBAC -------------------------------------------------------------------------------------

READ = ["get", "list", "watch"]


def test_cluster_role_only_reads_what_the_snapshot_watches():
    rules = find("ClusterRole", "allot-snapshot-reader")["rules"]
    assert all(r["verbs"] == READ for r in rules)
    granted = {(g, res) for r in rules for g in r["apiGroups"] for res in r["resources"]}
    assert not any("*" in g or "*" in res for g, res in granted)
    assert ("", "secrets") not in granted
    from webhook.server.watch import RESOURCES  # what the watcher actually lists

    for res in RESOURCES:
        group = res.api_version.rpartition("/")[0]
        assert (group, res.plural) in granted, res


def test_writes_are_limited_to_the_ledger_plan_records_and_lease_in_its_own_namespace():
    role = find("Role")
    assert role["metadata"]["namespace"] == "allot-system"
    granted = {(g, res): set(r["verbs"]) for r in role["rules"] for g in r["apiGroups"] for res in r["resources"]}
    assert set(granted) == {("", "configmaps"), ("coordination.k8s.io", "leases")}
    assert granted[("", "configmaps")] <= {"get", "list", "watch", "create", "update"}  # no delete: holds are CAS-written
    assert granted[("coordination.k8s.io", "leases")] == {"get", "create", "update"}  # the reclaim Lease, CAS-renewed
    args = find("Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[args.index("--ledger") + 1] == role["metadata"]["namespace"]  # the replicas write where they may
    for binding in ("allot-snapshot-reader", "allot-reclaimer"):
        assert find("ClusterRoleBinding", binding)["subjects"] == [{"kind": "ServiceAccount", "name": "allot", "namespace": "allot-system"}]
    assert find("RoleBinding")["subjects"] == [{"kind": "ServiceAccount", "name": "allot", "namespace": "allot-system"}]


def test_the_reclaimer_evicts_suspends_annotates_and_records_events_and_deletes_nothing():
    from webhook.reclaim.kube import RESOURCES  # what the executor patches

    rules = find("ClusterRole", "allot-reclaimer")["rules"]
    granted = {(g, res): set(r["verbs"]) for r in rules for g in r["apiGroups"] for res in r["resources"]}
    assert not any("*" in g or "*" in res or "delete" in v or "*" in v for (g, res), v in granted.items())
    assert granted[("", "pods/eviction")] == {"create"} and granted[("", "events")] == {"create"}
    assert granted[("", "pods")] == {"patch"}  # the annotations (get comes from the snapshot reader)
    reader = {(g, res) for r in find("ClusterRole", "allot-snapshot-reader")["rules"] for g in r["apiGroups"] for res in r["resources"]}
    for kind, (api_version, plural) in RESOURCES.items():
        group = api_version.rpartition("/")[0]
        assert "patch" in granted[(group, plural)], kind  # suspended (or, a Pod, annotated)
        assert "get" in granted[(group, plural)] or (group, plural) in reader, kind  # read before it is patched
    assert find("ClusterRoleBinding", "allot-reclaimer")["roleRef"]["name"] == "allot-reclaimer"
    args = CONTAINER["args"]
    assert args[args.index("--reclaim") + 1] == "on"
    env = {e["name"]: e for e in CONTAINER["env"]}
    assert env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"  # its identity in the Lease


# ---- image and drift ---------------------------------------------------------------------------


def test_dockerfile_is_slim_non_root_and_runs_allot():
    text = (DEPLOY / "Dockerfile").read_text()
    froms = [line.split()[1] for line in text.splitlines() if line.startswith("FROM ")]
    assert froms and all("slim" in f for f in froms)
    users = [line.split()[1] for line in text.splitlines() if line.startswith("USER ")]
    assert users and users[-1].split(":")[0] not in ("0", "root")
    assert users[-1].split(":")[0] == str(POD["securityContext"]["runAsUser"])
    assert 'ENTRYPOINT ["allot"]' in text and "pip install" in text


def test_private_keys_are_ignored_by_git():
    assert "*.key" in (DEPLOY / ".gitignore").read_text().split()


def test_generated_manifests_are_what_allot_compile_makes_of_policies(tmp_path, capsys):
    out = tmp_path / "generated"
    assert main(["compile", "--policy", str(ROOT / "policies"), "-o", str(out)]) == 0
    committed = DEPLOY / "generated"
    fresh = {p.name: p.read_bytes() for p in out.iterdir()}
    assert sorted(fresh) == sorted(p.name for p in committed.iterdir()), "re-run: allot compile --policy policies -o deploy/generated"
    for name, data in fresh.items():
        assert (committed / name).read_bytes() == data, f"deploy/generated/{name} drifted; re-run allot compile"


def test_committed_match_conditions_evaluate_on_sample_requests_without_error():
    import deploy_apiserver as api
    import deploy_builders as b

    samples = [
        b.request(obj=b.pod(gpu=True)),
        b.request(operation="UPDATE", obj=b.pod(), old=b.pod(gpu=True)),
        b.request(operation="DELETE", obj=None, old=b.pod()),
        b.request(operation="CONNECT", subresource="exec", obj={"kind": "PodExecOptions"}, user="x", groups=None),
    ]
    conditions = [c for kind in ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration")
                  for w in find(kind)["webhooks"] for c in w.get("matchConditions", [])]
    assert conditions
    for c in conditions:
        for req in samples:
            assert api.evaluate(c["expression"], req) in (True, False)
