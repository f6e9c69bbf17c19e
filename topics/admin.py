"""Topic creation: every topic of the ladder, the internal ones too (`concluded`, the
compacted `outcomes` ledger and `sessions` table), is created here, from `TOPIC_SPECS` and
the settings' partitions and replication: no worker creates a topic of its own."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable

from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import TopicAlreadyExistsError

from topics.names import TOPIC_SPECS, TopicSpec


async def missing_topics(
    bootstrap_servers: str, prefix: str, specs: Iterable[TopicSpec] = TOPIC_SPECS
) -> list[str]:
    """Names of the ladder's topics that do not exist on the cluster yet."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap_servers, client_id="groundstream-admin")
    await admin.start()
    try:
        existing = set(await admin.list_topics())
    finally:
        await admin.close()
    return [spec.topic.full(prefix) for spec in specs if spec.topic.full(prefix) not in existing]


async def create_topics(
    bootstrap_servers: str,
    prefix: str,
    partitions: int,
    replication: int,
    specs: Iterable[TopicSpec] = TOPIC_SPECS,
    extra: Iterable[str] = (),
) -> dict[str, str]:
    """Create every topic that does not exist yet; returns name → 'created' | 'exists'.
    `extra`: plain topics by their full name (no prefix, no configs), such as a source
    topic to try `attach` on, which `attach` refuses to create itself."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap_servers, client_id="groundstream-admin")
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
            # A concurrent creator may win the race; the topic is there either way.
            with contextlib.suppress(TopicAlreadyExistsError):
                await admin.create_topics(missing)
            report.update({t.name: "created" for t in missing})
        return report
    finally:
        await admin.close()
