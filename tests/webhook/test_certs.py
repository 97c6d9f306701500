"""The CA and serving certificate: SANs, constraints, usages, validity, and that TLS accepts them."""

import base64
import ipaddress
import ssl

import pytest
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID

from webhook import certs


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    ca_key, ca_cert = certs.generate_ca("allot-test-ca")
    key, cert = certs.issue_serving_cert(ca_key, ca_cert, ["allot.allot-system.svc", "localhost"], ["127.0.0.1"])
    d = tmp_path_factory.mktemp("pki")
    return ca_cert, cert, certs.write_pem(d, "ca", ca_key, ca_cert), certs.write_pem(d, "tls", key, cert)


def test_ca_is_a_path_length_zero_ca(pki):
    ca_cert = pki[0]
    bc = ca_cert.extensions.get_extension_for_class(x509.BasicConstraints)
    assert bc.critical and bc.value.ca and bc.value.path_length == 0
    assert ca_cert.extensions.get_extension_for_class(x509.KeyUsage).value.key_cert_sign


def test_serving_cert_has_sans_and_server_auth(pki):
    cert = pki[1]
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == ["allot.allot-system.svc", "localhost"]
    assert san.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("127.0.0.1")]
    assert not cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert ExtendedKeyUsageOID.SERVER_AUTH in cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert cert.not_valid_before_utc < cert.not_valid_after_utc <= pki[0].not_valid_after_utc


def test_written_files_load_into_tls_and_key_is_private(pki):
    (_, ca_crt), (key_path, crt_path) = pki[2], pki[3]
    assert key_path.stat().st_mode & 0o077 == 0
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(crt_path, key_path)  # raises if key and cert do not match
    client = ssl.create_default_context(cafile=str(ca_crt))
    assert client.verify_mode == ssl.CERT_REQUIRED


def test_ca_bundle_is_base64_pem(pki):
    decoded = base64.b64decode(certs.ca_bundle_b64(pki[0]))
    assert decoded.startswith(b"-----BEGIN CERTIFICATE-----")
    assert x509.load_pem_x509_certificate(decoded).subject == pki[0].subject


def test_serving_cert_needs_a_name():
    ca_key, ca_cert = certs.generate_ca("x")
    with pytest.raises(ValueError):
        certs.issue_serving_cert(ca_key, ca_cert, [], [])
