"""`allot compile`: a policy set -> webhook configurations, PriorityClasses and the policy bundle.

Writes into OUT (all deterministic, so a committed copy can be checked for drift):
  validating-webhook.yaml, mutating-webhook.yaml, priorityclasses.yaml (when the set
  declares priorities), validating-policies.yaml and mutating-policies.yaml (the
  admission policies of what the API server judges and patches itself, docs/native.md), allot-bundle.json, and a
  kustomization.yaml listing them and packing the bundle into the `allot-policy-bundle` ConfigMap.
"""

from __future__ import annotations

import base64
import os
import pathlib
import sys
from dataclasses import dataclass


from webhook.emit import HEADER, check_dns_label, dump_yaml, write_text
from webhook.errors import UsageError

VALIDATING_FILE = "validating-webhook.yaml"
MUTATING_FILE = "mutating-webhook.yaml"
PRIORITY_FILE = "priorityclasses.yaml"
NATIVE_FILE = "validating-policies.yaml"
NATIVE_MUTATING_FILE = "mutating-policies.yaml"
KUSTOMIZATION_FILE = "kustomization.yaml"
BUNDLE_CONFIGMAP = "allot-policy-bundle"


def add_arguments(parser) -> None:
    """--policy DIR -o OUT [--service NAME] [--namespace NS] [--port N] [--ca-bundle FILE] [--url URL] [--sign KEY]."""
    parser.add_argument("--policy", required=True, metavar="DIR", help="policy file or directory of *.policy files")
    parser.add_argument("-o", "--output", required=True, metavar="OUT", help="directory to write into")
    parser.add_argument("--service", default="allot", help="webhook Service name (default: allot)")
    parser.add_argument("--namespace", default="allot-system", help="namespace of the Service (default: allot-system)")
    parser.add_argument("--port", type=int, default=443, help="Service port (default: 443)")
    parser.add_argument("--ca-bundle", metavar="FILE", help="PEM CA certificate to put in clientConfig.caBundle")
    parser.add_argument("--url", metavar="https://HOST:PORT",
                        help="call the webhook at this URL (clientConfig.url + /validate, /mutate) instead of the Service")
    parser.add_argument("--sign", metavar="KEY", help="Ed25519 private key (allot bundle keygen) to sign the bundle")
    parser.add_argument("--kube-version", default="1.36", metavar="1.N",
                        help="Kubernetes version of the cluster: picks native policies (VAP from 1.30) or the webhook (default: 1.36)")
    parser.add_argument("--explain", action="store_true", help="say where each block runs: native, webhook or split, and why")
    parser.add_argument("--format", choices=("text", "json"), default="text", help="--explain output: text (default) or json")


def read_ca_bundle(path: str) -> str:
    """The base64 `caBundle` of a PEM CA certificate file; UsageError if it is not one."""
    try:
        data = pathlib.Path(path).read_bytes()
    except OSError as exc:
        raise UsageError(f"--ca-bundle {path}: cannot read ({exc.strerror or exc})") from None
    if b"-----BEGIN CERTIFICATE-----" not in data:
        raise UsageError(f"--ca-bundle {path}: not a PEM certificate")
    return base64.b64encode(data).decode("ascii")


def check_url(url: str) -> str:
    """A webhook base URL the API server accepts (https, a host, no query or fragment); UsageError otherwise."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError as exc:
        raise UsageError(f"--url {url}: {exc}") from None
    if parts.scheme != "https" or not parts.hostname:
        raise UsageError(f"--url {url}: give https://HOST[:PORT] (the API server calls webhooks over TLS only)")
    if parts.query or parts.fragment or parts.username:
        raise UsageError(f"--url {url}: no user, query or fragment (the API server refuses them)")
    return url


def _compile(sources: list[tuple[str, str]]):
    try:
        from lang import compile_policies
    except ImportError:
        print("allot compile: the policy compiler (lang.compile_policies) is not built yet", file=sys.stderr)
        return None, None
    return compile_policies(sources)


def _kustomization(files: list[str], namespace: str) -> str:
    doc = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": files,
        "configMapGenerator": [{"name": BUNDLE_CONFIGMAP, "namespace": namespace, "files": ["allot-bundle.json"]}],
        # A fixed name: the server watches the mounted file and hot-reloads a verified bundle.
        "generatorOptions": {"disableNameSuffixHash": True, "labels": {"app.kubernetes.io/name": "allot"}},
    }
    return HEADER + dump_yaml([doc])


def describe(config: dict) -> list[str]:
    """One line per webhook entry: what it intercepts and how it is narrowed."""
    lines = []
    for w in config["webhooks"]:
        res = ",".join(sorted({r for rule in w["rules"] for r in rule["resources"]}))
        ops = ",".join(sorted({o for rule in w["rules"] for o in rule["operations"]}))
        conds = ",".join(c["name"] for c in w.get("matchConditions", [])) or "none"
        ns = [e for e in w["namespaceSelector"]["matchExpressions"] if e["operator"] == "In"]
        where = f"namespaces {','.join(ns[0]['values'])}" if ns else "all namespaces but excluded"
        lines.append(f"  {w['name']}: {res} {ops}; matchConditions {conds}; {where}; failurePolicy {w['failurePolicy']}")
    return lines


@dataclass(frozen=True, slots=True)
class Written:
    """What `write_outputs` wrote: file names, the bundle digest, the signing key id, one line per webhook."""

    files: tuple[str, ...]
    digest: str
    key_id: str | None
    description: tuple[str, ...]
    plan: object = None  # policy.manifests.native.Plan: where each block runs


def write_outputs(policy_set, sources: list[tuple[str, str]], out: pathlib.Path, *, service: str = "allot",
                  namespace: str = "allot-system", port: int = 443, ca_bundle: str | None = None,
                  sign_key: str | None = None, url: str | None = None, kube_version: tuple[int, int] | None = None) -> Written:
    """Write the webhook configurations, native policies, PriorityClasses, bundle and kustomization for a checked set into `out`."""
    from lang import compile_policies
    from policy.manifests import configurations as manifests
    from policy.manifests import native
    from webhook import bundle

    data = bundle.encode_bundle(sources)
    digest = bundle.compute_digest(sorted(sources))
    target = manifests.Target(service=service, namespace=namespace, port=port, ca_bundle=ca_bundle, digest=digest, url=url)
    out.mkdir(parents=True, exist_ok=True)
    # The native messages name source lines as the webhook does, which compiles the bundle's (relative) paths.
    bundled, _ = compile_policies(sources)
    plan = native.plan(bundled or policy_set, kube_version or native.NEWEST)
    policies = native.validating_policies(plan, (target.namespace, *target.excluded_namespaces), digest)
    validating = manifests.validating_configuration(policy_set, target, plan.native_pod_blocks)
    mutating = manifests.mutating_configuration(policy_set, target, plan.native_set_blocks)
    mutations = native.mutating_policies(plan, (target.namespace, *target.excluded_namespaces), digest)
    classes = manifests.priority_classes(policy_set)
    files = {VALIDATING_FILE: HEADER + dump_yaml([validating]), MUTATING_FILE: HEADER + dump_yaml([mutating])}
    # Stale files would re-create classes or policies the set no longer declares.
    for name, docs in ((PRIORITY_FILE, classes), (NATIVE_FILE, policies), (NATIVE_MUTATING_FILE, mutations)):
        if docs:
            files[name] = HEADER + dump_yaml(docs)
        elif (out / name).exists():
            (out / name).unlink()
    for name, text in files.items():
        write_text(out / name, text)
    write_text(out / KUSTOMIZATION_FILE, _kustomization(list(files), namespace))
    bundle_path = out / bundle.BUNDLE_FILE
    tmp = bundle_path.with_name(f".{bundle_path.name}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, bundle_path)
    key_id = None
    if sign_key:
        try:
            key_id = bundle.sign(bundle_path, sign_key)
        except bundle.BundleError as exc:
            raise UsageError(f"--sign {sign_key}: {exc}") from None
    return Written((*files, bundle.BUNDLE_FILE, KUSTOMIZATION_FILE), digest, key_id,
                   tuple(describe(validating) + describe(mutating)), plan)


def run(args) -> int:
    """Compile, refuse on errors (exit 1), write the outputs, optionally sign the bundle."""
    from lang.diagnostics import render_all
    from webhook.sources import read_policy_sources, relative_sources


    check_dns_label("--service", args.service)
    check_dns_label("--namespace", args.namespace)
    if not 1 <= args.port <= 65535:
        raise UsageError(f"--port {args.port} is not a port")
    sources = read_policy_sources([args.policy])
    if not sources:
        raise UsageError(f"{args.policy}: no *.policy files")
    ca = read_ca_bundle(args.ca_bundle) if args.ca_bundle else None
    url = check_url(args.url) if args.url else None
    if args.sign and not pathlib.Path(args.sign).is_file():
        raise UsageError(f"--sign {args.sign}: no such key file")
    from policy.manifests import native

    try:
        kube_version = native.parse_version(args.kube_version)
    except ValueError as exc:
        raise UsageError(f"--kube-version: {exc}") from None
    policy_set, diags = _compile(sources)
    if diags is None:
        return 2
    texts = dict(sources)
    errors = [d for d in diags if d.severity == "error"]
    if diags:
        print(render_all(list(diags), texts), file=sys.stderr)
    if errors or policy_set is None:
        print(f"allot compile: {len(errors)} error(s) in the policy set; nothing written", file=sys.stderr)
        return 1

    try:
        written = write_outputs(policy_set, relative_sources(args.policy, sources), pathlib.Path(args.output),
                                service=args.service, namespace=args.namespace, port=args.port, ca_bundle=ca,
                                sign_key=args.sign, url=url, kube_version=kube_version)
    except OSError as exc:
        raise UsageError(f"-o {args.output}: cannot write ({exc.strerror or exc})") from None
    if args.explain and args.format == "json":
        import json

        print(json.dumps({"files": list(written.files), "digest": written.digest,
                          "blocks": [p.as_json() for p in written.plan.placements], "notes": list(written.plan.notes)},
                         indent=2))
        return 0
    print(f"wrote {args.output}: {', '.join(written.files)} ({written.digest}"
          f"{f', signed by key {written.key_id}' if written.key_id else ''})")
    for line in written.description:
        print(line)
    if args.explain:
        print("where each block runs:")
        for line in native.explain_lines(written.plan):
            print(line)
    else:
        for note in written.plan.notes:
            print(f"note: {note}")
    if not args.sign:
        print(f"note: the bundle is unsigned; `allot serve --trust` refuses it until "
              f"`allot bundle sign --key KEY {pathlib.Path(args.output) / 'allot-bundle.json'}`")
    return 0
