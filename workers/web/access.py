"""Who a dashboard request is, from its credentials: nobody, the dashboard's reader, or a
named reviewer.

* No credential: the public projection of records only (`pipeline.trail.disclosure`).
* `Authorization: Bearer <token>`: a reviewer's own token (GROUNDSTREAM_REVIEWER_TOKENS_FILE,
  `workers.runtime.reviewers`) names that reviewer; the shared GROUNDSTREAM_WEB_TOKEN reads
  everything and may flip the kill switch, but names nobody, so it cannot give a verdict.
* GROUNDSTREAM_REVIEWER_IDENTITY_HEADER, when set: the authenticating proxy in front names
  the signed-in user in that header. Unset, the header is ignored whatever it says: the
  dashboard cannot tell a proxy's header from a client's.

A credential that is offered must be right (401 otherwise), so a page learns its token is
wrong rather than silently reading less. Tokens are compared in constant time.
"""

from __future__ import annotations

import hmac
from collections.abc import Mapping
from dataclasses import dataclass

from pipeline.errors import GroundstreamError
from workers.runtime.reviewers import SETTING as TOKENS_FILE
from workers.runtime.reviewers import ReviewerFile, valid_name
from workers.runtime.settings import Settings

NOTHING_CONFIGURED = (
    "no credential is configured on this dashboard (GROUNDSTREAM_WEB_TOKEN, "
    f"{TOKENS_FILE} or GROUNDSTREAM_REVIEWER_IDENTITY_HEADER): review verdicts and the kill "
    "switch are disabled"
)


@dataclass(frozen=True, slots=True)
class Access:
    """What a request may do: `full` reads whole (sanitized) records and review texts;
    `reviewer` names the person, and only a named person may give a verdict."""

    full: bool
    reviewer: str | None = None
    via: str = "public"
    """How the request proved it: public, dashboard token, reviewer token, proxy."""


PUBLIC = Access(False)


class Refused(GroundstreamError):
    """A request whose credential is wrong, or that may not do what it asks."""

    def __init__(self, status: int, message: str, *, challenge: bool = False) -> None:
        super().__init__(message)
        self.status, self.message, self.challenge = status, message, challenge


class Gate:
    """The dashboard's credentials, read from settings once (the tokens file is re-read
    when it changes)."""

    def __init__(self, settings: Settings) -> None:
        self.token = settings.web_token
        self.header = settings.reviewer_identity_header
        self.file = (
            ReviewerFile(settings.reviewer_tokens_file) if settings.reviewer_tokens_file else None
        )

    @property
    def configured(self) -> bool:
        """Whether any credential can be offered here (else every write is refused)."""
        return bool(self.token or self.header or self.file)

    @property
    def reviewers_configured(self) -> bool:
        """Whether anyone can prove a name here (else no verdict can be given)."""
        return bool(self.header or self.file)

    def who(self, headers: Mapping[str, str]) -> Access:
        """The request's access; raises Refused for a credential that is offered and wrong."""
        if self.header:
            named = headers.get(self.header, "").strip()
            if named:
                if not valid_name(named):
                    raise Refused(403, f"the {self.header} header does not hold a reviewer name")
                return Access(True, named, "proxy")
        if "Authorization" not in headers:
            return PUBLIC
        if not (self.token or self.file):
            if self.header:
                raise Refused(
                    403, f"this dashboard takes no tokens: the proxy's {self.header} names you"
                )
            raise Refused(403, NOTHING_CONFIGURED)
        scheme, _, given = headers["Authorization"].partition(" ")
        given = given.strip()
        if scheme.lower() != "bearer" or not given:
            raise Refused(401, "missing or wrong bearer token", challenge=True)
        reviewer = self.file.current().match(given) if self.file is not None else None
        shared = bool(self.token) and hmac.compare_digest(
            given.encode("utf-8"), self.token.encode("utf-8")
        )
        if reviewer is not None:
            return Access(True, reviewer, "reviewer token")
        if shared:
            return Access(True, None, "dashboard token")
        raise Refused(401, "missing or wrong bearer token", challenge=True)

    def writer(self, headers: Mapping[str, str]) -> Access:
        """Access that may act (the kill switch): any valid credential."""
        if not self.configured:
            raise Refused(403, NOTHING_CONFIGURED)
        access = self.who(headers)
        if not access.full:
            raise Refused(401, "missing or wrong bearer token", challenge=True)
        return access

    def reviewer(self, headers: Mapping[str, str]) -> str:
        """The reviewer a verdict is recorded under: a name a credential proved, never one
        typed into the request."""
        access = self.writer(headers)
        if access.reviewer is None:
            raise Refused(
                403,
                "a verdict needs a reviewer's own credential: the dashboard token reads but "
                f"names nobody (give each reviewer a token: {TOKENS_FILE}, "
                "`groundstream review add-reviewer NAME`)",
            )
        return access.reviewer
