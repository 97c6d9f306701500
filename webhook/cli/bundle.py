"""`allot bundle keygen|sign|verify`: Ed25519 keys and signatures for policy bundles.

verify exits 0 only for an intact bundle signed by one of the given keys, 1 with the
reason otherwise (unsigned, tampered, signed by an untrusted key, bad format), 2 on usage.
"""

from __future__ import annotations

import os
import pathlib
import sys

from webhook.errors import UsageError


def add_arguments(parser) -> None:
    """Sub-commands keygen PREFIX, sign --key KEY BUNDLE, verify --pub PUB… BUNDLE."""
    subs = parser.add_subparsers(dest="action", metavar="ACTION", parser_class=type(parser))
    keygen = subs.add_parser("keygen", help="write PREFIX.key (private, 0600) and PREFIX.pub")
    keygen.add_argument("prefix", metavar="PREFIX")
    sign = subs.add_parser("sign", help="sign a bundle in place")
    sign.add_argument("--key", required=True, metavar="PREFIX.key")
    sign.add_argument("bundle", metavar="BUNDLE")
    verify = subs.add_parser("verify", help="exit 0 only for an intact bundle signed by a given key")
    verify.add_argument("--pub", required=True, action="append", metavar="PREFIX.pub", help="trusted key (repeatable)")
    verify.add_argument("bundle", metavar="BUNDLE")


def _read(path: str, what: str) -> bytes:
    try:
        return pathlib.Path(path).read_bytes()
    except OSError as exc:
        raise UsageError(f"{what} {path}: cannot read ({exc.strerror or exc})") from None


def _keygen(args) -> int:
    from webhook import bundle

    if args.prefix.endswith(("/", os.sep)) or pathlib.Path(args.prefix).is_dir():  # would write hidden ".key"/".pub"
        raise UsageError(f"{args.prefix}: is a directory; give a prefix such as {os.path.join(args.prefix, 'allot')}")
    try:
        key_path, pub_path = bundle.keygen(args.prefix)
    except FileExistsError as exc:
        print(f"allot bundle keygen: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        raise UsageError(f"{args.prefix}: cannot write ({exc.strerror or exc})") from None
    pub = bundle.load_public_key(pub_path.read_bytes())
    print(f"wrote {key_path} (keep secret) and {pub_path}; key id {bundle.key_id(pub)}")
    return 0


def _sign(args) -> int:
    from webhook import bundle

    try:
        key = bundle.load_private_key(_read(args.key, "--key"))
    except bundle.BundleError as exc:
        raise UsageError(f"--key {args.key}: {exc.detail or exc}") from None
    _read(args.bundle, "bundle")
    try:
        kid = bundle.sign(args.bundle, args.key)  # atomic replace: a reloading server never sees half a file
    except bundle.BundleError as exc:
        print(f"allot bundle sign: {args.bundle}: refusing to sign: {exc}", file=sys.stderr)
        return 1
    print(f"signed {args.bundle} with key {kid}")
    return 0


def _verify(args) -> int:
    from webhook import bundle

    pubs = [_read(p, "--pub") for p in args.pub]
    for path, pem in zip(args.pub, pubs):
        try:
            bundle.load_public_key(pem)
        except bundle.BundleError as exc:
            raise UsageError(f"--pub {path}: {exc.detail or exc}") from None
    data = _read(args.bundle, "bundle")
    try:
        verified = bundle.verify_bytes(data, pubs)
    except bundle.BundleError as exc:
        print(f"allot bundle verify: {args.bundle}: {exc}", file=sys.stderr)
        return 1
    files = len(verified.sources)
    print(f"ok: {args.bundle}: {files} source file{'s' * (files != 1)}, {verified.digest}, signed by {', '.join(verified.key_ids)}")
    return 0


def run(args) -> int:
    """Dispatch to keygen, sign or verify."""
    actions = {"keygen": _keygen, "sign": _sign, "verify": _verify}
    if args.action not in actions:
        raise UsageError("expected an action: keygen, sign or verify")
    return actions[args.action](args)
