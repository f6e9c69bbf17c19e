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
from topics.names import TOPIC_SPECS, Topic


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

    async def describe_configs(self, resources: list[Any]) -> list[SimpleNamespace]:
        """Each topic as `topics create` makes it (the settings asked for, as asked)."""
        self.described = [r.name for r in resources]
        entries = [(r.name, [(k, v) for k, v in _kept(r.name).items()]) for r in resources]
        return [SimpleNamespace(resources=[(0, None, 2, n, e) for n, e in entries])]


def _kept(name: str) -> dict[str, str]:
    (spec,) = [s for s in TOPIC_SPECS if s.topic.full("p.") == name]
    return spec.kept_configs()


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


async def test_a_topic_made_meanwhile_is_checked_as_one_that_existed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Another creator's topic has its settings, not ours: they are read like those of a
    topic listed before."""
    monkeypatch.setattr(admin, "VISIBLE_TIMEOUT_S", 0.0)
    raced = Refusing(admin.TOPIC_ALREADY_EXISTS)
    monkeypatch.setattr(admin.clients, "admin", lambda *_a, **_k: raced)
    await admin.create_topics(KafkaConnection("127.0.0.1:1"), "p.", 2, 1)
    assert sorted(raced.described) == sorted(spec.topic.full("p.") for spec in TOPIC_SPECS)


class Recording(Refusing):
    """An admin client that creates whatever it is asked to, and keeps what it was asked."""

    def __init__(self) -> None:
        super().__init__(0)
        self.asked: list[Any] = []

    async def create_topics(self, topics: list[Any]) -> SimpleNamespace:
        self.asked += topics
        return await super().create_topics(topics)

    async def list_topics(self) -> list[str]:
        return [t.name for t in self.asked]


@pytest.mark.parametrize(("replication", "insync"), [(1, None), (2, None), (3, "2"), (5, "2")])
async def test_min_insync_replicas_is_two_from_three_replicas(
    monkeypatch: pytest.MonkeyPatch, replication: int, insync: str | None
) -> None:
    """acks=all survives one broker lost with 2 in sync of 3; with fewer replicas the
    broker's default stays (2 of 2 would stop every write while one broker is down)."""
    recording = Recording()
    monkeypatch.setattr(admin.clients, "admin", lambda *_a, **_k: recording)
    await admin.create_topics(KafkaConnection("127.0.0.1:1"), "p.", 2, replication, extra=["src"])
    assert len(recording.asked) == len(TOPIC_SPECS) + 1
    for topic in recording.asked:
        assert topic.topic_configs.get("min.insync.replicas") == insync, topic.name
    specs = {spec.topic.full("p."): spec for spec in TOPIC_SPECS}
    for topic in recording.asked[: len(TOPIC_SPECS)]:  # the spec's own configs are kept
        assert specs[topic.name].kafka_configs().items() <= topic.topic_configs.items()


def test_the_kept_settings_of_each_topic() -> None:
    kept = {spec.topic: spec.kept_configs() for spec in TOPIC_SPECS}
    assert kept[Topic.OUTCOMES] == kept[Topic.SESSIONS] == {"cleanup.policy": "compact"}
    assert kept[Topic.JUDGE_LEDGER] == kept[Topic.AUDIT_HEADS] == {"cleanup.policy": "compact"}
    assert kept[Topic.AUDIT] == {"cleanup.policy": "delete", "retention.ms": "-1"}
    assert kept[Topic.DECISIONS] == kept[Topic.CANDIDATES] == {"cleanup.policy": "delete"}


def test_a_mismatch_names_the_topic_and_the_setting() -> None:
    kept = {"cleanup.policy": "delete", "retention.ms": "-1"}
    ok = {"cleanup.policy": "delete", "retention.ms": "-1", "segment.ms": "1"}
    assert admin.config_mismatch("p.audit", kept, ok) is None
    line = admin.config_mismatch("p.audit", kept, {**ok, "retention.ms": "86400000"})
    assert line is not None and line.startswith(
        "topic p.audit exists with retention.ms=86400000, where groundstream needs retention.ms=-1"
    )
