"""One trace per candidate over the real broker: `produce` starts it, every stage the
candidate passes adds a `decide` span to it (child of the message's context) and links
its batch span to it, and no span attribute carries the candidate's text.

The ladder's stage loops run in this process, so an in-memory exporter sees every span.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from topics.admin import create_topics
from topics.clients import KafkaConnection
from topics.codec import dumps
from workers.runtime import telemetry
from workers.runtime.kafka_tools import produce_file
from workers.runtime.ladder import LADDER
from workers.runtime.runner import build_loop
from workers.runtime.settings import Settings

from .conftest import consume_all
from .harness import values

pytestmark = pytest.mark.timeout(600)

QUESTION = "Which river feeds the Lake Arden reservoir?"
CONTEXT = "The reservoir is fed by the Calder River, which rises on Mount Fell."
RESPONSE = "It is fed by the Calder River."


@pytest.fixture(scope="module")
def exporter() -> InMemorySpanExporter:
    telemetry.configure("groundstream-test")
    provider = trace.get_tracer_provider()
    assert isinstance(provider, TracerProvider)
    memory = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    return memory


@contextlib.asynccontextmanager
async def ladder(settings: Settings) -> AsyncIterator[None]:
    """Every stage's loop, running in this event loop, once each holds its partitions."""
    loops = [build_loop(row.name, settings) for row in LADDER]
    tasks = [asyncio.create_task(loop.run()) for loop in loops]
    try:
        for _ in range(1200):
            if all(loop.ready for loop in loops):
                break
            await asyncio.sleep(0.1)
        yield
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def test_one_trace_follows_a_candidate_through_every_stage(
    kafka_bootstrap: str, topic_prefix: str, tmp_path: Path, exporter: InMemorySpanExporter
) -> None:
    settings = Settings.from_env(
        {},
        bootstrap_servers=kafka_bootstrap,
        topic_prefix=topic_prefix,
        partitions=1,
        batch_within=0.02,
        data_dir=str(tmp_path / "data"),
    )
    await create_topics(KafkaConnection(kafka_bootstrap), topic_prefix, 1, 1)
    lines = [
        {
            "id": f"tr-{i}",
            "session_id": f"s-tr-{i}",
            "question": QUESTION,
            "context": CONTEXT,
            "response": RESPONSE,
            "samples": [RESPONSE, "The Calder River feeds it."],
        }
        for i in range(2)
    ]
    source = tmp_path / "candidates.jsonl"
    source.write_bytes(b"\n".join(dumps(line) for line in lines) + b"\n")
    async with ladder(settings):
        await produce_file(settings, source, "candidates")
        # Each candidate ends with an `outcome` record on decisions.
        records = []
        for _ in range(240):
            records = values(await consume_all(kafka_bootstrap, f"{topic_prefix}decisions"))
            if sum(r["stage"] == "outcome" for r in records) == len(lines):
                break
            await asyncio.sleep(0.5)
    spans: list[ReadableSpan] = list(exporter.get_finished_spans())

    for line in lines:
        mine = [r for r in records if r["candidate_id"] == line["id"]]
        passed = [r["stage"] for r in mine if r["stage"] != "outcome"]
        assert passed[:2] == ["geometry", "switch"], passed
        (root,) = [
            s
            for s in spans
            if s.kind is SpanKind.PRODUCER
            and s.attributes.get("messaging.kafka.message.key") == line["session_id"]
        ]
        trace_id = root.context.trace_id
        assert root.parent is None and root.name == f"send {topic_prefix}candidates"
        assert {r["trace_id"] for r in mine} == {format(trace_id, "032x")}
        decides = [s for s in spans if s.name == "decide" and s.context.trace_id == trace_id]
        # One decide span per stage the candidate passed, each a child of its trace.
        assert sorted(s.attributes["groundstream.stage"] for s in decides) == sorted(passed)
        for span in decides:
            assert span.parent is not None and span.parent.trace_id == trace_id
            assert span.attributes["groundstream.candidate_id"] == line["id"]
            assert span.attributes["groundstream.session_id"] == line["session_id"]
            assert span.attributes["groundstream.mode"] == "evaluate"
            assert span.attributes["groundstream.action"]
        geometry = next(s for s in decides if s.attributes["groundstream.stage"] == "geometry")
        assert isinstance(geometry.attributes["groundstream.score"], float)
        assert geometry.attributes["groundstream.level"]
        # Every stage's batch span (kind CONSUMER) links to this candidate's context.
        linked = {
            s.attributes["groundstream.stage"]
            for s in spans
            if s.kind is SpanKind.CONSUMER
            and any(link.context.trace_id == trace_id for link in s.links)
        }
        # ... and so does the terminal writer's, which delivered its outcome.
        assert linked == {*passed, "terminal"}

    # No attribute of any span holds the question, the context or the response.
    texts = (QUESTION, CONTEXT, RESPONSE, "Calder")
    for span in spans:
        for key, value in {**span.attributes, **span.resource.attributes}.items():
            assert not any(t in str(value) for t in texts), (span.name, key)
