"""A client key that is encrypted must come with its password: without one, OpenSSL asks
for it on the terminal, and a worker has none (it hangs, or dies with a bare error).

`encrypted_pem` tells such a key before it is loaded (settings refuse it at start-up);
`no_password` is what the client factory hands OpenSSL instead of nothing, so a key that
still turns out encrypted is refused in one line rather than prompted for."""

from __future__ import annotations

from pathlib import Path

from pipeline.errors import GroundstreamError

KEY_PASSWORD = "GROUNDSTREAM_KAFKA_SSL_KEY_PASSWORD"

_MARKERS = ("-----BEGIN ENCRYPTED PRIVATE KEY-----", "Proc-Type: 4,ENCRYPTED")
"""PKCS#8's encrypted key, and the legacy (OpenSSL 'traditional') encrypted PEM header."""


class KeyPasswordMissing(GroundstreamError, ValueError):
    """An encrypted client key with no GROUNDSTREAM_KAFKA_SSL_KEY_PASSWORD."""


def encrypted_pem(path: str | Path) -> bool:
    """Whether the PEM file at `path` holds an encrypted private key (read, never loaded)."""
    text = Path(path).read_text(encoding="ascii", errors="replace")
    return any(marker in text for marker in _MARKERS)


def refusal(path: str | Path) -> str:
    """The one line for an encrypted key without its password."""
    return f"the client key {path} is encrypted: set {KEY_PASSWORD} to its password"


def no_password(path: str | Path):
    """A password callback for `load_cert_chain` that refuses instead of prompting: OpenSSL
    calls it only for an encrypted key."""

    def ask() -> str:
        raise KeyPasswordMissing(refusal(path))

    return ask
