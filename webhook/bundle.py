"""Policy bundles: every policy source in one canonical JSON file, its SHA-256 digest, Ed25519 signatures.

Layout (`allot-bundle.json`, written in exactly one canonical form so that every
byte of the file is covered: a file that does not re-serialize to itself is refused):

    {"digest": "sha256:<hex>", "format": "allot-bundle/v1",
     "signatures": [{"alg": "ed25519", "keyid": "<hex>", "sig": "<base64>"}],
     "sources": [{"path": "quota.policy", "text": "..."}]}

The digest covers the format and the sources (canonical compact JSON, sorted keys,
UTF-8); a signature covers `SIGNING_CONTEXT + digest`, so a bundle signature can
never be replayed as a signature over anything else. The key id is the first 16
hex digits of SHA-256 over the raw 32-byte public key.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
import pathlib
from dataclasses import dataclass

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

FORMAT = "allot-bundle/v1"
SIGNING_CONTEXT = b"allot-bundle/v1 digest\n"
BUNDLE_FILE = "allot-bundle.json"

UNSIGNED = "unsigned"
TAMPERED = "tampered"
UNTRUSTED = "signed by an untrusted key"
BAD_FORMAT = "bad format"


class BundleError(Exception):
    """A bundle that must not be loaded; `reason` is one of the module's reason constants."""

    def __init__(self, reason: str, detail: str = "") -> None:
        self.reason = reason
        self.detail = detail
        super().__init__(f"{reason}: {detail}" if detail else reason)


@dataclass(frozen=True, slots=True)
class VerifiedBundle:
    """A bundle whose digest matched and which a trusted key signed."""

    sources: tuple[tuple[str, str], ...]
    digest: str
    key_ids: tuple[str, ...]  # trusted keys whose signature verified


# ---- encoding ---------------------------------------------------------------


def compute_digest(sources: list[tuple[str, str]] | tuple[tuple[str, str], ...]) -> str:
    """`sha256:<hex>` over the canonical encoding of the format and the (path, text) pairs."""
    body = {"format": FORMAT, "sources": [[p, t] for p, t in sources]}
    data = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    return "sha256:" + hashlib.sha256(data).hexdigest()


def encode_bundle(sources, signatures: list[dict] | None = None) -> bytes:
    """The canonical file bytes of a bundle holding `sources` (sorted by path)."""
    ordered = sorted((str(p), str(t)) for p, t in sources)
    paths = [p for p, _ in ordered]
    if len(set(paths)) != len(paths):
        raise BundleError(BAD_FORMAT, "two sources share one path")
    doc = {
        "digest": compute_digest(ordered),
        "format": FORMAT,
        "signatures": sorted(signatures or [], key=lambda s: s["keyid"]),
        "sources": [{"path": p, "text": t} for p, t in ordered],
    }
    return _dump(doc)


def _dump(doc: dict) -> bytes:
    return (json.dumps(doc, sort_keys=True, indent=1, ensure_ascii=False) + "\n").encode("utf-8")


def _parse(data: bytes) -> dict:
    """The bundle document, shape-checked; BundleError(BAD_FORMAT) for anything else."""
    from webhook.textfile import NotText, decode

    try:
        text = decode(data, "bundle")  # the one reader's words for bytes that are not text, as every input file gets
    except NotText as exc:
        raise BundleError(BAD_FORMAT, exc.detail) from None
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise BundleError(BAD_FORMAT, f"not UTF-8 JSON ({exc.__class__.__name__})") from None
    if not isinstance(doc, dict) or set(doc) != {"digest", "format", "signatures", "sources"}:
        raise BundleError(BAD_FORMAT, "expected exactly the keys digest, format, signatures, sources")
    if doc["format"] != FORMAT:
        raise BundleError(BAD_FORMAT, f"format {doc['format']!r} is not {FORMAT!r}")
    srcs, sigs = doc["sources"], doc["signatures"]
    if not isinstance(srcs, list) or not all(
        isinstance(s, dict) and set(s) == {"path", "text"} and all(isinstance(v, str) for v in s.values()) for s in srcs
    ):
        raise BundleError(BAD_FORMAT, "sources must be a list of {path, text} strings")
    if not isinstance(sigs, list) or not all(
        isinstance(s, dict) and set(s) == {"alg", "keyid", "sig"} and all(isinstance(v, str) for v in s.values())
        for s in sigs
    ):
        raise BundleError(BAD_FORMAT, "signatures must be a list of {alg, keyid, sig} strings")
    if not isinstance(doc["digest"], str):
        raise BundleError(BAD_FORMAT, "digest must be a string")
    # Only the canonical form is accepted, so no byte of the file escapes the digest or the checks above.
    if _dump(doc) != data:
        raise BundleError(BAD_FORMAT, "not in canonical form (edited by hand? re-run allot compile)")
    return doc


def read_sources(data: bytes) -> list[tuple[str, str]]:
    """The (path, text) pairs of a well-formed bundle whose digest matches, signed or not."""
    doc = _parse(data)
    sources = [(s["path"], s["text"]) for s in doc["sources"]]
    if compute_digest(sources) != doc["digest"]:
        raise BundleError(TAMPERED, "the digest does not match the sources")
    return sources


# ---- keys ---------------------------------------------------------------------


def key_id(public_key: Ed25519PublicKey) -> str:
    """First 16 hex digits of SHA-256 over the raw public key."""
    raw = public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()[:16]


def load_public_key(pem: bytes) -> Ed25519PublicKey:
    """An Ed25519 public key from PEM; BundleError(BAD_FORMAT) otherwise."""
    try:
        key = serialization.load_pem_public_key(pem)
    except (ValueError, TypeError) as exc:
        raise BundleError(BAD_FORMAT, f"not a PEM public key ({exc})") from None
    if not isinstance(key, Ed25519PublicKey):
        raise BundleError(BAD_FORMAT, "the public key is not Ed25519")
    return key


def load_private_key(pem: bytes) -> Ed25519PrivateKey:
    """An Ed25519 private key from unencrypted PKCS#8 PEM; BundleError(BAD_FORMAT) otherwise."""
    try:
        key = serialization.load_pem_private_key(pem, password=None)
    except (ValueError, TypeError) as exc:
        raise BundleError(BAD_FORMAT, f"not an unencrypted PEM private key ({exc})") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise BundleError(BAD_FORMAT, "the private key is not Ed25519")
    return key


def keygen(prefix: str | os.PathLike) -> tuple[pathlib.Path, pathlib.Path]:
    """Write a new Ed25519 key pair to PREFIX.key (0600, PKCS#8 PEM) and PREFIX.pub; refuses to overwrite."""
    key_path, pub_path = pathlib.Path(f"{prefix}.key"), pathlib.Path(f"{prefix}.pub")
    for p in (key_path, pub_path):
        if p.exists():
            raise FileExistsError(f"{p} already exists; refusing to overwrite a key")
    key = Ed25519PrivateKey.generate()
    priv = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    pub = key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    key_path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(priv)
    pub_path.write_bytes(pub)
    return key_path, pub_path


# ---- sign / verify ------------------------------------------------------------


def sign_bytes(data: bytes, private_key: Ed25519PrivateKey) -> bytes:
    """The bundle `data` with a signature by `private_key` added (replacing that key's earlier one)."""
    doc = _parse(data)
    sources = read_sources(data)  # never sign a bundle that is already tampered
    kid = key_id(private_key.public_key())
    sig = base64.b64encode(private_key.sign(SIGNING_CONTEXT + doc["digest"].encode("ascii"))).decode("ascii")
    others = [s for s in doc["signatures"] if s["keyid"] != kid]
    return encode_bundle(sources, others + [{"alg": "ed25519", "keyid": kid, "sig": sig}])


def sign(bundle_path: str | os.PathLike, key_path: str | os.PathLike) -> str:
    """Sign the bundle file in place with the private key at `key_path`; returns the key id."""
    path = pathlib.Path(bundle_path)
    key = load_private_key(pathlib.Path(key_path).read_bytes())
    signed = sign_bytes(path.read_bytes(), key)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(signed)
    os.replace(tmp, path)  # a reloading server never sees half a bundle
    return key_id(key.public_key())


def verify_bytes(data: bytes, trusted_pub_keys: list[bytes]) -> VerifiedBundle:
    """Check format, digest and signatures; BundleError(reason) unless a trusted key signed the intact bundle."""
    doc = _parse(data)
    sources = read_sources(data)
    if not doc["signatures"]:
        raise BundleError(UNSIGNED, "the bundle carries no signature")
    trusted = {key_id(k): k for k in map(load_public_key, trusted_pub_keys)}
    message = SIGNING_CONTEXT + doc["digest"].encode("ascii")
    good: list[str] = []
    for s in doc["signatures"]:
        key = trusted.get(s["keyid"])
        if key is None or s["alg"] != "ed25519":
            continue
        try:
            sig = base64.b64decode(s["sig"], validate=True)
            # Only the canonical encoding counts: unused padding bits must not let a changed byte verify.
            if base64.b64encode(sig).decode("ascii") != s["sig"]:
                raise ValueError("non-canonical base64")
            key.verify(sig, message)
        except (InvalidSignature, binascii.Error, ValueError):
            raise BundleError(TAMPERED, f"the signature of trusted key {s['keyid']} does not verify") from None
        good.append(s["keyid"])
    if not good:
        ids = ", ".join(s["keyid"] for s in doc["signatures"])
        raise BundleError(UNTRUSTED, f"signed by {ids}; trusted: {', '.join(sorted(trusted)) or 'none'}")
    return VerifiedBundle(tuple(sources), doc["digest"], tuple(good))


def verify(bundle: str | os.PathLike | bytes, pub_paths: list[str | os.PathLike]) -> VerifiedBundle:
    """`verify_bytes` over a bundle file (or its bytes) and public key files."""
    data = bundle if isinstance(bundle, bytes) else pathlib.Path(bundle).read_bytes()
    return verify_bytes(data, [pathlib.Path(p).read_bytes() for p in pub_paths])


def verify_bundle(data: bytes, trusted_pub_keys: list[bytes]) -> list[tuple[str, str]]:
    """The (path, text) sources of a bundle a trusted key signed; raises BundleError otherwise (for `allot serve`)."""
    return list(verify_bytes(data, trusted_pub_keys).sources)


def load_bundle_sources(bundle_path: str | os.PathLike, pub_paths: list[str | os.PathLike]) -> list[tuple[str, str]]:
    """`verify_bundle` over files: what `allot serve --bundle B --trust P…` loads at start and on reload."""
    return list(verify(bundle_path, pub_paths).sources)
