"""Topic creation: every topic of the ladder, the internal ones too (`concluded`, the
compacted `outcomes` ledger and `sessions` table), is created here, from `TOPIC_SPECS` and
the settings' partitions and replication: no worker creates a topic of its own.

A topic made beforehand by someone else is not left as it is blindly: the settings that
keep its records (`TopicSpec.kept_configs`: compaction of the tables, none of the streams,
the audit chain's retention) are read (DescribeConfigs) and a topic without them is
refused in one line naming the topic and the setting, before anything is created."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.errors import (
    TopicAlreadyExistsError,
    TopicAuthorizationFailedError,
    UnknownTopicOrPartitionError,
    for_code,
)
from aiokafka.protocol.metadata import MetadataRequest

from pipeline.errors import GroundstreamError
from topics import clients
from topics.clients import KafkaConnection
from topics.names import TOPIC_SPECS, TopicSpec

TOPIC_AUTHORIZATION_FAILED = TopicAuthorizationFailedError.errno
TOPIC_ALREADY_EXISTS = TopicAlreadyExistsError.errno
UNKNOWN_TOPIC = UnknownTopicOrPartitionError.errno

VISIBLE_TIMEOUT_S = 30.0
"""How long `create_topics` waits for the broker's metadata to list what it created."""
MIN_INSYNC_FROM = 3
"""From this replication factor on, a topic is created with min.insync.replicas=2, so an
acks=all write survives one broker lost; below it the broker's default holds (with one
or two replicas, 2 in sync would stop every write while one broker is down)."""


class TopicConfigMismatch(GroundstreamError, ValueError):
    """A topic that exists has a setting under which it loses records the ladder keeps."""


def created_configs(spec_configs: dict[str, str], replication: int) -> dict[str, str]:
    """The configs a topic is created with: its spec's, and min.insync.replicas."""
    if replication >= MIN_INSYNC_FROM:
        return spec_configs | {"min.insync.replicas": "2"}
    return spec_configs


def config_mismatch(name: str, kept: dict[str, str], actual: dict[str, str]) -> str | None:
    """The one line refusing topic `name` whose `actual` settings lack one of `kept`
    (`TopicSpec.kept_configs`), or None when it has them all."""
    for key, want in kept.items():
        have = actual.get(key)
        if have != want:
            return (
                f"topic {name} exists with {key}={have}, where groundstream needs {key}={want}"
                " or it loses records; set it (kafka-configs.sh --alter --entity-type topics"
                f" --entity-name {name} --add-config {key}={want}) or delete the topic, then"
                " run `groundstream topics create` again"
            )
    return None


async def missing_topics(
    conn: KafkaConnection, prefix: str, specs: Iterable[TopicSpec] = TOPIC_SPECS
) -> list[str]:
    """Names of the ladder's topics that do not exist on the cluster yet.

    A cluster lists only the topics a principal may describe: a topic that is not listed
    is described by name, and one the broker will not describe raises
    TopicAuthorizationFailedError (an ACL is missing), rather than reading as missing."""
    names = [spec.topic.full(prefix) for spec in specs]
    admin = clients.admin(conn, client_id="groundstream-admin")
    await admin.start()
    try:
        existing = set(await admin.list_topics())
        unlisted = [name for name in names if name not in existing]
        described = await _describe_without_creating(admin, unlisted) if unlisted else []
    finally:
        await admin.close()
    refused = {d["topic"] for d in described if d["error_code"] == TOPIC_AUTHORIZATION_FAILED}
    if refused:
        raise TopicAuthorizationFailedError(refused)
    return unlisted


async def _describe_without_creating(admin: AIOKafkaAdminClient, names: list[str]) -> list:
    """The metadata of `names` (aiokafka's `describe_topics` asks the broker to create a
    topic it does not know, which a cluster with auto-creation on would do, with none of
    our topics' configs)."""
    response = await admin._send_request(MetadataRequest(names, allow_auto_topic_creation=False))
    return response.to_object()["topics"]


async def create_topics(
    conn: KafkaConnection,
    prefix: str,
    partitions: int,
    replication: int,
    specs: Iterable[TopicSpec] = TOPIC_SPECS,
    extra: Iterable[str] = (),
) -> dict[str, str]:
    """Create every topic that does not exist yet; returns name → 'created' | 'exists'.
    `extra`: plain topics by their full name (no prefix, no configs), such as a source
    topic to try `attach` on, which `attach` refuses to create itself."""
    admin = clients.admin(conn, client_id="groundstream-admin")
    await admin.start()
    try:
        existing = set(await admin.list_topics())
        wanted = [
            NewTopic(
                name=spec.topic.full(prefix),
                num_partitions=spec.fixed_partitions or partitions,
                replication_factor=replication,
                topic_configs=created_configs(spec.kafka_configs(), replication),
            )
            for spec in specs
        ]
        wanted += [
            NewTopic(name, partitions, replication, topic_configs=created_configs({}, replication))
            for name in extra
        ]
        report = {t.name: "exists" for t in wanted if t.name in existing}
        missing = [t for t in wanted if t.name not in existing]
        by_name = {spec.topic.full(prefix): spec for spec in specs}
        await _check_existing(admin, {n: by_name[n] for n in report if n in by_name})
        if missing:
            # aiokafka returns the broker's per-topic errors rather than raising them: a
            # refused creation must not be reported (and waited for) as created. A
            # concurrent creator may win the race; the topic is there either way.
            response = await admin.create_topics(missing)
            failed = {
                name: code
                for name, code, *_ in response.topic_errors
                if code not in (0, TOPIC_ALREADY_EXISTS)
            }
            refused = {name for name, code in failed.items() if code == TOPIC_AUTHORIZATION_FAILED}
            if refused:
                raise TopicAuthorizationFailedError(refused)
            for name, code in failed.items():
                raise for_code(code)(f"creating {name}")
            # Made meanwhile by another creator (or not yet listed when we looked): with
            # its settings, not ours, so they are checked as for any topic that exists.
            raced = {n for n, code, *_ in response.topic_errors if code == TOPIC_ALREADY_EXISTS}
            await _check_existing(admin, {n: by_name[n] for n in raced if n in by_name})
            report.update({t.name: "created" for t in missing})
            # The broker acknowledges a creation before its metadata lists the topic; a
            # worker started right after (`topics create && worker all`) would then find
            # its topics missing and refuse to start. Return once they are listed.
            names = {t.name for t in missing}
            deadline = asyncio.get_running_loop().time() + VISIBLE_TIMEOUT_S
            while not names <= set(await admin.list_topics()):
                if asyncio.get_running_loop().time() > deadline:
                    break  # the workers' own check names whatever is still missing
                await asyncio.sleep(0.2)
        return report
    finally:
        await admin.close()


async def _check_existing(admin: AIOKafkaAdminClient, specs: dict[str, TopicSpec]) -> None:
    """Refuse (`TopicConfigMismatch`) the first existing topic of `specs` (full name →
    spec) without its `kept_configs`; a principal that may not read a topic's settings is
    refused as for any ACL (TopicAuthorizationFailedError: `groundstream acls` grants it)."""
    if not specs:
        return
    wanted = {name: spec.kept_configs() for name, spec in specs.items()}
    resources = [
        ConfigResource(ConfigResourceType.TOPIC, name, configs=dict.fromkeys(kept))
        for name, kept in wanted.items()
    ]
    for code, name, entries in await _described(admin, resources):
        if code == TOPIC_AUTHORIZATION_FAILED:
            raise TopicAuthorizationFailedError({name})
        if code:
            raise for_code(code)(f"describing the configs of {name}")
        actual = {entry[0]: entry[1] for entry in entries}
        line = config_mismatch(name, wanted[name], actual)
        if line is not None:
            raise TopicConfigMismatch(line)


async def _described(
    admin: AIOKafkaAdminClient, resources: list[ConfigResource]
) -> list[tuple[int, str, list]]:
    """(error code, name, entries) of each resource's DescribeConfigs answer. A topic the
    controller knows (it was listed, or its creation was refused as existing) may not be
    known yet to the broker asked, which answers UNKNOWN_TOPIC_OR_PARTITION until its
    metadata catches up: asked again, for as long as `create_topics` waits for a listing."""
    deadline = asyncio.get_running_loop().time() + VISIBLE_TIMEOUT_S
    while True:
        answers = [
            (code, name, entries)
            for response in await admin.describe_configs(resources)
            for code, _message, _kind, name, entries in response.resources
        ]
        unknown = any(code == UNKNOWN_TOPIC for code, _name, _entries in answers)
        if not unknown or asyncio.get_running_loop().time() > deadline:
            return answers
        await asyncio.sleep(0.2)
