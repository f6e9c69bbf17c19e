"""Ed25519 signatures on the messages a stage vouches for: its conclusions (`concluded`)
and its decision records (`decisions`).

A signature travels in two Kafka headers, `gs-signer` (the stage) and `gs-signature`
(base64), never in the value: a decision record's bytes, and with them its hash chain,
stay exactly what they were, and a reader that knows nothing of signatures reads the same
record. What is signed is everything a reader acts on: the signer's name, the logical
topic (a record signed for `decisions` cannot be replayed onto `concluded`), the message
key, the value's SHA-256, and every other header in order (a conclusion's terminal
topic, candidate id and outcome record are headers).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from collections.abc import Mapping, Sequence

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from pipeline.errors import GroundstreamError
from topics.codec import dumps
from topics.security.keys import Signer, TrustedKeys

SIGNER_HEADER = "gs-signer"
SIGNATURE_HEADER = "gs-signature"
SIGNATURE_HEADERS = frozenset({SIGNER_HEADER, SIGNATURE_HEADER})

Headers = Sequence[tuple[str, bytes]]


def signed_bytes(
    signer: str, topic: str, key: bytes | None, value: bytes | None, headers: Headers
) -> bytes:
    """What a signature covers (see the module docstring)."""
    return dumps(
        [
            signer,
            topic,
            None if key is None else key.hex(),
            hashlib.sha256(value or b"").hexdigest(),
            [[k, v.hex()] for k, v in headers if k not in SIGNATURE_HEADERS],
        ]
    )


def sign(
    signer: Signer, topic: str, key: bytes | None, value: bytes | None, headers: Headers = ()
) -> tuple[tuple[str, bytes], ...]:
    """`headers` (any earlier signature dropped) plus `signer`'s signature over them."""
    kept = tuple(h for h in headers if h[0] not in SIGNATURE_HEADERS)
    data = signed_bytes(signer.name, topic, key, value, kept)
    mark = base64.b64encode(signer.sign(data))
    return (*kept, (SIGNER_HEADER, signer.name.encode()), (SIGNATURE_HEADER, mark))


class Unverified(GroundstreamError, ValueError):
    """A message whose signature does not hold; the message is the one-line reason."""


def verify(
    trusted: TrustedKeys, topic: str, key: bytes | None, value: bytes | None, headers: Headers
) -> str:
    """The stage that signed the message, when one of that stage's trusted keys verifies
    the signature; Unverified (unsigned, unknown signer, bad signature) otherwise. A
    signature the keys held refuse is checked once more if the trusted folder, read
    again, holds other keys (a rollover's new key, added while this process ran)."""
    try:
        return _verified(trusted.current(), topic, key, value, headers)
    except Unverified:
        if not trusted.reread_after_failure():
            raise
    return _verified(trusted.keys, topic, key, value, headers)


def _verified(
    trusted: Mapping[str, tuple[Ed25519PublicKey, ...]],
    topic: str,
    key: bytes | None,
    value: bytes | None,
    headers: Headers,
) -> str:
    signers = [v for k, v in headers if k == SIGNER_HEADER]
    marks = [v for k, v in headers if k == SIGNATURE_HEADER]
    if not signers and not marks:
        raise Unverified("unsigned")
    if len(signers) != 1 or len(marks) != 1:
        raise Unverified("more than one signature")
    name = signers[0].decode("utf-8", "replace")
    keys = trusted.get(name, ())
    if not keys:
        raise Unverified(f"signed by {name!r}, whose key is not trusted")
    try:
        mark = base64.b64decode(marks[0], validate=True)
    except (binascii.Error, ValueError):
        raise Unverified("signature is not base64") from None
    data = signed_bytes(name, topic, key, value, headers)
    for public in keys:
        try:
            public.verify(mark, data)
        except InvalidSignature:
            continue
        return name
    raise Unverified(f"signature does not verify with {name}'s trusted keys")
