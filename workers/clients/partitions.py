"""The partitions a consumer without a group holds: what the agent client, the range reader
and the review queue wait for before they read a topic to its end."""

from __future__ import annotations

import asyncio

from aiokafka import AIOKafkaConsumer, TopicPartition

PARTITIONS_TIMEOUT_S = 10.0


async def partitions(consumer: AIOKafkaConsumer, topic: str) -> list[TopicPartition]:
    """The partitions of `topic`, once a started consumer subscribed to it without a group
    holds them all; LookupError if the topic does not exist."""
    if topic not in await consumer.topics():
        raise LookupError(f"topic {topic} does not exist")
    loop = asyncio.get_running_loop()
    deadline = loop.time() + PARTITIONS_TIMEOUT_S
    while True:
        held = sorted((tp for tp in consumer.assignment() if tp.topic == topic), key=str)
        if held or loop.time() > deadline:
            return sorted(held, key=lambda tp: tp.partition)
        await asyncio.sleep(0.1)
