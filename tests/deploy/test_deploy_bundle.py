"""Signed bundles: round trip, tamper detection, wrong key, missing signature, canonical form, CLI exit codes."""

import base64
import json
import os
import stat

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from webhook import bundle
from webhook.cli import main

EXAMPLES = int(os.environ.get("ALLOT_FUZZ_EXAMPLES", "60"))
SOURCES = [("quota.policy", "quota a { gpus 4 }\n"), ("agents/agents.policy", "agents { identity user == \"é\" }\n")]


@pytest.fixture
def keys(tmp_path):
    """Two key pairs: the operator's and a stranger's."""
    return bundle.keygen(tmp_path / "ops"), bundle.keygen(tmp_path / "stranger")


def signed_bytes(key_path) -> bytes:
    return bundle.sign_bytes(bundle.encode_bundle(SOURCES), bundle.load_private_key(key_path.read_bytes()))


def reason_of(data: bytes, pubs: list[bytes]) -> str:
    with pytest.raises(bundle.BundleError) as exc:
        bundle.verify_bundle(data, pubs)
    return exc.value.reason


def test_round_trip_returns_the_sources_sorted_by_path(keys):
    (key, pub), _ = keys
    got = bundle.verify_bundle(signed_bytes(key), [pub.read_bytes()])
    assert got == sorted(SOURCES)


def test_sign_in_place_then_load_bundle_sources(tmp_path, keys):
    (key, pub), _ = keys
    path = tmp_path / "allot-bundle.json"
    path.write_bytes(bundle.encode_bundle(SOURCES))
    kid = bundle.sign(path, key)
    assert kid == bundle.key_id(bundle.load_public_key(pub.read_bytes()))
    assert bundle.load_bundle_sources(path, [pub]) == sorted(SOURCES)


@pytest.mark.parametrize(
    "case, want_reason",
    [
        ("unsigned", bundle.UNSIGNED),
        ("wrong key", bundle.UNTRUSTED),
        ("no trusted keys", bundle.UNTRUSTED),
        ("text edited, digest kept", bundle.TAMPERED),
        ("signature bytes flipped", bundle.TAMPERED),
        ("not json", bundle.BAD_FORMAT),
        ("future format", bundle.BAD_FORMAT),
    ],
)
def test_refusals_name_their_reason(keys, case, want_reason):
    (key, pub), (_, other_pub) = keys
    good = signed_bytes(key)
    data, pubs = good, [pub.read_bytes()]
    if case == "unsigned":
        data = bundle.encode_bundle(SOURCES)
    elif case == "wrong key":
        pubs = [other_pub.read_bytes()]
    elif case == "no trusted keys":
        pubs = []
    elif case == "text edited, digest kept":
        data = good.replace(b"gpus 4", b"gpus 9")
    elif case == "signature bytes flipped":
        sig = good.split(b'"sig": "')[1][:8]
        data = good.replace(sig, sig[::-1] if sig[::-1] != sig else b"AAAAAAAA")
    elif case == "not json":
        data = good[:-5]
    elif case == "future format":
        data = good.replace(b"allot-bundle/v1", b"allot-bundle/v9")
    assert reason_of(data, pubs) == want_reason


def test_a_second_trusted_key_is_enough(keys):
    (key, pub), (_, other_pub) = keys
    assert bundle.verify_bytes(signed_bytes(key), [other_pub.read_bytes(), pub.read_bytes()]).key_ids


def test_signing_refuses_a_tampered_bundle(keys):
    (key, _), _ = keys
    tampered = bundle.encode_bundle(SOURCES).replace(b"gpus 4", b"gpus 5")
    with pytest.raises(bundle.BundleError) as exc:
        bundle.sign_bytes(tampered, bundle.load_private_key(key.read_bytes()))
    assert exc.value.reason == bundle.TAMPERED


def test_resigning_with_the_same_key_keeps_one_signature(keys):
    (key, pub), _ = keys
    twice = bundle.sign_bytes(signed_bytes(key), bundle.load_private_key(key.read_bytes()))
    assert twice.count(b'"keyid"') == 1
    assert bundle.verify_bundle(twice, [pub.read_bytes()])


def test_keygen_writes_a_private_key_only_the_owner_reads_and_never_overwrites(tmp_path):
    key, pub = bundle.keygen(tmp_path / "k")
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    assert b"PUBLIC KEY" in pub.read_bytes()
    with pytest.raises(FileExistsError):
        bundle.keygen(tmp_path / "k")


def test_encoding_is_deterministic_and_order_free():
    assert bundle.encode_bundle(SOURCES) == bundle.encode_bundle(list(reversed(SOURCES)))


@pytest.fixture(scope="module")
def signed_once(tmp_path_factory):
    d = tmp_path_factory.mktemp("k")
    key, pub = bundle.keygen(d / "ops")
    return signed_bytes(key), pub.read_bytes()


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_flipping_any_single_byte_is_refused(signed_once, data):
    good, pub = signed_once
    pos = data.draw(st.integers(0, len(good) - 1), label="position")
    bit = data.draw(st.integers(0, 7), label="bit")
    flipped = bytearray(good)
    flipped[pos] ^= 1 << bit
    with pytest.raises(bundle.BundleError):
        bundle.verify_bundle(bytes(flipped), [pub])


# ---- CLI ---------------------------------------------------------------------------


def test_cli_keygen_sign_verify_exit_codes(tmp_path, capsys):
    b = tmp_path / "allot-bundle.json"
    b.write_bytes(bundle.encode_bundle(SOURCES))
    assert main(["bundle", "keygen", str(tmp_path / "ops")]) == 0
    assert main(["bundle", "keygen", str(tmp_path / "other")]) == 0
    assert main(["bundle", "keygen", str(tmp_path / "ops")]) == 1  # refuses to overwrite
    assert main(["bundle", "verify", "--pub", str(tmp_path / "ops.pub"), str(b)]) == 1
    assert "unsigned" in capsys.readouterr().err
    assert main(["bundle", "sign", "--key", str(tmp_path / "ops.key"), str(b)]) == 0
    assert main(["bundle", "verify", "--pub", str(tmp_path / "ops.pub"), str(b)]) == 0
    assert main(["bundle", "verify", "--pub", str(tmp_path / "other.pub"), str(b)]) == 1
    assert "untrusted key" in capsys.readouterr().err
    b.write_bytes(b.read_bytes().replace(b"gpus 4", b"gpus 8"))
    assert main(["bundle", "verify", "--pub", str(tmp_path / "ops.pub"), str(b)]) == 1
    assert "tampered" in capsys.readouterr().err


def exit_code(argv: list[str]) -> int:
    """`allot ARGV`'s exit code, whether it returns or argparse exits."""
    try:
        return main(argv)
    except SystemExit as exc:
        return int(exc.code)


@pytest.mark.parametrize(
    "argv",
    [
        ["bundle"],
        ["bundle", "verify", "BUNDLE"],  # --pub missing
        ["bundle", "verify", "--pub", "missing.pub", "BUNDLE"],
        ["bundle", "verify", "--pub", "ops.key", "BUNDLE"],  # a private key is not a public key
        ["bundle", "sign", "--key", "ops.pub", "BUNDLE"],
        ["bundle", "sign", "--key", "ops.key", "missing.json"],
    ],
)
def test_cli_usage_errors_exit_2_without_traceback(tmp_path, capsys, argv, monkeypatch):
    monkeypatch.chdir(tmp_path)
    bundle.keygen(tmp_path / "ops")
    (tmp_path / "BUNDLE").write_bytes(bundle.encode_bundle(SOURCES))
    assert exit_code(argv) == 2
    assert "Traceback" not in capsys.readouterr().err


def test_a_signature_with_other_padding_bits_is_refused(signed_once):
    """Base64 with '==' carries 4 unused bits in its last character: a bundle changed there must not verify."""
    good, pub = signed_once
    doc = json.loads(good)
    sig = doc["signatures"][0]["sig"]
    assert sig.endswith("==")
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
    last = alphabet.index(sig[-3])
    twin = alphabet[last ^ 1]  # differs only in a padding bit: decodes to the same signature bytes
    assert base64.b64decode(sig[:-3] + twin + "==") == base64.b64decode(sig)
    forged = good.replace(sig.encode(), (sig[:-3] + twin + "==").encode())
    with pytest.raises(bundle.BundleError):
        bundle.verify_bundle(forged, [pub])
