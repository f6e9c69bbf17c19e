"""This process's signing key and trusted keys, from the settings: safe by default.

On a secured broker (SSL or SASL_*) the ladder is a production one, and a process without
its keys refuses to start in one line naming the setting and the command that makes
them: a worker without GROUNDSTREAM_SIGNING_KEY_FILE would conclude unsigned (the writer
refuses that), a writer, review queue or `audit verify` without
GROUNDSTREAM_TRUSTED_KEYS_DIR would trust anyone who may write a topic. On a PLAINTEXT
development broker without keys it says so once and runs unsigned, as before keys
existed; the writer then still refuses a conclusion for a non-terminal topic.

`record_refusal` is how the review queue and `audit verify` trust a decision record: only
when the stage it names signed it.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

from pipeline.bounds.conclusions import TERMINAL_WRITER, may_record
from pipeline.errors import GroundstreamError
from topics.names import Topic
from topics.security.keys import Signer, TrustedKeys, load_signer, load_trusted
from topics.security.signatures import Unverified, verify
from workers.runtime.settings import PREFIX, Settings

log = logging.getLogger("groundstream.signing")

PLAINTEXT = "PLAINTEXT"
GENERATE = "groundstream keys generate --out DIR"
_warned: set[str] = set()


class KeysMissing(GroundstreamError, ValueError):
    """A process on a secured broker without the keys it signs or checks with."""


def secured(settings: Settings) -> bool:
    return settings.kafka_security_protocol != PLAINTEXT


def _unkeyed(settings: Settings, variable: str, what: str) -> None:
    """Refuse on a secured broker; warn once per setting on a development one."""
    if secured(settings):
        raise KeysMissing(
            f"{PREFIX}{variable} is not set: on a {settings.kafka_security_protocol} broker "
            f"{what}; make the keys with `{GENERATE}`"
        )
    if variable not in _warned:
        _warned.add(variable)
        log.warning(
            "%s%s is not set: %s (PLAINTEXT development broker: running unsigned; "
            "`%s` makes the keys)",
            PREFIX,
            variable,
            what,
            GENERATE,
        )


def signer_for(settings: Settings, name: str) -> Signer | None:
    """`name`'s signer from GROUNDSTREAM_SIGNING_KEY_FILE; None unsigned (development)."""
    if not settings.signing_key_file:
        _unkeyed(
            settings,
            "SIGNING_KEY_FILE",
            f"{name} must sign what it concludes and records with its own key ({name}.key)",
        )
        return None
    return load_signer(settings.signing_key_file, name)


def trusted_for(settings: Settings, name: str) -> TrustedKeys | None:
    """The trusted public keys from GROUNDSTREAM_TRUSTED_KEYS_DIR; None unchecked."""
    if not settings.trusted_keys_dir:
        _unkeyed(
            settings,
            "TRUSTED_KEYS_DIR",
            f"{name} must check each stage's signature with the stages' public keys",
        )
        return None
    return load_trusted(settings.trusted_keys_dir)


def record_refusal(
    trusted: TrustedKeys,
    key: bytes | None,
    value: bytes | None,
    headers: Sequence[tuple[str, bytes]],
    record: Mapping[str, object],
) -> str | None:
    """Why a decision record read from `decisions` is not to be trusted — unsigned, an
    unknown key, or signed by another stage than the one it names — or None when the
    stage it names signed it (`pipeline.bounds.conclusions.may_record`)."""
    try:
        signer = verify(trusted, Topic.DECISIONS.value, key, value, headers)
    except Unverified as exc:
        return str(exc)
    if not may_record(signer, record):
        return f"a {record.get('stage')} record signed by {signer}"
    return None


def require_keys(settings: Settings, name: str, *, signs: bool, trusts: bool) -> None:
    """Refuse now, before connecting, on a secured broker without the keys `name` needs;
    a development broker's warning comes when they are loaded (after the broker answered,
    so a one-shot tool that cannot reach it still ends in one line)."""
    if not secured(settings):
        return
    if signs:
        signer_for(settings, name)
    if trusts:
        trusted_for(settings, name)


def stage_keys(settings: Settings, stage: str) -> tuple[Signer | None, TrustedKeys | None]:
    """A ladder worker's keys: its signer, and for the terminal writer the trusted keys
    (it delivers only what a stage with the authority signed). Checked before the worker
    connects, so a missing key is the one line a start-up ends with."""
    signer = signer_for(settings, stage)
    trusted = trusted_for(settings, stage) if stage == TERMINAL_WRITER else None
    return signer, trusted
