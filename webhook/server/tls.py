"""Server TLS: TLS 1.2 minimum, and certificates reloaded from disk without a restart.

The listening socket keeps one *base* context whose servername callback (run by
OpenSSL on every ClientHello, with or without SNI) points each new connection at
the *current* context. A reload builds and fully loads a new context first, then
swaps one reference: handshakes in progress and open connections keep the context
they started with, and a half-written key/cert pair (kubelet or cert-manager
rotating a mounted Secret) is rejected and retried on the next poll.
"""

from __future__ import annotations

import asyncio
import logging
import os
import ssl

from cryptography import x509

log = logging.getLogger("allot.tls")


def _make_context(cert_path: str, key_path: str) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.options |= ssl.OP_NO_COMPRESSION
    ctx.load_cert_chain(cert_path, key_path)
    return ctx


def _fingerprint(paths: tuple[str, ...]) -> tuple:
    # Mounted Secrets swap a symlink (..data), so stat follows links: inode or mtime moves.
    out = []
    for p in paths:
        st = os.stat(p)
        out.append((st.st_ino, st.st_mtime_ns, st.st_size))
    return tuple(out)


def _not_after(cert_path: str) -> float | None:
    try:
        with open(cert_path, "rb") as fh:
            return x509.load_pem_x509_certificate(fh.read()).not_valid_after_utc.timestamp()
    except Exception:  # noqa: BLE001 - only informational
        return None


class ReloadingTLS:
    """An SSLContext for the server whose certificate follows the files on disk."""

    def __init__(self, cert_path: str, key_path: str, *, metrics=None, status: dict | None = None) -> None:
        self.cert_path, self.key_path = str(cert_path), str(key_path)
        self.metrics = metrics
        self.status = status if status is not None else {}
        self.current = _make_context(self.cert_path, self.key_path)  # fail fast at start
        self._seen = _fingerprint((self.cert_path, self.key_path))
        self.base = _make_context(self.cert_path, self.key_path)
        self.base.sni_callback = self._pick
        self.generation = 1
        self._note("ok")

    def _pick(self, ssl_obj, server_name, base_ctx):  # noqa: ARG002 - OpenSSL callback signature
        ctx = self.current
        if ctx is not base_ctx:
            ssl_obj.context = ctx
        return None

    def _note(self, result: str, error: str | None = None) -> None:
        if self.metrics is not None:
            self.metrics.tls_reloads.labels(result).inc()
        self.status.update(
            cert=self.cert_path,
            generation=getattr(self, "generation", 1),
            not_after=_not_after(self.cert_path) if result == "ok" else self.status.get("not_after"),
            last_error=error if result != "ok" else None,
        )

    def reload_if_changed(self) -> bool:
        """Load the files again if they changed; True if a new certificate is now served."""
        try:
            seen = _fingerprint((self.cert_path, self.key_path))
        except OSError as exc:
            self._note("error", f"cannot stat certificate files: {exc}")
            return False
        if seen == self._seen:
            return False
        try:
            ctx = _make_context(self.cert_path, self.key_path)
        except (OSError, ssl.SSLError) as exc:
            # Likely mid-rotation (new cert, old key): keep serving the old pair, retry next poll.
            log.warning("certificate reload failed, keeping the current one: %s", exc)
            self._note("error", str(exc))
            return False
        self._seen = seen
        self.current = ctx
        self.generation += 1
        self._note("ok")
        log.info("serving certificate reloaded (generation %d)", self.generation)
        return True

    async def watch(self, interval: float = 2.0) -> None:
        """Poll the files forever (cancel to stop); stat is cheap and works on every volume type."""
        while True:
            await asyncio.sleep(interval)
            self.reload_if_changed()


def client_context(ca_path: str) -> ssl.SSLContext:
    """A client context that trusts only `ca_path` (for the demo, tests and bench)."""
    ctx = ssl.create_default_context(cafile=str(ca_path))
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    return ctx

