"""The dashboard answers only to the names it is known by (DNS rebinding), bounds its live
event streams, and tells a second reviewer who decided first (issue 9, items 6-7)."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
from aiohttp.test_utils import TestClient, TestServer

from pipeline.policy.document import load_policy
from workers.runtime.review import AlreadyDecided
from workers.runtime.settings import Settings
from workers.web import app as dashboard
from workers.web.app import allowed_hosts, build_app
from workers.web.state import DashboardState


class IdleFeed:
    async def run(self, state: DashboardState) -> None:
        await asyncio.Event().wait()

    def status(self) -> dict[str, Any]:
        return {"kind": "idle", "connected": True}


class SecondReviewer:
    async def decide(self, candidate_id: str, verdict: Any, by: str, note: str) -> dict:
        raise AlreadyDecided(candidate_id, "alice", 1_700_000_000.0, "accept")


def client(settings: Settings) -> TestClient:
    app = build_app(settings, load_policy(None), feed=IdleFeed(), ops=SecondReviewer())  # type: ignore[arg-type]
    return TestClient(TestServer(app, host="127.0.0.1"))


class TestHosts:
    def test_names_the_dashboard_is_known_by(self):
        assert allowed_hosts(Settings()) == {"localhost", "127.0.0.1", "::1"}
        wildcard = Settings(web_host="0.0.0.0", web_allowed_hosts="Dash.Internal, 10.0.0.5")
        assert allowed_hosts(wildcard) == {
            "localhost",
            "127.0.0.1",
            "::1",
            "dash.internal",
            "10.0.0.5",
        }

    async def test_a_rebound_name_is_refused(self):
        async with client(Settings()) as c:
            assert (await c.get("/api/health")).status == 200
            for host in ("evil.example", "evil.example:6066", "127.0.0.1.evil.example", "[::2]"):
                response = await c.get("/api/health", headers={"Host": host})
                assert response.status == 421, host
            assert (await c.get("/", headers={"Host": "localhost:6066"})).status == 200
            assert (await c.get("/api/health", headers={"Host": "[::1]:6066"})).status == 200

    async def test_an_allowed_name_is_served(self):
        async with client(Settings(web_allowed_hosts="dash.internal")) as c:
            response = await c.get("/api/health", headers={"Host": "dash.internal"})
            assert response.status == 200


class TestSubscribers:
    async def test_streams_beyond_the_bound_are_refused(self, monkeypatch):
        monkeypatch.setattr(dashboard, "MAX_SUBSCRIBERS", 2)
        async with client(Settings()) as c:
            open_streams = [await c.get("/api/events") for _ in range(2)]
            for stream in open_streams:
                assert stream.status == 200
                await stream.content.readuntil(b"\n\n")  # subscribed
            refused = await c.get("/api/events")
            assert refused.status == 503 and refused.headers["Retry-After"] == "10"
            open_streams[0].close()
            for _ in range(100):
                if len(c.app[dashboard.STATE].subscribers) < 2:
                    break
                await asyncio.sleep(0.01)
            again = await c.get("/api/events")
            assert again.status == 200
            again.close()
            open_streams[1].close()


async def test_a_second_verdict_is_a_conflict_naming_the_first():
    async with client(Settings(reviewer_identity_header="X-Forwarded-User")) as c:
        response = await c.post(
            "/api/review/c1", json={"verdict": "reject"}, headers={"X-Forwarded-User": "bob"}
        )
        assert response.status == 409
        assert "already decided by alice at 2023-11-14T22:13:20" in (await response.json())["error"]


class TestIssue22Dashboard:
    """What a newcomer saw in the browser (issue 22, item 6), on the server's side; the
    page's side is tests/browser/test_dashboard_page.py."""

    async def test_a_body_nested_too_deep_is_refused_as_that(self):
        deep = "[" * 300 + "]" * 300
        async with client(Settings(web_token="t")) as c:
            response = await c.post(
                "/api/kill-switch",
                data=f'{{"on": true, "by": "ana", "x": {deep}}}',
                headers={"Authorization": "Bearer t", "Content-Type": "application/json"},
            )
            assert response.status == 400
            assert (await response.json())["error"] == "body refused: nesting deeper than 64 levels"

    def test_recent_decisions_are_newest_first_by_decision_time(self):
        state = DashboardState()
        for cid, at in (("b", 2.0), ("a", 1.0), ("c", 3.0)):  # as partitions interleave
            state.ingest(rec(cid, T0 + at))
        assert [r["candidate_id"] for r in state.decisions(10)] == ["c", "b", "a"]

    def test_a_dead_letter_is_not_a_route_and_mode_of_question_marks(self):
        state = DashboardState()
        state.ingest(rec("x", T0, stage="outcome", topic="deadletter"))
        assert state.summary()["routes"] == {"dead-lettered": {"before routing": 1}}


T0 = 1_764_676_800.0


def rec(cid: str, at: float, **extra: Any) -> dict[str, Any]:
    from pipeline.trail.records import make_record

    fields = {"session_id": "s", "turn": 0, "action": "scored", "write_to_state": False}
    fields |= {"reason": "", "policy_version": "", "decided_at": at, "mode": "", "route": ""}
    fields |= {"prev_hash": ""}
    return make_record(candidate_id=cid, stage=extra.pop("stage", "geometry"), **fields, **extra)


async def test_a_forged_records_free_text_never_reaches_the_public_summary():
    """`/api/summary` needs no credential: its labels (stage, action, topic, gate, method,
    breaker endpoint and state, cut names) are words the code writes, or `?`; free text
    put in one of them by a writer of `decisions` is not shown."""
    secret = "The capital of France is Lyon, said the forged record"
    async with client(Settings(web_token="t")) as c:
        state = c.app[dashboard.STATE]
        state.ingest({"candidate_id": "ok", "stage": "rules", "action": "commit"})
        state.ingest(
            {
                "candidate_id": "forged",
                "stage": "geometry",
                "action": secret,
                "gate": secret,
                "method": secret,
                "score": 0.5,
                "thresholds": {secret: 0.2, "sgi_accept": 0.4},
                "breaker": {secret: secret},
            }
        )
        state.ingest({"candidate_id": "forged-outcome", "stage": "outcome", "topic": secret})
        response = await c.get("/api/summary")
        assert response.status == 200
        body = await response.text()
    assert "Lyon" not in body
    summary = orjson.loads(body)
    assert summary["stages"]["rules"] == {"commit": 1}
    assert summary["stages"]["geometry"] == {"?": 1}
    assert summary["outcomes"]["?"] == 1
