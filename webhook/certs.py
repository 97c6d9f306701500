"""Certificates for the webhook: a private CA and a serving certificate it signs (ECDSA P-256)."""

from __future__ import annotations

import base64
import datetime
import ipaddress
import os
import pathlib

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CA_DAYS = 3650
SERVING_DAYS = 365
# Backdate a little so a node whose clock lags the issuer's still accepts the cert.
CLOCK_SKEW = datetime.timedelta(minutes=5)


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)


def _new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _key_usage(*, signs_certificates: bool) -> x509.KeyUsage:
    """ECDSA keys only sign: TLS handshakes always, certificates and CRLs only for the CA."""
    return x509.KeyUsage(
        digital_signature=True,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=signs_certificates,
        crl_sign=signs_certificates,
        encipher_only=False,
        decipher_only=False,
    )


def generate_ca(common_name: str, *, days: int = CA_DAYS) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    """A self-signed CA key and certificate that may sign only leaf certificates."""
    key = _new_key()
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    now = _now()
    ski = x509.SubjectKeyIdentifier.from_public_key(key.public_key())
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - CLOCK_SKEW)
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_key_usage(signs_certificates=True), critical=True)
        .add_extension(ski, critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ski), critical=False)
        .sign(key, hashes.SHA256())
    )
    return key, cert


def issue_serving_cert(
    ca_key,
    ca_cert: x509.Certificate,
    dns_names: list[str],
    ip_addresses: list[str],
    *,
    days: int = SERVING_DAYS,
) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    """A TLS server certificate for `dns_names` and `ip_addresses`, signed by the CA."""
    if not dns_names and not ip_addresses:
        raise ValueError("a serving certificate needs at least one DNS name or IP address")
    key = _new_key()
    sans: list[x509.GeneralName] = [x509.DNSName(n) for n in dns_names]
    sans += [x509.IPAddress(ipaddress.ip_address(a)) for a in ip_addresses]
    # The API server ignores CN and checks SANs only; CN is for humans reading the cert.
    cn = dns_names[0] if dns_names else ip_addresses[0]
    now = _now()
    ca_ski = ca_cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - CLOCK_SKEW)
        .not_valid_after(min(now + datetime.timedelta(days=days), ca_cert.not_valid_after_utc))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_key_usage(signs_certificates=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    return key, cert


def key_pem(key) -> bytes:
    """The private key as unencrypted PKCS#8 PEM."""
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())


def cert_pem(cert: x509.Certificate) -> bytes:
    """The certificate as PEM."""
    return cert.public_bytes(serialization.Encoding.PEM)


def _write_atomic(path: pathlib.Path, data: bytes, mode: int) -> None:
    # Write-then-rename so a watcher reloading the file never reads half a PEM.
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
    os.replace(tmp, path)


def write_pem(dir, name: str, key, cert: x509.Certificate) -> tuple[pathlib.Path, pathlib.Path]:
    """Write `<name>.key` (mode 0600) and `<name>.crt` into `dir`; returns their paths."""
    d = pathlib.Path(dir)
    d.mkdir(parents=True, exist_ok=True)
    key_path, cert_path = d / f"{name}.key", d / f"{name}.crt"
    _write_atomic(key_path, key_pem(key), 0o600)
    _write_atomic(cert_path, cert_pem(cert), 0o644)
    return key_path, cert_path


def ca_bundle_b64(cert: x509.Certificate) -> str:
    """The CA certificate PEM, base64-encoded, as `webhooks[].clientConfig.caBundle` wants it."""
    return base64.b64encode(cert_pem(cert)).decode("ascii")


def read_pem(dir, name: str):
    """(key, cert) from `<name>.key` and `<name>.crt` in `dir`, as `write_pem` wrote them (e.g. to reuse a CA)."""
    d = pathlib.Path(dir)
    key = serialization.load_pem_private_key((d / f"{name}.key").read_bytes(), password=None)
    cert = x509.load_pem_x509_certificate((d / f"{name}.crt").read_bytes())
    return key, cert
