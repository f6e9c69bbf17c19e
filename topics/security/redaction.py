"""aiokafka's connection logger writes every request and response at debug level, the SASL
authentication among them: PLAIN's bytes are the user and the password, OAUTHBEARER's the
token, SCRAM's the proof. `install` puts a filter on that logger that keeps each such line
but puts the name of the message in place of its bytes, at every level, so turning on
debug logging never writes a secret to a log.

The filter sits on the logger itself (`aiokafka.conn`), not on a handler: it then applies
before any handler, whoever set up logging (the CLI, a test, an embedding application)."""

from __future__ import annotations

import logging

CONN_LOGGER = "aiokafka.conn"
"""Where aiokafka logs each request and response (`Request to host:port id: <struct>`)."""

SECRET_BEARING = ("SaslAuthenticate",)
"""Protocol messages that carry credentials: the authenticate request (the secret) and its
response (the server's challenge, which SCRAM's proof answers)."""


def _secret_bearing(arg: object) -> bool:
    # By the class's name and module, not isinstance: the CLI installs the filter before
    # (and without) importing aiokafka, which keeps `groundstream --help` light.
    kind = type(arg)
    return kind.__module__.startswith("aiokafka.protocol") and kind.__name__.startswith(
        SECRET_BEARING
    )


class RedactSasl(logging.Filter):
    """Replaces each SASL authentication message among a record's arguments by its name."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple) and any(map(_secret_bearing, record.args)):
            record.args = tuple(
                f"{type(a).__name__}(<redacted>)" if _secret_bearing(a) else a for a in record.args
            )
        return True


_FILTER = RedactSasl()


def install() -> None:
    """Put the filter on aiokafka's connection logger (once; calling again does nothing)."""
    logger = logging.getLogger(CONN_LOGGER)
    if _FILTER not in logger.filters:
        logger.addFilter(_FILTER)
