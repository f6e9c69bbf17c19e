"""Reviewers' own credentials: the tokens file (GROUNDSTREAM_REVIEWER_TOKENS_FILE).

One line a reviewer, `name:<sha256 of the token, hex>`; blank lines and `#` comments are
skipped. The file holds digests, never tokens, so reading it (a backup, a config map)
gives nobody a reviewer's token. The tokens are random (`new_token`, 256 bits), so an
unsalted SHA-256 of one cannot be reversed by guessing; a person-chosen password would
need a slow, salted hash instead, which is why the file takes only tokens we made.

A request's token is hashed and compared with every line's digest in constant time
(`hmac.compare_digest`), all lines every time, so the answer's timing says nothing about
which line, or how much of one, matched. The name of the matching line is who decided:
it becomes `evidence.reviewer` on the verdict's record.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import re
import secrets
from dataclasses import dataclass
from pathlib import Path

from pipeline.errors import GroundstreamError

log = logging.getLogger("groundstream.reviewers")

SETTING = "GROUNDSTREAM_REVIEWER_TOKENS_FILE"
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@+-]{0,99}$")
"""A reviewer's name: a user name or an e-mail address, no spaces, at most 100 characters."""
_DIGEST = re.compile(r"^[0-9a-f]{64}$")


class ReviewerFileError(GroundstreamError, ValueError):
    """The tokens file cannot be read or has a bad line; the message names the setting."""


def token_digest(token: str) -> str:
    """What the file stores for `token`: its SHA-256, hex."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def new_token() -> str:
    """A fresh reviewer token: 256 random bits, URL-safe (fits an Authorization header)."""
    return secrets.token_urlsafe(32)


def valid_name(name: str) -> bool:
    return bool(NAME.match(name))


@dataclass(frozen=True, slots=True)
class Reviewers:
    """The reviewers a tokens file names, each with their token's digest."""

    digests: tuple[tuple[str, bytes], ...] = ()

    def names(self) -> list[str]:
        return [name for name, _ in self.digests]

    def match(self, token: str) -> str | None:
        """The reviewer whose token this is, or None; constant time over the whole file."""
        given = token_digest(token).encode("ascii")
        found: str | None = None
        for name, digest in self.digests:
            if hmac.compare_digest(given, digest) and found is None:
                found = name
        return found


def parse_reviewers(text: str, source: str = SETTING) -> Reviewers:
    """The reviewers of a tokens file's text; a bad line raises naming `source` and the line."""
    seen: dict[str, str] = {}
    entries: list[tuple[str, bytes]] = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        name, sep, digest = line.rpartition(":")
        where = f"{source} line {number}"
        if not sep or not valid_name(name):
            raise ReviewerFileError(
                f"{where}: expected `name:<sha256 of the token>` with a name of letters, digits"
                " and . _ @ + - (at most 100)"
            )
        digest = digest.lower()
        if not _DIGEST.match(digest):
            raise ReviewerFileError(
                f"{where}: {name}'s entry is not a SHA-256 digest (64 hex characters); the file"
                " holds the token's digest, not the token (`groundstream review add-reviewer`)"
            )
        if name in seen:
            raise ReviewerFileError(f"{where}: {name} is named twice")
        if digest in seen.values():
            raise ReviewerFileError(f"{where}: {name} has the same token as another reviewer")
        seen[name] = digest
        entries.append((name, digest.encode("ascii")))
    return Reviewers(tuple(entries))


def load_reviewers(path: str | Path) -> Reviewers:
    """The reviewers of the file at `path` (`parse_reviewers`); unreadable: one line."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ReviewerFileError(f"{SETTING}={path}: not UTF-8 text") from None
    except OSError as exc:
        raise ReviewerFileError(f"{SETTING}={path}: cannot be read ({exc.strerror})") from None
    return parse_reviewers(text, f"{SETTING}={path}")


class ReviewerFile:
    """The tokens file, read again when it changes: a reviewer added or removed counts from
    the next request, without a restart. A file broken by an edit (or gone) admits nobody
    until it is fixed, and `problem` says why: keeping the last good reviewers would keep
    a token valid that the edit meant to revoke."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.problem: str | None = None
        self._seen = self._read()
        self.reviewers = load_reviewers(self.path)  # at start-up a bad file is fatal

    def _read(self) -> bytes | None:
        # The bytes, not the mtime: an edit within the clock's tick keeps the mtime.
        try:
            return self.path.read_bytes()
        except OSError:
            return None

    def current(self) -> Reviewers:
        seen = self._read()
        if seen != self._seen:
            self._seen = seen
            try:
                if seen is None:
                    raise ReviewerFileError(f"{SETTING}={self.path}: cannot be read")
                try:
                    text = seen.decode("utf-8")
                except UnicodeDecodeError:
                    raise ReviewerFileError(f"{SETTING}={self.path}: not UTF-8 text") from None
                self.reviewers = parse_reviewers(text, f"{SETTING}={self.path}")
                self.problem = None
            except ReviewerFileError as exc:
                self.reviewers, self.problem = Reviewers(), str(exc)
                log.warning("no reviewer is admitted until the file is fixed: %s", exc)
        return self.reviewers


def add_reviewer(path: str | Path, name: str) -> str:
    """Append a new reviewer to the tokens file (made if missing); returns their token,
    which is shown once and stored nowhere. Refuses a bad or taken name."""
    if not valid_name(name):
        raise ReviewerFileError(
            f"reviewer name {name!r}: letters, digits and . _ @ + - only, at most 100"
        )
    path = Path(path)
    if path.exists() and name in load_reviewers(path).names():
        raise ReviewerFileError(f"{path}: {name} is already a reviewer (remove the line first)")
    token = new_token()
    prefix = "" if not path.exists() or path.read_bytes().endswith(b"\n") else "\n"
    with path.open("a", encoding="utf-8") as out:
        out.write(f"{prefix}{name}:{token_digest(token)}\n")
    path.chmod(0o600)  # the digests are not secrets, but who may add reviewers is
    return token
