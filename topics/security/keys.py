"""Per-stage Ed25519 keys: made, written, read.

Each process that signs (a stage worker, the terminal writer, `attach`, and `review` for
the CLI and the dashboard) holds only its own private key
(GROUNDSTREAM_SIGNING_KEY_FILE, PEM PKCS#8). The processes that check (the terminal
writer, the review queue, `audit verify`) hold a folder of public keys
(GROUNDSTREAM_TRUSTED_KEYS_DIR): `<stage>.pub`, and during a rollover more files
`<stage>.<anything>.pub`. Every key found for a stage is accepted, so a new key is
trusted before the stage signs with it, and the old one is refused once its file is gone.
The folder is read again while the process runs (every REREAD_S, and at most every
RETRY_S when a signature does not verify with the keys held), so a rollover needs no
restart: a mounted ConfigMap's files change under a running pod.

Asymmetric on purpose: with one shared secret, whoever holds any stage's copy can sign as
every stage; here a stage that is taken over can sign only as itself.
"""

from __future__ import annotations

import base64
import logging
import os
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from pipeline.errors import GroundstreamError

PRIVATE_SUFFIX = ".key"
PUBLIC_SUFFIX = ".pub"
TRUSTED_KEYS_CONFIGMAP = "groundstream-trusted-keys"
SIGNING_KEY = "signing.key"
REREAD_S = 30.0
"""How old the trusted keys may grow before the folder is read again (a key added is
trusted, a key deleted refused, within this long of the change reaching the folder)."""
RETRY_S = 1.0
"""How often at most the folder is read again because a signature did not verify with
the keys held (its key may have just been added): a flood of forged messages costs one
small folder read a second."""

log = logging.getLogger(__name__)


def signing_secret(stage: str) -> str:
    """The Kubernetes Secret holding `stage`'s private key, apart from its Kafka
    credentials so that applying new keys never replaces them."""
    return f"groundstream-signing-{stage}"


class KeyFileError(GroundstreamError, ValueError):
    """A key file or folder that cannot be used; the message names it."""


@dataclass(frozen=True, slots=True)
class Signer:
    """This process's signing identity: the stage it signs as, and its private key."""

    name: str
    key: Ed25519PrivateKey

    def sign(self, data: bytes) -> bytes:
        return self.key.sign(data)


@dataclass(slots=True)
class TrustedKeys:
    """Every public key trusted for each stage (more than one during a rollover). Read
    from a folder (`where`), they are read from it again as the module says; built from
    keys alone (`where` empty), they stay as given."""

    keys: Mapping[str, tuple[Ed25519PublicKey, ...]]
    where: str = ""
    clock: Callable[[], float] = time.monotonic
    read_at: float = field(init=False)

    def __post_init__(self) -> None:
        self.read_at = self.clock()

    def current(self) -> Mapping[str, tuple[Ed25519PublicKey, ...]]:
        """The keys, read again from the folder first when REREAD_S has passed."""
        self._reread(REREAD_S)
        return self.keys

    def reread_after_failure(self) -> bool:
        """Read the folder again (at most every RETRY_S); True when the keys changed."""
        return self._reread(RETRY_S)

    def _reread(self, after_s: float) -> bool:
        now = self.clock()
        if not self.where or now - self.read_at < after_s:
            return False
        self.read_at = now
        try:
            fresh = load_trusted(self.where, self.clock).keys
        except KeyFileError as exc:
            log.warning("%s; the trusted keys read before are kept", exc)
            return False
        if _raw(fresh) == _raw(self.keys):
            return False
        self.keys = fresh
        log.warning(
            "trusted keys read again from %s: %s",
            self.where,
            ", ".join(f"{stage} ({len(k)})" for stage, k in sorted(fresh.items())),
        )
        return True


def _raw(keys: Mapping[str, tuple[Ed25519PublicKey, ...]]) -> dict[str, set[bytes]]:
    raw = serialization.Encoding.Raw, serialization.PublicFormat.Raw
    return {stage: {k.public_bytes(*raw) for k in ks} for stage, ks in keys.items()}


def private_pem(key: Ed25519PrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def public_pem(key: Ed25519PublicKey) -> bytes:
    return key.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )


def generate(stages: Iterable[str]) -> dict[str, Ed25519PrivateKey]:
    """A fresh key pair per stage."""
    return {stage: Ed25519PrivateKey.generate() for stage in stages}


def write_pairs(out: Path, pairs: Mapping[str, Ed25519PrivateKey]) -> list[Path]:
    """`out/<stage>.key` (mode 0600, never readable by others, even for an instant) and
    `out/<stage>.pub` for each pair; refuses to overwrite a private key."""
    out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    for stage, key in pairs.items():
        private = out / f"{stage}{PRIVATE_SUFFIX}"
        try:
            fd = os.open(private, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            raise KeyFileError(f"{private} exists: not overwritten (move it away first)") from None
        with os.fdopen(fd, "wb") as f:
            f.write(private_pem(key))
        public = out / f"{stage}{PUBLIC_SUFFIX}"
        public.write_bytes(public_pem(key.public_key()))
        written += [private, public]
    return written


def k8s_manifests(pairs: Mapping[str, Ed25519PrivateKey], namespace: str | None = None) -> str:
    """Kubernetes manifests: a Secret `groundstream-signing-<stage>` per stage holding its
    private key as `signing.key` (mount it, set GROUNDSTREAM_SIGNING_KEY_FILE to it), and
    the ConfigMap `groundstream-trusted-keys` holding every public key as `<stage>.pub`
    (not secret; mount it as the folder GROUNDSTREAM_TRUSTED_KEYS_DIR names)."""
    docs = [
        _document("Secret", signing_secret(stage), {SIGNING_KEY: private_pem(key)}, namespace)
        for stage, key in pairs.items()
    ]
    public = {f"{s}{PUBLIC_SUFFIX}": public_pem(k.public_key()) for s, k in pairs.items()}
    docs.append(_document("ConfigMap", TRUSTED_KEYS_CONFIGMAP, public, namespace))
    return "---\n".join(docs)


def _document(kind: str, name: str, data: Mapping[str, bytes], namespace: str | None) -> str:
    """A Secret (base64 `data`, type Opaque) or a ConfigMap (the PEM text as a block)."""
    lines = ["apiVersion: v1", f"kind: {kind}", "metadata:", f"  name: {name}"]
    if namespace:
        lines.append(f"  namespace: {namespace}")
    lines += ["  labels:", "    app.kubernetes.io/part-of: groundstream"]
    if kind == "Secret":
        lines += ["type: Opaque", "data:"]
        lines += [f"  {k}: {base64.b64encode(v).decode()}" for k, v in sorted(data.items())]
    else:
        lines.append("data:")
        for k, v in sorted(data.items()):
            lines.append(f"  {k}: |")
            lines += [f"    {line}" for line in v.decode().splitlines()]
    return "\n".join(lines) + "\n"


def load_signer(path: str | Path, name: str) -> Signer:
    """The private key in `path` (PEM) signing as `name`; KeyFileError naming the file."""
    try:
        key = serialization.load_pem_private_key(Path(path).read_bytes(), password=None)
    except OSError as exc:
        raise KeyFileError(f"cannot read the signing key {path}: {exc.strerror}") from None
    except (ValueError, TypeError, UnsupportedAlgorithm):
        raise KeyFileError(f"{path} is not an unencrypted PEM private key") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise KeyFileError(f"{path} is not an Ed25519 key (`groundstream keys generate`)")
    return Signer(name, key)


def stage_of(filename: str) -> str:
    """The stage a public key file is for: `rules.pub` and `rules.2026-12.pub` → rules."""
    return filename.split(".", 1)[0]


def load_trusted(folder: str | Path, clock: Callable[[], float] = time.monotonic) -> TrustedKeys:
    """Every `*.pub` in `folder`, by stage; KeyFileError for an unreadable folder, a
    folder without keys, or a file that is not an Ed25519 public key."""
    root = Path(folder)
    try:
        files = sorted(p for p in root.iterdir() if p.name.endswith(PUBLIC_SUFFIX))
    except OSError as exc:
        raise KeyFileError(f"cannot read the trusted keys folder {root}: {exc.strerror}") from None
    found: dict[str, list[Ed25519PublicKey]] = {}
    for path in files:
        try:
            key = serialization.load_pem_public_key(path.read_bytes())
        except (OSError, ValueError, UnsupportedAlgorithm):
            raise KeyFileError(f"{path} is not a PEM public key") from None
        if not isinstance(key, Ed25519PublicKey):
            raise KeyFileError(f"{path} is not an Ed25519 public key")
        found.setdefault(stage_of(path.name), []).append(key)
    if not found:
        raise KeyFileError(f"no public keys (*{PUBLIC_SUFFIX}) in {root}")
    keys = MappingProxyType({stage: tuple(k) for stage, k in found.items()})
    return TrustedKeys(keys, str(root), clock)
