"""The dashboard without Kafka: write endpoints need the token, bodies are validated, the
aggregates follow the feed, and nothing served carries private evidence."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from pipeline.stages.review import HumanVerdict
from pipeline.trail.records import make_record
from topics.codec import loads
from workers.runtime.settings import Settings
from workers.web.app import build_app
from workers.web.state import DashboardState, percentile

TOKEN = "s3cret-token"
SECRET_SPAN = "Jane Doe lives at 12 Private Road"
RAW_ANSWER = "The refund window is ninety days"


class FakeFeed:
    """Delivers what a test puts on its queue, as the Kafka feed would."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()

    async def run(self, state: DashboardState) -> None:
        while True:
            state.ingest(await self.queue.get())

    def status(self) -> dict[str, Any]:
        return {"kind": "fake", "connected": True}


class FakeOps:
    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.waiting = {"c-wait"}

    async def pending(self) -> list[dict[str, Any]]:
        return [
            {
                "candidate_id": cid,
                "session_id": "s1",
                "turn": 1,
                "stage": "rules",
                "reason": "rule violation: pii",
                "route": "default",
                "queued_at": time.time(),
                "texts": {"question": "How long?", "context": ["30 days."], "response": RAW_ANSWER},
            }
            for cid in sorted(self.waiting)
        ]

    async def decide(
        self, candidate_id: str, verdict: HumanVerdict, by: str, note: str
    ) -> dict[str, Any]:
        self.calls.append(("decide", candidate_id, verdict, by, note))
        if candidate_id not in self.waiting:
            raise LookupError(f"{candidate_id!r} is not waiting for review")
        self.waiting.discard(candidate_id)
        return record(candidate_id, stage="review", action=verdict.value, note=note)

    async def kill_switch(self, on: bool, by: str) -> dict[str, Any]:
        self.calls.append(("kill_switch", on, by))
        return {"schema_version": 1, "on": on, "by": by, "at": time.time()}


def record(candidate_id: str, *, stage: str, action: str, **extra: Any) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "candidate_id": candidate_id,
        "session_id": "s1",
        "turn": 1,
        "stage": stage,
        "action": action,
        "write_to_state": action == "accept",
        "reason": f"{stage} says {action}",
        "policy_version": "test",
        "decided_at": time.time(),
        "mode": "active",
        "route": "default",
        "prev_hash": "",
    }
    note = extra.pop("note", None)
    if note is not None:
        fields["evidence"] = {"reviewer": "ann", "note": note}
    fields.update(extra)
    return make_record(**fields)


def rules_hit_record(candidate_id: str) -> dict[str, Any]:
    hit = {
        "rule": "pii",
        "message": "a personal name and address",
        "span": {"text": SECRET_SPAN, "start": 0, "end": len(SECRET_SPAN)},
        "severity": "review",
    }
    return record(
        candidate_id,
        stage="rules",
        action="escalate",
        method="rules",
        level="review",
        evidence={
            "rules": {"action": "review", "hits": [hit]},
            "interpretations": [{"text": SECRET_SPAN}],
            "human_override": False,
        },
    )


@pytest.fixture
def feed() -> FakeFeed:
    return FakeFeed()


@pytest.fixture
def ops() -> FakeOps:
    return FakeOps()


def make_client(feed: FakeFeed, ops: FakeOps, token: str = "") -> TestClient:
    settings = Settings(web_token=token)
    app = build_app(settings, settings.load_policy(), feed=feed, ops=ops)
    return TestClient(TestServer(app))


async def wait_for_summary(client: TestClient, ready, timeout: float = 5.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        summary = await (await client.get("/api/summary")).json()
        if ready(summary) or time.monotonic() > deadline:
            return summary
        await asyncio.sleep(0.02)


async def wait_for_records(client: TestClient, n: int) -> dict[str, Any]:
    return await wait_for_summary(client, lambda s: s["records"] >= n)


WRITES = [
    ("/api/review/c-wait", {"verdict": "accept", "by": "ann"}),
    ("/api/kill-switch", {"on": True, "by": "ann"}),
]


@pytest.mark.parametrize(("path", "body"), WRITES)
async def test_writes_refused_when_no_token_is_configured(feed, ops, path, body):
    async with make_client(feed, ops) as client:
        for headers in ({}, {"Authorization": "Bearer anything"}):
            resp = await client.post(path, json=body, headers=headers)
            assert resp.status == 403
            assert "GROUNDSTREAM_WEB_TOKEN is not set" in (await resp.json())["error"]
    assert ops.calls == []


@pytest.mark.parametrize(("path", "body"), WRITES)
@pytest.mark.parametrize(
    "authorization",
    [None, "Bearer wrong", f"Basic {TOKEN}", f"Bearer {TOKEN}x", "Bearer ", "Bearer é"],
)
async def test_writes_refused_with_a_wrong_token(feed, ops, path, body, authorization):
    headers = {} if authorization is None else {"Authorization": authorization}
    async with make_client(feed, ops, TOKEN) as client:
        resp = await client.post(path, json=body, headers=headers)
        assert resp.status == 401
        assert resp.headers["WWW-Authenticate"] == "Bearer"
    assert ops.calls == []


AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.mark.parametrize(
    ("path", "data", "message"),
    [
        ("/api/review/c-wait", b"not json", "JSON object"),
        ("/api/review/c-wait", b"[1, 2]", "JSON object"),
        ("/api/review/c-wait", b'{"by": "ann"}', "verdict"),
        ("/api/review/c-wait", b'{"verdict": "maybe", "by": "ann"}', "verdict"),
        ("/api/review/c-wait", b'{"verdict": "accept"}', '"by"'),
        ("/api/review/c-wait", b'{"verdict": "accept", "by": "  "}', '"by"'),
        ("/api/review/c-wait", b'{"verdict": "accept", "by": "ann", "note": 3}', '"note"'),
        ("/api/kill-switch", b"", "JSON object"),
        ("/api/kill-switch", b'{"by": "ann"}', '"on"'),
        ("/api/kill-switch", b'{"on": "true", "by": "ann"}', '"on"'),
        ("/api/kill-switch", b'{"on": 1, "by": "ann"}', '"on"'),
        ("/api/kill-switch", b'{"on": true}', '"by"'),
    ],
)
async def test_bad_bodies_are_400_with_a_clear_message(feed, ops, path, data, message):
    async with make_client(feed, ops, TOKEN) as client:
        resp = await client.post(path, data=data, headers=AUTH)
        assert resp.status == 400
        assert message in (await resp.json())["error"]
    assert ops.calls == []


async def test_right_token_and_body_reach_the_operations(feed, ops):
    async with make_client(feed, ops, TOKEN) as client:
        resp = await client.post(
            "/api/review/c-wait",
            json={"verdict": "reject", "by": "ann", "note": "made up"},
            headers=AUTH,
        )
        assert resp.status == 200, await resp.text()
        body = await resp.json()
        assert body["decision"]["action"] == "reject"
        assert "note" not in body["decision"]["evidence"]  # the sanitized record only

        resp = await client.post(
            "/api/review/c-unknown", json={"verdict": "accept", "by": "ann"}, headers=AUTH
        )
        assert resp.status == 404
        assert "not waiting" in (await resp.json())["error"]

        resp = await client.post("/api/kill-switch", json={"on": True, "by": "ann"}, headers=AUTH)
        assert resp.status == 200
        summary = await (await client.get("/api/summary")).json()
        assert summary["kill_switch"]["on"] is True
        assert summary["kill_switch"]["by"] == "ann"
    assert ops.calls == [
        ("decide", "c-wait", HumanVerdict.REJECT, "ann", "made up"),
        ("decide", "c-unknown", HumanVerdict.ACCEPT, "ann", ""),
        ("kill_switch", True, "ann"),
    ]


async def test_aggregates_follow_the_feed(feed, ops):
    async with make_client(feed, ops) as client:
        summary = await wait_for_records(client, 0)
        assert summary["records"] == 0
        assert summary["outcomes"]["state"] == 0

        a = record(
            "c1",
            stage="geometry",
            action="scored",
            score=1.31,
            method="sgi",
            evidence={"grounding_probability": 0.87},
            timings={"geometry": 40.0},
        )
        a_thresholds = {
            **a,
            "thresholds": {"sgi_strong_pass": 4.08, "sgi_review": 0.95, "grounding_accept": 0.81},
        }
        feed.queue.put_nowait(a_thresholds)
        feed.queue.put_nowait(
            record("c1", stage="rules", action="accept", timings={"geometry": 40.0, "rules": 2.0})
        )
        feed.queue.put_nowait(
            record(
                "c1",
                stage="outcome",
                action="accept",
                topic="state",
                timings={"geometry": 40.0, "rules": 2.0},
            )
        )
        feed.queue.put_nowait(
            record("c2", stage="geometry", action="scored", score=0.4, timings={"geometry": 60.0})
        )
        feed.queue.put_nowait(
            record("c2", stage="judge", action="escalate", gate="judge_unavailable")
            | {"breaker": {"judge": "open"}}
        )
        feed.queue.put_nowait(
            record("c2", stage="outcome", action="escalate", topic="escalations.review")
        )
        feed.queue.put_nowait(record("c1", stage="rules", action="accept", reason="again"))
        feed.queue.put_nowait(a_thresholds)  # an exact duplicate: counted once
        summary = await wait_for_records(client, 7)

        assert summary["records"] == 7
        assert summary["duplicates"] == 1
        assert summary["outcomes"]["state"] == 1
        assert summary["outcomes"]["escalations.review"] == 1
        assert summary["outcomes"]["escalations.reject"] == 0
        assert summary["candidates_finished"] == 2
        assert summary["stages"]["rules"] == {"accept": 2}
        assert summary["stages"]["geometry"] == {"scored": 2}
        assert "outcome" not in summary["stages"]
        assert summary["gates"] == {"judge_unavailable": 1}
        assert summary["routes"] == {"default": {"active": 2}}
        assert summary["breakers"][0]["state"] == "open"
        sgi = summary["histograms"]["sgi"]
        assert sgi["count"] == 1
        assert sgi["bins"][13] == 1  # 1.31 in [1.3, 1.4)
        assert sgi["hi"] >= 4.08  # the calibrated strong-pass cut lies on the axis
        assert sgi["thresholds"] == {"sgi_strong_pass": 4.08, "sgi_review": 0.95}
        grounding = summary["histograms"]["grounding"]  # P(grounded), what the switch routes on
        assert grounding["count"] == 1
        assert grounding["bins"][17] == 1  # 0.87 in [0.85, 0.90)
        assert grounding["thresholds"] == {"grounding_accept": 0.81}
        assert summary["histograms"]["?"]["count"] == 1
        assert summary["rate_per_minute"] == 7
        assert sum(m["decisions"] for m in summary["per_minute"]) == 7
        by_outcome: dict[str, int] = {}
        for minute in summary["per_minute"]:
            for topic, n in minute["by_outcome"].items():
                by_outcome[topic] = by_outcome.get(topic, 0) + n
        assert by_outcome == {"state": 1, "escalations.review": 1}
        geometry = summary["latency"]["geometry"]
        assert (geometry["p50"], geometry["p95"], geometry["count"]) == (40.0, 60.0, 2)
        assert summary["latency"]["rules"] == {"p50": 2.0, "p95": 2.0, "count": 1}
        assert summary["ladder_latency"] == {"p50": 42.0, "p95": 42.0, "count": 1}

        resp = await client.get("/api/decisions", params={"limit": "2"})
        newest = (await resp.json())["decisions"]
        assert [d["stage"] for d in newest] == ["rules", "outcome"]
        resp = await client.get("/api/decisions", params={"candidate_id": "c2"})
        assert {d["candidate_id"] for d in (await resp.json())["decisions"]} == {"c2"}

        feed.queue.put_nowait(b"junk")  # type: ignore[arg-type]
        summary = await wait_for_summary(client, lambda s: s["malformed"] > 0)
        assert summary["malformed"] == 1
        assert summary["records"] == 7


async def test_served_records_are_sanitized(feed, ops):
    async with make_client(feed, ops) as client:
        events = await client.get("/api/events")
        assert events.headers["Content-Type"].startswith("text/event-stream")
        feed.queue.put_nowait(rules_hit_record("c-pii"))
        await wait_for_records(client, 1)

        resp = await client.get("/api/decisions", params={"candidate_id": "c-pii"})
        text = await resp.text()
        (served,) = loads(text)["decisions"]
        assert served["evidence"]["rules"] == {"action": "review"}
        assert served["evidence"]["human_override"] is False
        assert "interpretations" not in served["evidence"]
        assert SECRET_SPAN not in text
        assert SECRET_SPAN not in await (await client.get("/api/summary")).text()

        data = b""
        while b"event: decision" not in data or not data.endswith(b"\n\n"):
            data += await asyncio.wait_for(events.content.readany(), 5)
        assert b'"candidate_id":"c-pii"' in data
        assert SECRET_SPAN.encode() not in data
        events.close()


async def test_reads_and_page(feed, ops):
    async with make_client(feed, ops) as client:
        page = await client.get("/")
        assert page.status == 200
        assert "default-src 'self'" in page.headers["Content-Security-Policy"]
        html = await page.text()
        assert "/static/app.js" in html
        assert "http://" not in html and "https://" not in html  # nothing from outside
        for asset in ("app.js", "style.css"):
            assert (await client.get(f"/static/{asset}")).status == 200

        for bad in ("0", "abc", "100000"):
            resp = await client.get("/api/decisions", params={"limit": bad})
            assert resp.status == 400

        resp = await client.get("/api/review")
        assert RAW_ANSWER not in await resp.text()  # raw texts only with the token
        review = await resp.json()
        assert [p["candidate_id"] for p in review["pending"]] == ["c-wait"]
        assert review["texts"] is False
        health = await (await client.get("/api/health")).json()
        assert health["status"] == "ok"
        assert health["writes_enabled"] is False


async def test_review_texts_need_the_token(feed, ops):
    async with make_client(feed, ops, TOKEN) as client:
        resp = await client.get("/api/review", headers={"Authorization": "Bearer wrong"})
        assert resp.status == 401
        assert RAW_ANSWER not in await resp.text()

        anonymous = await (await client.get("/api/review")).json()
        assert "texts" not in anonymous["pending"][0]

        review = await (await client.get("/api/review", headers=AUTH)).json()
        assert review["texts"] is True
        assert review["pending"][0]["texts"]["response"] == RAW_ANSWER


def test_percentile_is_nearest_rank():
    assert percentile([], 50) is None
    assert percentile([5.0], 95) == 5.0
    values = [float(x) for x in range(1, 101)]
    assert (percentile(values, 50), percentile(values, 95), percentile(values, 100)) == (
        50.0,
        95.0,
        100.0,
    )
