"""The floor `bench switch` is held against: a bare batched aiokafka consume → produce loop.

    python -m workers.bench.bare BOOTSTRAP SOURCE DEST COUNT

Reads SOURCE from the earliest offset in its own group, sends every value on to DEST
unchanged, waits for the batch's acks, commits, and exits after COUNT messages: what any
stage costs at the least, with no decision and no state.
"""

from __future__ import annotations

import asyncio
import sys

from topics import clients
from topics.names import MAX_MESSAGE_BYTES
from workers.bench.procs import connection


async def forward(bootstrap: str, source: str, dest: str, count: int, batch: int = 500) -> None:
    kafka = connection(bootstrap)
    consumer = clients.consumer(
        kafka,
        source,
        group_id=f"{dest}-bare",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        isolation_level="read_committed",
        max_partition_fetch_bytes=MAX_MESSAGE_BYTES,
    )
    producer = clients.producer(kafka, acks="all", linger_ms=5, max_request_size=MAX_MESSAGE_BYTES)
    await consumer.start()
    await producer.start()
    try:
        done = 0
        while done < count:
            fetched = await consumer.getmany(timeout_ms=500, max_records=batch)
            futures = [
                await producer.send(dest, r.value, key=r.key)
                for records in fetched.values()
                for r in records
            ]
            await asyncio.gather(*futures)
            await consumer.commit()
            done += len(futures)
    finally:
        await producer.stop()
        await consumer.stop()


if __name__ == "__main__":
    bootstrap, source, dest, count = sys.argv[1:5]
    asyncio.run(forward(bootstrap, source, dest, int(count)))
