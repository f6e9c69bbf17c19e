"""Topic creation: every topic of the ladder, the internal ones too (`concluded`, the
compacted `outcomes` ledger and `sessions` table), is created here, from `TOPIC_SPECS` and
the settings' partitions and replication: no worker creates a topic of its own."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import TopicAlreadyExistsError, TopicAuthorizationFailedError, for_code
from aiokafka.protocol.metadata import MetadataRequest

from topics import clients
from topics.clients import KafkaConnection
from topics.names import TOPIC_SPECS, TopicSpec

TOPIC_AUTHORIZATION_FAILED = TopicAuthorizationFailedError.errno
TOPIC_ALREADY_EXISTS = TopicAlreadyExistsError.errno

VISIBLE_TIMEOUT_S = 30.0
"""How long `create_topics` waits for the broker's metadata to list what it created."""


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
                topic_configs=spec.kafka_configs(),
            )
            for spec in specs
        ]
        wanted += [NewTopic(name, partitions, replication) for name in extra]
        report = {t.name: "exists" for t in wanted if t.name in existing}
        missing = [t for t in wanted if t.name not in existing]
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
