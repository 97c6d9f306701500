"""`allot certs`: a CA and the webhook's serving certificate, and the CA injected as `caBundle`.

Writes into DIR: ca.crt, ca.key (0600), tls.crt, tls.key (0600) — the names a
`kubernetes.io/tls` Secret uses. An existing ca.crt/ca.key pair in DIR is reused so a
serving-cert rotation leaves `caBundle` unchanged (pass --new-ca to replace the CA).
Then every Validating/MutatingWebhookConfiguration found in DIR, or in the files and
directories given with --inject, gets `clientConfig.caBundle` on each entry that
points at this service; entries of other services are left alone.
"""

from __future__ import annotations

import pathlib

import yaml

from webhook.emit import HEADER, check_dns_label, dump_yaml, write_text
from webhook.errors import UsageError

WEBHOOK_KINDS = ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration")


def add_arguments(parser) -> None:
    """--service NAME --namespace NS -o DIR [--inject PATH…] [--new-ca] [--days N]."""
    parser.add_argument("--service", required=True, help="webhook Service name")
    parser.add_argument("--namespace", required=True, help="namespace of the Service")
    parser.add_argument("-o", "--output", required=True, metavar="DIR", help="directory for ca.* and tls.*")
    parser.add_argument("--inject", nargs="+", default=[], metavar="PATH",
                        help="webhook configuration files or directories (e.g. allot compile's OUT) to set caBundle in")
    parser.add_argument("--new-ca", action="store_true", help="replace an existing CA in DIR (caBundle changes)")
    parser.add_argument("--days", type=int, default=365, help="serving certificate lifetime (default: 365)")


def dns_names(service: str, namespace: str) -> list[str]:
    """The names the API server may use to reach the Service."""
    return [service, f"{service}.{namespace}", f"{service}.{namespace}.svc", f"{service}.{namespace}.svc.cluster.local"]


def _load_or_create_ca(out: pathlib.Path, new: bool):
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    from webhook import certs

    key_path, cert_path = out / "ca.key", out / "ca.crt"
    if not new and key_path.exists() and cert_path.exists():
        try:
            key = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
            return key, x509.load_pem_x509_certificate(cert_path.read_bytes()), False
        except ValueError as exc:
            raise UsageError(f"{out}: existing ca.key/ca.crt unreadable ({exc}); use --new-ca") from None
    key, cert = certs.generate_ca("allot-webhook-ca")
    certs.write_pem(out, "ca", key, cert)
    return key, cert, True


def _yaml_files(paths: list[pathlib.Path]) -> list[pathlib.Path]:
    found: list[pathlib.Path] = []
    for p in paths:
        if p.is_dir():
            found += sorted(q for q in p.iterdir() if q.suffix in (".yaml", ".yml") and q.is_file())
        elif p.is_file():
            found.append(p)
        else:
            raise UsageError(f"--inject {p}: no such file or directory")
    return found


def inject_ca_bundle(path: pathlib.Path, ca_bundle: str, service: str, namespace: str) -> int:
    """Set caBundle on this service's webhook entries in one YAML file; returns how many entries changed."""

    from webhook.textfile import read_text

    text = read_text(str(path), "--inject")
    try:
        docs = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as exc:
        raise UsageError(f"{path}: not YAML ({exc.__class__.__name__})") from None
    changed = 0
    for doc in docs:
        if not isinstance(doc, dict) or doc.get("kind") not in WEBHOOK_KINDS:
            continue
        for hook in doc.get("webhooks") or []:
            svc = (hook.get("clientConfig") or {}).get("service") or {}
            if svc.get("name") == service and svc.get("namespace") == namespace:
                hook["clientConfig"]["caBundle"] = ca_bundle
                changed += 1
    if changed:
        header = HEADER if text.startswith(HEADER) else ""
        write_text(path, header + dump_yaml(docs))
    return changed


def run(args) -> int:
    """Issue the CA and serving certificate, then inject caBundle."""
    from webhook import certs

    out = pathlib.Path(args.output)
    if args.days < 1:
        raise UsageError("--days must be at least 1")
    check_dns_label("--service", args.service)
    check_dns_label("--namespace", args.namespace)
    try:
        out.mkdir(parents=True, exist_ok=True)
        ca_key, ca_cert, created = _load_or_create_ca(out, args.new_ca)
        names = dns_names(args.service, args.namespace)
        key, cert = certs.issue_serving_cert(ca_key, ca_cert, names, [], days=args.days)
        certs.write_pem(out, "tls", key, cert)
    except OSError as exc:
        raise UsageError(f"-o {out}: cannot write ({exc.strerror or exc})") from None
    ca_bundle = certs.ca_bundle_b64(ca_cert)
    print(f"{'created' if created else 'reused'} CA {out / 'ca.crt'}; serving cert {out / 'tls.crt'} for {', '.join(names)}")
    targets = _yaml_files([out, *map(pathlib.Path, args.inject)])
    total = 0
    for path in targets:
        n = inject_ca_bundle(path, ca_bundle, args.service, args.namespace)
        if n:
            print(f"injected caBundle into {n} webhook entr{'y' if n == 1 else 'ies'} of {path}")
        total += n
    if not total:
        print(f"note: no webhook configuration for service {args.namespace}/{args.service} found to inject caBundle into")
    print(f"next: kubectl -n {args.namespace} create secret tls {args.service}-tls "
          f"--cert={out / 'tls.crt'} --key={out / 'tls.key'} --dry-run=client -o yaml | kubectl apply -f -")
    return 0
