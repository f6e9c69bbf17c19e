"""The dashboard without Kafka, over real HTTP: write endpoints need a credential and a
verdict a reviewer's own, bodies are validated, the aggregates follow the feed, and
nothing served carries private evidence (without a credential, only public projections)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from pipeline.stages.review import HumanVerdict
from pipeline.trail.records import make_record
from topics.codec import loads
from workers.runtime.reviewers import token_digest
from workers.runtime.settings import Settings
from workers.web import app as dashboard_app
from workers.web.app import build_app
from workers.web.state import DashboardState, percentile

TOKEN = "s3cret-token"
REVIEWERS = {"ann": "ann-own-token-7f3a", "bob": "bob-own-token-91c2"}
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
        return record(candidate_id, stage="review", action=verdict.value, by=by, note=note)

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
    note, by = extra.pop("note", None), extra.pop("by", "ann")
    if note is not None:
        fields["evidence"] = {"reviewer": by, "note": note}
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


@pytest.fixture
def tokens_file(tmp_path: Path) -> str:
    """A reviewer tokens file naming ann and bob, as `review add-reviewer` writes it."""
    path = tmp_path / "reviewers.txt"
    lines = [f"{name}:{token_digest(token)}" for name, token in REVIEWERS.items()]
    path.write_text("# reviewers\n" + "\n".join(lines) + "\n", encoding="utf-8")
    return str(path)


def make_client(
    feed: FakeFeed, ops: FakeOps, token: str = "", tokens_file: str = "", header: str = ""
) -> TestClient:
    settings = Settings(
        web_token=token, reviewer_tokens_file=tokens_file, reviewer_identity_header=header
    )
    app = build_app(settings, settings.load_policy(), feed=feed, ops=ops)
    return TestClient(TestServer(app))


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


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
            assert "no credential is configured" in (await resp.json())["error"]
    assert ops.calls == []


@pytest.mark.parametrize(("path", "body"), WRITES)
@pytest.mark.parametrize(
    "authorization",
    [None, "Bearer wrong", f"Basic {TOKEN}", f"Bearer {TOKEN}x", "Bearer ", "Bearer é"],
)
async def test_writes_refused_with_a_wrong_token(feed, ops, tokens_file, path, body, authorization):
    headers = {} if authorization is None else {"Authorization": authorization}
    async with make_client(feed, ops, TOKEN, tokens_file) as client:
        resp = await client.post(path, json=body, headers=headers)
        assert resp.status == 401
        assert resp.headers["WWW-Authenticate"] == "Bearer"
    assert ops.calls == []


AUTH = bearer(TOKEN)
ANN = bearer(REVIEWERS["ann"])


@pytest.mark.parametrize(
    ("path", "data", "message"),
    [
        ("/api/review/c-wait", b"not json", "JSON object"),
        ("/api/review/c-wait", b"[1, 2]", "JSON object"),
        ("/api/review/c-wait", b'{"note": "x"}', "verdict"),
        ("/api/review/c-wait", b'{"verdict": "maybe"}', "verdict"),
        ("/api/review/c-wait", b'{"verdict": "accept", "note": 3}', '"note"'),
        ("/api/kill-switch", b"", "JSON object"),
        ("/api/kill-switch", b'{"by": "ann"}', '"on"'),
        ("/api/kill-switch", b'{"on": "true", "by": "ann"}', '"on"'),
        ("/api/kill-switch", b'{"on": 1, "by": "ann"}', '"on"'),
    ],
)
async def test_bad_bodies_are_400_with_a_clear_message(feed, ops, tokens_file, path, data, message):
    async with make_client(feed, ops, TOKEN, tokens_file) as client:
        resp = await client.post(path, data=data, headers=ANN)
        assert resp.status == 400
        assert message in (await resp.json())["error"]
    assert ops.calls == []


@pytest.mark.parametrize("data", [b'{"on": true}', b'{"on": true, "by": "  "}'])
async def test_the_shared_token_flips_the_kill_switch_only_under_a_typed_name(feed, ops, data):
    async with make_client(feed, ops, TOKEN) as client:
        resp = await client.post("/api/kill-switch", data=data, headers=AUTH)
        assert resp.status == 400
        assert '"by"' in (await resp.json())["error"]
    assert ops.calls == []


async def test_a_verdict_is_recorded_under_the_reviewers_own_name(feed, ops, tokens_file):
    async with make_client(feed, ops, TOKEN, tokens_file) as client:
        resp = await client.post(
            "/api/review/c-wait",
            json={"verdict": "reject", "by": "mallory", "note": "made up"},  # "by" is ignored
            headers=ANN,
        )
        assert resp.status == 200, await resp.text()
        body = await resp.json()
        assert body["decision"]["action"] == "reject"
        assert body["decision"]["evidence"]["reviewer"] == "ann"
        assert "note" not in body["decision"]["evidence"]  # the sanitized record only

        resp = await client.post("/api/review/c-unknown", json={"verdict": "accept"}, headers=ANN)
        assert resp.status == 404
        assert "not waiting" in (await resp.json())["error"]

        # A reviewer's kill switch is recorded under their name too, not a typed one.
        resp = await client.post("/api/kill-switch", json={"on": True, "by": "x"}, headers=ANN)
        assert resp.status == 200
        summary = await (await client.get("/api/summary")).json()
        assert summary["kill_switch"]["on"] is True
        assert summary["kill_switch"]["by"] == "ann"
        # The shared token flips it under the name its holder types.
        resp = await client.post("/api/kill-switch", json={"on": False, "by": "ops"}, headers=AUTH)
        assert resp.status == 200
    assert ops.calls == [
        ("decide", "c-wait", HumanVerdict.REJECT, "ann", "made up"),
        ("decide", "c-unknown", HumanVerdict.ACCEPT, "ann", ""),
        ("kill_switch", True, "ann"),
        ("kill_switch", False, "ops"),
    ]


async def test_two_reviewers_each_record_their_own_identity(feed, ops, tokens_file):
    ops.waiting = {"c-1", "c-2"}
    async with make_client(feed, ops, TOKEN, tokens_file) as client:
        for cid, name in (("c-1", "ann"), ("c-2", "bob")):
            me = await (await client.get("/api/me", headers=bearer(REVIEWERS[name]))).json()
            assert me == {"reviewer": name, "full": True, "via": "reviewer token"}
            resp = await client.post(
                f"/api/review/{cid}",
                json={"verdict": "accept", "by": "somebody else"},
                headers=bearer(REVIEWERS[name]),
            )
            assert resp.status == 200, await resp.text()
            assert (await resp.json())["decision"]["evidence"]["reviewer"] == name
    assert [(c[1], c[3]) for c in ops.calls] == [("c-1", "ann"), ("c-2", "bob")]


@pytest.mark.parametrize(
    "headers",
    [
        {},
        bearer(TOKEN),  # the shared token reads, but names nobody
        bearer("not-a-reviewer"),
        bearer(REVIEWERS["ann"] + "x"),
        {"X-Forwarded-User": "ann"},  # no proxy is configured: the header proves nothing
    ],
)
async def test_a_verdict_without_a_reviewers_credential_is_refused(feed, ops, tokens_file, headers):
    async with make_client(feed, ops, TOKEN, tokens_file) as client:
        resp = await client.post("/api/review/c-wait", json={"verdict": "accept"}, headers=headers)
        assert resp.status in (401, 403), await resp.text()
        if headers == bearer(TOKEN):
            assert resp.status == 403
            assert "reviewer's own credential" in (await resp.json())["error"]
    assert ops.calls == []  # nothing written
    assert ops.waiting == {"c-wait"}


async def test_the_proxy_header_names_the_reviewer_only_when_set(feed, ops, tokens_file):
    proxied = {"X-Forwarded-User": "carol@example.org"}
    async with make_client(feed, ops, tokens_file=tokens_file) as client:  # setting off
        me = await (await client.get("/api/me", headers=proxied)).json()
        assert me == {"reviewer": None, "full": False, "via": "public"}
        resp = await client.post("/api/review/c-wait", json={"verdict": "accept"}, headers=proxied)
        assert resp.status == 401
        review = await (await client.get("/api/review", headers=proxied)).json()
        assert review["texts"] is False
    assert ops.calls == []

    async with make_client(feed, ops, header="X-Forwarded-User") as client:  # setting on
        me = await (await client.get("/api/me", headers=proxied)).json()
        assert me == {"reviewer": "carol@example.org", "full": True, "via": "proxy"}
        review = await (await client.get("/api/review", headers=proxied)).json()
        assert review["pending"][0]["texts"]["response"] == RAW_ANSWER
        resp = await client.post(
            "/api/review/c-wait", json={"verdict": "accept", "by": "ann"}, headers=proxied
        )
        assert resp.status == 200, await resp.text()
        assert (await resp.json())["decision"]["evidence"]["reviewer"] == "carol@example.org"
        # Without the header (a request that did not come through the proxy): public.
        resp = await client.post("/api/review/c-wait", json={"verdict": "accept"})
        assert resp.status == 401
        bad = await client.get("/api/me", headers={"X-Forwarded-User": "two words"})
        assert bad.status == 403
        token = await client.get("/api/me", headers=ANN)  # no tokens here: the proxy names
        assert token.status == 403 and "takes no tokens" in (await token.json())["error"]
    assert ops.calls == [("decide", "c-wait", HumanVerdict.ACCEPT, "carol@example.org", "")]


async def test_an_edited_tokens_file_counts_from_the_next_request(feed, ops, tokens_file):
    async with make_client(feed, ops, tokens_file=tokens_file) as client:
        assert (await client.get("/api/me", headers=ANN)).status == 200
        text = Path(tokens_file).read_text(encoding="utf-8")
        Path(tokens_file).write_text(
            "\n".join(line for line in text.splitlines() if not line.startswith("ann:")) + "\n",
            encoding="utf-8",
        )
        assert (await client.get("/api/me", headers=ANN)).status == 401  # ann revoked
        bob = await (await client.get("/api/me", headers=bearer(REVIEWERS["bob"]))).json()
        assert bob["reviewer"] == "bob"
        Path(tokens_file).write_text("bob:not-a-digest\n", encoding="utf-8")
        # A broken file admits nobody until fixed, rather than keeping revoked tokens alive.
        assert (await client.get("/api/me", headers=bearer(REVIEWERS["bob"]))).status == 401


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


WEAKEST = "The refund window is ninety days for every customer."
WINDOW = "Refunds are accepted within thirty days of delivery, receipt required."
READER_CLAIMS = ("Orders ship from the Leeds depot.", "Returns are free of charge.")


def claim_record(candidate_id: str) -> dict[str, Any]:
    """A geometry record carrying answer text where the stage puts it: the weakest claim,
    the window that backs it best, every claim the reader read, and a reason quoting it."""
    return record(
        candidate_id,
        stage="geometry",
        action="scored",
        score=1.2,
        method="sgi",
        reason=f"P(grounded) 0.41; weakest claim: {WEAKEST}",
        evidence={
            "geometry": {"value": 1.2, "method": "sgi", "flagged": False},
            "grounding_probability": 0.41,
            "weakest_claim": {"claim": WEAKEST, "window": WINDOW, "score": 0.2, "claims": 3},
            "reader": {
                "name": "reader-x",
                "claims": [
                    {"text": text, "span": [0, len(text)], "support": 0.9} for text in READER_CLAIMS
                ],
            },
        },
    )


ANSWER_TEXTS = (WEAKEST, WINDOW, *READER_CLAIMS)


async def read_event(events: Any, candidate_id: str) -> bytes:
    data = b""
    while f'"candidate_id":"{candidate_id}"'.encode() not in data or not data.endswith(b"\n\n"):
        data += await asyncio.wait_for(events.content.readany(), 5)
    return data


async def test_without_a_credential_only_the_public_projection_is_served(feed, ops, tokens_file):
    async with make_client(feed, ops, TOKEN, tokens_file) as client:
        anonymous = await client.get("/api/events")
        assert anonymous.headers["Content-Type"].startswith("text/event-stream")
        signed = await client.get("/api/events", headers=ANN)
        feed.queue.put_nowait(claim_record("c-text"))
        feed.queue.put_nowait(rules_hit_record("c-pii"))
        await wait_for_records(client, 2)

        public = [
            await (await client.get("/api/decisions")).text(),
            await (await client.get("/api/decisions", params={"candidate_id": "c-text"})).text(),
            (await read_event(anonymous, "c-pii")).decode(),
            await (await client.get("/api/summary")).text(),
        ]
        for text in public:
            for secret in (*ANSWER_TEXTS, SECRET_SPAN):
                assert secret not in text
        (served,) = loads(public[1])["decisions"]
        # The allow-list's fields: ids, words, numbers; the reason as a code, never text.
        assert served["public_schema_version"] == 1
        assert (served["candidate_id"], served["stage"], served["action"]) == (
            "c-text",
            "geometry",
            "scored",
        )
        assert served["evidence"]["grounding_probability"] == 0.41
        assert served["reason_code"] == "geometry.scored"
        assert "reason" not in served and "hash" not in served
        assert loads(public[0])["full"] is False

        # With a credential (a reviewer's, or the shared token): the whole sanitized record.
        for headers in (ANN, AUTH):
            text = await (
                await client.get(
                    "/api/decisions", params={"candidate_id": "c-text"}, headers=headers
                )
            ).text()
            for secret in ANSWER_TEXTS:
                assert secret in text
            (whole,) = loads(text)["decisions"]
            assert whole["evidence"]["weakest_claim"]["window"] == WINDOW
        streamed = (await read_event(signed, "c-text")).decode()
        for secret in ANSWER_TEXTS:
            assert secret in streamed
        # Private evidence stays out even then (sanitize's deny-list still applies).
        pii = await (
            await client.get("/api/decisions", params={"candidate_id": "c-pii"}, headers=ANN)
        ).text()
        assert SECRET_SPAN not in pii
        assert loads(pii)["decisions"][0]["evidence"]["rules"] == {"action": "review"}

        # A wrong token is refused, not served the public view.
        wrong = await client.get("/api/decisions", headers=bearer("wrong"))
        assert wrong.status == 401
        assert (await client.get("/api/events", headers=bearer("wrong"))).status == 401
        anonymous.close()
        signed.close()


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
        assert RAW_ANSWER not in await resp.text()  # raw texts only with a credential
        review = await resp.json()
        assert [p["candidate_id"] for p in review["pending"]] == ["c-wait"]
        assert review["texts"] is False
        # Ids and times only: the reason is free text that may quote the answer.
        assert set(review["pending"][0]) == {
            "candidate_id", "session_id", "turn", "stage", "route", "gate", "queued_at"
        }  # fmt: skip
        health = await (await client.get("/api/health")).json()
        assert health["status"] == "ok"
        assert health["writes_enabled"] is False


async def test_review_texts_need_a_credential(feed, ops):
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


async def test_an_open_stream_ends_once_its_reviewer_is_removed(
    feed, ops, tokens_file, monkeypatch
):
    monkeypatch.setattr(dashboard_app, "ACCESS_RECHECK_S", 0.0)
    async with make_client(feed, ops, TOKEN, tokens_file) as client:
        signed = await client.get("/api/events", headers=ANN)
        feed.queue.put_nowait(claim_record("c-before"))
        assert WEAKEST in (await read_event(signed, "c-before")).decode()
        # ann leaves: the file is rewritten without her line, as an operator edits it
        kept = [line for line in Path(tokens_file).read_text().splitlines() if "ann:" not in line]
        Path(tokens_file).write_text("\n".join(kept) + "\n", encoding="utf-8")
        feed.queue.put_nowait(claim_record("c-after"))
        rest = await asyncio.wait_for(signed.content.read(), 5)  # the stream ends
        assert b"c-after" not in rest and WEAKEST.encode() not in rest
        assert (await client.get("/api/events", headers=ANN)).status == 401
        signed.close()
