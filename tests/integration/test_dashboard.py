"""The dashboard on a real broker and a real TCP port: it counts what is on `decisions`,
streams new records live (their public projection without a credential), publishes the
kill switch, and works the review queue under each reviewer's own name."""

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
    REVIEWER_TOKENS,
    consume_all,
    decision_record,
    produce,
    send_decisions,
    until,
)

AUTH = {"Authorization": f"Bearer {DASHBOARD_TOKEN}"}
ANN = {"Authorization": f"Bearer {REVIEWER_TOKENS['ann']}"}
BOB = {"Authorization": f"Bearer {REVIEWER_TOKENS['bob']}"}
RAW_ANSWER = "The refund window is ninety days for every customer"
WINDOW = "Refunds are accepted within thirty days of delivery."


async def get_json(
    http: aiohttp.ClientSession, url: str, headers: dict[str, str] | None = None
) -> Any:
    async with http.get(url, headers=headers or {}) as resp:
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
        assert "reason" not in data and data["reason_code"] == "switch.accept"  # public


async def test_answer_text_is_served_only_with_a_credential(
    kafka_bootstrap, dashboard_settings, dashboard_url
):
    texts = (RAW_ANSWER, WINDOW, "Returns are free of charge.")
    evidence = {
        "grounding_probability": 0.4,
        "weakest_claim": {"claim": texts[0], "window": texts[1], "score": 0.1, "claims": 2},
        "reader": {
            "name": "r",
            "claims": [{"text": t, "span": [0, 1], "support": 0.5} for t in texts],
        },
    }
    await send_decisions(
        kafka_bootstrap,
        dashboard_settings,
        decision_record(
            "txt-1", "geometry", "scored", reason=f"weakest: {texts[0]}", evidence=evidence
        ),
    )
    url = f"{dashboard_url}/api/decisions?candidate_id=txt-1"
    async with aiohttp.ClientSession() as http:

        async def arrived():
            return (await get_json(http, url))["count"] == 1

        assert await until(arrived)
        async with http.get(url) as resp:
            public = await resp.text()
        for text in texts:
            assert text not in public
        assert loads(public)["decisions"][0]["evidence"] == {"grounding_probability": 0.4}
        for headers in (AUTH, ANN):
            async with http.get(url, headers=headers) as resp:
                whole = await resp.text()
            for text in texts:
                assert text in whole


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
        assert "reason" not in item  # free text: with a credential only
        (item,) = (await get_json(http, f"{dashboard_url}/api/review", ANN))["pending"]
        assert item["reason"] == "rule violation: support"

        async with http.post(
            f"{dashboard_url}/api/review/nobody", json={"verdict": "accept"}, headers=ANN
        ) as resp:
            assert resp.status == 404
        # Neither a wrong token nor the shared one (it names nobody) gives a verdict.
        for headers, status in (({"Authorization": "Bearer wrong"}, 401), (AUTH, 403)):
            async with http.post(
                f"{dashboard_url}/api/review/rev-1",
                json={"verdict": "accept", "by": "ann"},
                headers=headers,
            ) as resp:
                assert resp.status == status, await resp.text()
        assert (await get_json(http, f"{dashboard_url}/api/review"))["count"] == 1
        async with http.post(
            f"{dashboard_url}/api/review/rev-1",
            json={"verdict": "reject", "by": "mallory", "note": "contradicts the source"},
            headers=ANN,
        ) as resp:
            body = await resp.json()
            assert resp.status == 200, body
        assert body["decision"]["stage"] == "review"
        assert body["decision"]["action"] == "reject"
        assert body["decision"]["evidence"]["reviewer"] == "ann"  # not the typed "mallory"

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

        # A second reviewer, with their own token: their verdict is recorded as theirs.
        second = Envelope(
            candidate=Candidate(
                id="rev-2", session_id="s-rev2", question="Q?", response="A.", turn=1, context="C."
            ),
            route="default",
            mode="active",
            trail=({"stage": "judge", "action": "escalate", "reason": "judge unsure"},),
            last_hash="park-rev-2",  # its own parking: rev-1's verdict links to another
        )
        await produce(
            kafka_bootstrap, dashboard_settings.topic(Topic.REVIEW), [(b"s-rev2", second.encode())]
        )

        async def listed():
            return (await get_json(http, f"{dashboard_url}/api/review"))["count"] == 1

        assert await until(listed, timeout=10)
        async with http.post(
            f"{dashboard_url}/api/review/rev-2", json={"verdict": "accept"}, headers=BOB
        ) as resp:
            assert resp.status == 200, await resp.text()

        async def reviewers():
            found = {}
            for cid in ("rev-1", "rev-2"):
                url = f"{dashboard_url}/api/decisions?candidate_id={cid}"
                for d in (await get_json(http, url, AUTH))["decisions"]:
                    if d["stage"] == "review":
                        found[cid] = d["evidence"]["reviewer"]
            return found if len(found) == 2 else None

        # As read back from `decisions`, the audit trail: each verdict under its own name.
        assert await until(reviewers) == {"rev-1": "ann", "rev-2": "bob"}
