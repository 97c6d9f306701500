"""`allot compile` and `allot certs` end to end, with the real compiler and real certificates."""

import base64
import stat

import pytest
import yaml
from cryptography import x509

import deploy_apiserver as api
import deploy_builders as b
from webhook import bundle
from webhook.cli import main

AGENTS_POLICY = """\
agents {
  identity user matches "system:serviceaccount:agents-*:*" or "acme:agents" in groups
  allow create pods when namespace == "agents-sandbox"
}
"""
QUOTA_POLICY = """\
priority batch 100 default
quota team-b {
  for namespace == "team-b"
  gpus 16
}
"""


def exit_code(argv: list[str]) -> int:
    """`allot ARGV`'s exit code, whether it returns or argparse exits."""
    try:
        return main(argv)
    except SystemExit as exc:
        return int(exc.code)


def write_policies(root, **files):
    root.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (root / f"{name}.policy").write_text(text)
    return root


def load_docs(path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def test_compile_writes_configs_priority_classes_bundle_and_kustomization(tmp_path, capsys):
    pol = write_policies(tmp_path / "pol", agents=AGENTS_POLICY, quota=QUOTA_POLICY)
    out = tmp_path / "out"
    assert main(["compile", "--policy", str(pol), "-o", str(out)]) == 0
    assert sorted(p.name for p in out.iterdir()) == [
        "allot-bundle.json", "kustomization.yaml", "mutating-webhook.yaml", "priorityclasses.yaml", "validating-webhook.yaml"]
    kust = yaml.safe_load((out / "kustomization.yaml").read_text())
    assert kust["resources"] == ["validating-webhook.yaml", "mutating-webhook.yaml", "priorityclasses.yaml"]
    assert kust["configMapGenerator"][0]["files"] == ["allot-bundle.json"]
    (validating,) = load_docs(out / "validating-webhook.yaml")
    assert [w["name"] for w in validating["webhooks"]] == ["pods.validate.allot.io", "workloads.validate.allot.io",
                                                       "workloads-release.validate.allot.io", "agents.validate.allot.io"]
    assert [d["metadata"]["name"] for d in load_docs(out / "priorityclasses.yaml")] == ["batch"]
    # bundle paths are relative to the policy directory: the same bundle wherever it is built
    assert [p for p, _ in bundle.read_sources((out / "allot-bundle.json").read_bytes())] == ["agents.policy", "quota.policy"]
    assert "unsigned" in capsys.readouterr().out


def test_compiled_agents_only_set_does_not_intercept_ordinary_pod_creates(tmp_path):
    out = tmp_path / "out"
    assert main(["compile", "--policy", str(write_policies(tmp_path / "pol", agents=AGENTS_POLICY)), "-o", str(out)]) == 0
    configs = load_docs(out / "validating-webhook.yaml") + load_docs(out / "mutating-webhook.yaml")
    ordinary = [b.request(obj=b.pod(gpu=True)), b.request(obj=b.pod()), b.request(obj=b.pod(), groups=["devs"])]
    assert [h for c in configs for r in ordinary for h in api.intercepting(c, r)] == []
    agent = b.request(obj=b.pod(), user="system:serviceaccount:agents-1:bot")
    assert [h for c in configs for h in api.intercepting(c, agent)] == ["agents.validate.allot.io"]


def test_compile_signs_when_asked_and_the_result_verifies(tmp_path):
    key, pub = bundle.keygen(tmp_path / "ops")
    pol, out = write_policies(tmp_path / "pol", quota=QUOTA_POLICY), tmp_path / "out"
    assert main(["compile", "--policy", str(pol), "-o", str(out), "--sign", str(key)]) == 0
    assert bundle.load_bundle_sources(out / "allot-bundle.json", [pub]) == [("quota.policy", QUOTA_POLICY)]


def test_compile_refuses_a_set_with_errors_and_writes_nothing(tmp_path, capsys):
    pol, out = write_policies(tmp_path / "pol", bad='quota x { gpus "lots" }\n'), tmp_path / "out"
    assert main(["compile", "--policy", str(pol), "-o", str(out)]) == 1
    err = capsys.readouterr().err
    assert "bad.policy:1:" in err and "nothing written" in err
    assert not out.exists()


def test_compile_puts_the_ca_bundle_on_every_entry_and_drops_stale_priority_classes(tmp_path):
    ca = tmp_path / "ca.crt"
    ca.write_text("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
    out = tmp_path / "out"
    assert main(["compile", "--policy", str(write_policies(tmp_path / "p1", quota=QUOTA_POLICY)), "-o", str(out)]) == 0
    assert (out / "priorityclasses.yaml").exists()
    argv = ["compile", "--policy", str(write_policies(tmp_path / "p2", agents=AGENTS_POLICY)), "-o", str(out), "--ca-bundle", str(ca)]
    assert main(argv) == 0
    assert not (out / "priorityclasses.yaml").exists()
    want = base64.b64encode(ca.read_bytes()).decode()
    hooks = [w for f in ("validating-webhook.yaml", "mutating-webhook.yaml") for d in load_docs(out / f) for w in d["webhooks"]]
    assert hooks and all(w["clientConfig"]["caBundle"] == want for w in hooks)


def test_compile_url_points_every_entry_at_the_webhook_outside_the_cluster(tmp_path):
    out = tmp_path / "out"
    pol = write_policies(tmp_path / "pol", agents=AGENTS_POLICY, quota=QUOTA_POLICY)
    assert main(["compile", "--policy", str(pol), "-o", str(out), "--url", "https://127.0.0.1:9443/"]) == 0
    got = {(w["name"], w["clientConfig"]["url"]) for f in ("validating-webhook.yaml", "mutating-webhook.yaml")
           for d in load_docs(out / f) for w in d["webhooks"]}
    assert got == {("pods.validate.allot.io", "https://127.0.0.1:9443/validate"),
                   ("agents.validate.allot.io", "https://127.0.0.1:9443/validate"),
                   ("pods.mutate.allot.io", "https://127.0.0.1:9443/mutate"),
                   ("podgroups.mutate.allot.io", "https://127.0.0.1:9443/mutate"),
                   ("workloads.validate.allot.io", "https://127.0.0.1:9443/validate"),
                   ("workloads-release.validate.allot.io", "https://127.0.0.1:9443/validate"),
                   ("workloads.mutate.allot.io", "https://127.0.0.1:9443/mutate")}
    hooks = [w for f in ("validating-webhook.yaml", "mutating-webhook.yaml") for d in load_docs(out / f) for w in d["webhooks"]]
    assert all("service" not in w["clientConfig"] for w in hooks)


@pytest.mark.parametrize(
    "argv_tail",
    [
        ["--policy", "missing-dir", "-o", "out"],
        ["--policy", "pol", "-o", "out", "--ca-bundle", "pol/quota.policy"],  # not a certificate
        ["--policy", "pol", "-o", "out", "--sign", "missing.key"],
        ["--policy", "pol"],  # -o missing
        ["--policy", "pol", "-o", "out", "--url", "http://127.0.0.1:8443"],  # the API server calls https only
        ["--policy", "pol", "-o", "out", "--url", "https://127.0.0.1:99999"],
        ["--policy", "pol", "-o", "out", "--url", "https://h:8443/?x=1"],
    ],
)
def test_compile_usage_errors_exit_2(tmp_path, monkeypatch, capsys, argv_tail):
    monkeypatch.chdir(tmp_path)
    write_policies(tmp_path / "pol", quota=QUOTA_POLICY)
    assert exit_code(["compile", *argv_tail]) == 2
    assert "Traceback" not in capsys.readouterr().err


# ---- certs ------------------------------------------------------------------------------------


def test_certs_issue_a_serving_cert_for_the_service_names_signed_by_the_ca(tmp_path):
    out = tmp_path / "certs"
    assert main(["certs", "--service", "allot", "--namespace", "allot-system", "-o", str(out)]) == 0
    ca = x509.load_pem_x509_certificate((out / "ca.crt").read_bytes())
    leaf = x509.load_pem_x509_certificate((out / "tls.crt").read_bytes())
    leaf.verify_directly_issued_by(ca)
    sans = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(x509.DNSName)
    assert sans == ["allot", "allot.allot-system", "allot.allot-system.svc", "allot.allot-system.svc.cluster.local"]
    assert stat.S_IMODE((out / "tls.key").stat().st_mode) == 0o600
    assert stat.S_IMODE((out / "ca.key").stat().st_mode) == 0o600


def test_certs_inject_ca_bundle_into_compiled_configs_only_for_this_service(tmp_path):
    compiled = tmp_path / "compiled"
    pol = write_policies(tmp_path / "pol", agents=AGENTS_POLICY, quota=QUOTA_POLICY)
    assert main(["compile", "--policy", str(pol), "-o", str(compiled)]) == 0
    foreign = tmp_path / "other.yaml"
    foreign.write_text(yaml.safe_dump({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
                                       "metadata": {"name": "x"}, "webhooks": [{"name": "a.b.c", "clientConfig": {
                                           "service": {"name": "other", "namespace": "allot-system"}}}]}))
    before = foreign.read_text()
    certs = tmp_path / "certs"
    argv = ["certs", "--service", "allot", "--namespace", "allot-system", "-o", str(certs), "--inject", str(compiled), str(foreign)]
    assert main(argv) == 0
    want = base64.b64encode((certs / "ca.crt").read_bytes()).decode()
    hooks = [w for f in ("validating-webhook.yaml", "mutating-webhook.yaml") for d in load_docs(compiled / f) for w in d["webhooks"]]
    assert len(hooks) == 7 and all(w["clientConfig"]["caBundle"] == want for w in hooks)  # + podgroups.mutate, workloads.validate, -release and .mutate
    assert foreign.read_text() == before
    assert (compiled / "validating-webhook.yaml").read_text().startswith("# Generated by `allot compile`")


def test_certs_reuse_the_ca_on_rotation_unless_told_otherwise(tmp_path):
    out = tmp_path / "certs"
    argv = ["certs", "--service", "allot", "--namespace", "ns", "-o", str(out)]
    assert main(argv) == 0
    ca1, leaf1 = (out / "ca.crt").read_bytes(), (out / "tls.crt").read_bytes()
    assert main(argv) == 0
    assert (out / "ca.crt").read_bytes() == ca1 and (out / "tls.crt").read_bytes() != leaf1
    assert main([*argv, "--new-ca"]) == 0
    assert (out / "ca.crt").read_bytes() != ca1


def test_certs_usage_errors_exit_2(tmp_path, capsys):
    assert exit_code(["certs", "--service", "allot", "-o", str(tmp_path)]) == 2  # --namespace missing
    assert exit_code(["certs", "--service", "a", "--namespace", "n", "-o", str(tmp_path), "--inject", str(tmp_path / "nope")]) == 2
    assert "Traceback" not in capsys.readouterr().err
