"""Envelope signatures: inner topics are not an open door.

Anyone who can write to `rules` could otherwise hand it an envelope carrying a human
verdict of accept, or any geometry score. With a stage key configured
(`GROUNDSTREAM_STAGE_KEY`, shared by the stage workers and nothing else), every envelope
a stage writes carries an HMAC-SHA256 in the `gs-hmac` header, computed over the
logical topic name and the value; a stage reading an inner topic dead-letters an envelope
whose signature is missing or wrong. Binding the topic name means an envelope signed for
`scored` cannot be replayed onto `rules`. Without a key nothing is signed or checked
(development, and topics already closed by ACLs: see deploy/README.md).

This shared key guards the inner topics only. What reaches a terminal topic, and which
decision records count, is signed per stage with keys no other stage holds
(`topics.security`): a stage that holds this key can forge an envelope, but not a
conclusion or a record in another stage's name.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Sequence

SIGNATURE_HEADER = "gs-hmac"


def signature(key: bytes, topic: str, value: bytes) -> bytes:
    """Hex HMAC-SHA256 of `value` as written to logical topic `topic`."""
    return hmac.new(key, topic.encode("utf-8") + b"\n" + value, hashlib.sha256).hexdigest().encode()


def signed(
    key: bytes | None, topic: str, value: bytes, headers: Sequence[tuple[str, bytes]] = ()
) -> tuple[tuple[str, bytes], ...]:
    """`headers` plus the signature header (replacing any), or unchanged without a key."""
    kept = tuple(h for h in headers if h[0] != SIGNATURE_HEADER)
    if key is None:
        return kept
    return (*kept, (SIGNATURE_HEADER, signature(key, topic, value)))


def verify(
    key: bytes, topic: str, value: bytes | None, headers: Sequence[tuple[str, bytes]]
) -> str | None:
    """None when the envelope's signature verifies, else the reason it does not."""
    found = [v for k, v in headers if k == SIGNATURE_HEADER]
    if not found:
        return "unsigned envelope on an inner topic"
    if len(found) > 1:
        return "more than one envelope signature"
    if value is None or not hmac.compare_digest(found[0], signature(key, topic, value)):
        return "envelope signature does not verify"
    return None
