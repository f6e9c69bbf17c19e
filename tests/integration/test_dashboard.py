"""The dashboard on a real broker and a real TCP port: it counts what is on `decisions`,
streams new records live, publishes the kill switch, and works the review queue."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp

from tests.integration.harness import Workers, worker_env
from topics.codec import dumps, loads
from topics.names import Topic
from topics.schema import Candidate, Envelope
from workers.runtime.control import KILL_SWITCH_KEY

from .conftest import (
    DASHBOARD_TOKEN,
    consume_all,
    decision_record,
    produce,
    send_decisions,
    until,
)

AUTH = {"Authorization": f"Bearer {DASHBOARD_TOKEN}"}
RAW_ANSWER = "The refund window is ninety days for every customer"


async def get_json(http: aiohttp.ClientSession, url: str) -> Any:
    async with http.get(url) as resp:
        assert resp.status == 200, await resp.text()
        return await resp.json()


async def test_summary_counts_what_is_on_decisions(
    kafka_bootstrap, dashboard_settings, dashboard_url
):
    await send_decisions(
        kafka_bootstrap,
        dashboard_settings,
        decision_record("c1", "geometry", "scored", score=1.4, method="sgi"),
        decision_record("c1", "outcome", "accept", topic="state"),
        decision_record("c2", "geometry", "scored", score=-0.2, method="dgi"),
        decision_record("c2", "outcome", "fallback", topic="escalations.fallback"),
        decision_record("c3", "rules", "escalate", gate="kill_switch"),
        decision_record(
            "c3", "outcome", "escalate", topic="escalations.review", gate="kill_switch"
        ),
    )
    async with aiohttp.ClientSession() as http:

        async def counted():
            summary = await get_json(http, f"{dashboard_url}/api/summary")
            return summary if summary["records"] >= 6 else None

        summary = await until(counted)
        assert summary, "the dashboard did not read the 6 records"
        assert summary["records"] == 6
        outcomes = summary["outcomes"]
        assert outcomes["state"] == 1
        assert outcomes["escalations.fallback"] == 1
        assert outcomes["escalations.review"] == 1
        assert outcomes["escalations.reject"] == 0
        assert summary["stages"]["geometry"] == {"scored": 2}
        assert summary["gates"] == {"kill_switch": 1}
        assert set(summary["histograms"]) == {"sgi", "dgi"}

        health = await get_json(http, f"{dashboard_url}/api/health")
        assert health["feed"]["connected"] is True
        assert health["writes_enabled"] is True
        recent = await get_json(http, f"{dashboard_url}/api/decisions?limit=10")
        assert recent["count"] == 6


async def test_events_stream_records_produced_after_connecting(
    kafka_bootstrap, dashboard_settings, dashboard_url
):
    await send_decisions(
        kafka_bootstrap, dashboard_settings, decision_record("old", "geometry", "scored")
    )
    async with aiohttp.ClientSession() as http:

        async def caught_up():
            return (await get_json(http, f"{dashboard_url}/api/summary"))["records"] >= 1

        assert await until(caught_up)
        async with http.get(f"{dashboard_url}/api/events") as events:
            assert events.status == 200
            assert events.headers["Content-Type"].startswith("text/event-stream")
            await send_decisions(
                kafka_bootstrap, dashboard_settings, decision_record("live-1", "switch", "accept")
            )

            async def read_until_live() -> dict[str, Any]:
                async for line in events.content:
                    if line.startswith(b"data: "):
                        data = loads(line[len(b"data: ") :])
                        if data["candidate_id"] == "live-1":
                            return data
                raise AssertionError("event stream ended")

            data = await asyncio.wait_for(read_until_live(), 30)
        assert data["stage"] == "switch"
        assert data["action"] == "accept"


async def test_kill_switch_is_published_on_control(
    kafka_bootstrap, dashboard_settings, dashboard_url
):
    async with aiohttp.ClientSession() as http:
        async with http.post(
            f"{dashboard_url}/api/kill-switch", json={"on": True, "by": "ops"}
        ) as resp:
            assert resp.status == 401
        async with http.post(
            f"{dashboard_url}/api/kill-switch", json={"on": True, "by": "ops"}, headers=AUTH
        ) as resp:
            assert resp.status == 200, await resp.text()

        control = await consume_all(
            kafka_bootstrap, dashboard_settings.topic(Topic.CONTROL), expect=1
        )
        assert len(control) == 1
        assert control[0].key == KILL_SWITCH_KEY
        message = loads(control[0].value)
        assert message["on"] is True
        assert message["by"] == "ops"

        summary = await get_json(http, f"{dashboard_url}/api/summary")
        assert summary["kill_switch"]["on"] is True


async def test_review_queue_lists_and_decides(
    kafka_bootstrap, dashboard_settings, dashboard_url, tmp_path
):
    # The verdict's outcome record is written by the terminal writer: run the real one.
    env = worker_env(kafka_bootstrap, dashboard_settings.topic_prefix, tmp_path / "data")
    terminal = Workers(env, "terminal", tmp_path / "terminal.log")
    await asyncio.to_thread(terminal.start)
    try:
        await _review_queue_lists_and_decides(kafka_bootstrap, dashboard_settings, dashboard_url)
    finally:
        await asyncio.to_thread(terminal.stop)


async def _review_queue_lists_and_decides(kafka_bootstrap, dashboard_settings, dashboard_url):
    candidate = Candidate(
        id="rev-1",
        session_id="s-rev",
        question="How long is the refund window?",
        response=RAW_ANSWER,
        turn=1,
        context="Refunds are accepted within thirty days.",
    )
    env = Envelope(
        candidate=candidate,
        route="default",
        mode="active",
        trail=({"stage": "rules", "action": "escalate", "reason": "rule violation: support"},),
    )
    await produce(
        kafka_bootstrap, dashboard_settings.topic(Topic.REVIEW), [(b"s-rev", env.encode())]
    )
    async with aiohttp.ClientSession() as http:
        async with http.get(f"{dashboard_url}/api/review") as resp:
            text = await resp.text()
            assert resp.status == 200, text
        assert RAW_ANSWER not in text and "refund window" not in text
        (item,) = loads(text)["pending"]
        assert item["candidate_id"] == "rev-1"
        assert item["reason"] == "rule violation: support"

        async with http.post(
            f"{dashboard_url}/api/review/nobody",
            json={"verdict": "accept", "by": "ann"},
            headers=AUTH,
        ) as resp:
            assert resp.status == 404
        async with http.post(
            f"{dashboard_url}/api/review/rev-1",
            json={"verdict": "reject", "by": "ann", "note": "contradicts the source"},
            headers=AUTH,
        ) as resp:
            body = await resp.json()
            assert resp.status == 200, body
        assert body["decision"]["stage"] == "review"
        assert body["decision"]["action"] == "reject"

        async def trail():
            got = await get_json(http, f"{dashboard_url}/api/decisions?candidate_id=rev-1")
            return got["decisions"] if len(got["decisions"]) >= 2 else None

        decisions = await until(trail)
        assert decisions, "the verdict never reached the dashboard's feed"
        assert {d["stage"] for d in decisions} == {"review", "outcome"}
        assert RAW_ANSWER not in dumps(decisions).decode()

        async def gone():
            return (await get_json(http, f"{dashboard_url}/api/review"))["count"] == 0

        assert await until(gone, timeout=10)
