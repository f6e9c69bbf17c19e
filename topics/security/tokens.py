"""SASL/OAUTHBEARER's token from a file that a sidecar or a projected service-account token
keeps fresh. Such a file is empty, or briefly gone, while it is rewritten: an empty token
sent then is a failed authentication, so the last good token is kept (and that said once)
until the file holds one again; with none read yet, one line says what is wrong."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

from aiokafka.abc import AbstractTokenProvider

from pipeline.errors import GroundstreamError

TOKEN_FILE = "GROUNDSTREAM_KAFKA_OAUTH_TOKEN_FILE"

log = logging.getLogger("groundstream.kafka")


class TokenFileError(GroundstreamError, ValueError):
    """No token to send: the file is empty or unreadable and none was read before."""


class FileTokenProvider(AbstractTokenProvider):
    """The token, read from the file each time the client asks: a new token is used from
    the next (re)authentication on. The file is read again only when its mtime (or size)
    changed; surrounding whitespace is stripped. An empty or unreadable file keeps the last
    good token (one warning per such spell); with none yet, `TokenFileError`."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._seen: tuple[int, int] | None = None
        self._token = ""
        self._warned = False

    def read(self) -> str:
        try:
            stat = self.path.stat()
            seen = (stat.st_mtime_ns, stat.st_size)
            if seen == self._seen:
                return self._token
            text = self.path.read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as exc:
            return self._keep(
                f"unreadable ({getattr(exc, 'strerror', None) or type(exc).__name__})"
            )
        if not text:  # not remembered as seen: read again next time, the writer may be done
            return self._keep("empty")
        self._token, self._seen, self._warned = text, seen, False
        return text

    def _keep(self, why: str) -> str:
        if not self._token:
            raise TokenFileError(f"{TOKEN_FILE} {self.path} is {why}: no OAuth token to send")
        if not self._warned:
            self._warned = True
            log.warning(
                "%s %s is %s: keeping the last good token until it holds one again",
                TOKEN_FILE,
                self.path,
                why,
            )
        return self._token

    async def token(self) -> str:
        return await asyncio.to_thread(self.read)

    def __repr__(self) -> str:
        return f"FileTokenProvider({str(self.path)!r})"
