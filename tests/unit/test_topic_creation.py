"""`topics create` against a broker that refuses: the broker's per-topic errors come back
in the CreateTopics response (aiokafka does not raise them), and a refused creation must
fail the command, not be printed as `created`. The Kubernetes init containers rely on it:
run as a stage's principal, which may not create topics, they fail and are retried until
the topics Job has made them."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from aiokafka.errors import InvalidReplicationFactorError, TopicAuthorizationFailedError

from topics import admin
from topics.clients import KafkaConnection
from topics.names import TOPIC_SPECS


class Refusing:
    """An admin client whose broker answers CreateTopics with `code` for every topic."""

    def __init__(self, code: int) -> None:
        self.code = code

    async def start(self) -> None:
        return None

    async def close(self) -> None:
        return None

    async def list_topics(self) -> list[str]:
        return []

    async def create_topics(self, topics: list[Any]) -> SimpleNamespace:
        return SimpleNamespace(topic_errors=[(t.name, self.code, None) for t in topics])


async def create(monkeypatch: pytest.MonkeyPatch, code: int) -> dict[str, str]:
    monkeypatch.setattr(admin.clients, "admin", lambda *_a, **_k: Refusing(code))
    return await admin.create_topics(KafkaConnection("127.0.0.1:1"), "p.", 2, 1)


async def test_a_refused_creation_names_the_topics(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(TopicAuthorizationFailedError) as raised:
        await create(monkeypatch, TopicAuthorizationFailedError.errno)
    assert {spec.topic.full("p.") for spec in TOPIC_SPECS} <= set(raised.value.args[0])


async def test_another_error_fails_the_command(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(InvalidReplicationFactorError, match=r"creating p\."):
        await create(monkeypatch, InvalidReplicationFactorError.errno)


async def test_a_topic_made_meanwhile_by_another_creator_is_fine(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(admin, "VISIBLE_TIMEOUT_S", 0.0)  # the fake never lists it
    report = await create(monkeypatch, admin.TOPIC_ALREADY_EXISTS)
    assert set(report.values()) == {"created"}
