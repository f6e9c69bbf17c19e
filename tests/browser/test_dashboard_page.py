"""The dashboard as a person uses it: headless Chromium on the page, the real broker behind.

A fresh visitor sees an empty but whole page; records produced on `decisions` move the
cards and charts without a reload; a candidate's trail is found by its id; a reviewer
signs in on the page with their own token, reads the texts and accepts an item, which
reaches `state` under their name; and an action without a reviewer's token is refused on
the page with a message that says why.
"""

from __future__ import annotations

import asyncio
import random
import time
from pathlib import Path
from typing import Any

import pytest
from playwright.async_api import expect

from tests.integration.conftest import (
    DASHBOARD_TOKEN,
    REVIEWER_TOKENS,
    consume_all,
    decision_record,
    produce,
    send_decisions,
)
from tests.integration.harness import Workers, worker_env
from topics.names import Topic
from topics.schema import Candidate, Envelope, parse_envelope
from workers.runtime.settings import Settings

from .conftest import SCREENSHOTS, Visit, open_tab

pytestmark = pytest.mark.integration

QUESTION = "How long is the refund window?"
CONTEXT = "Refunds are accepted within thirty days of delivery."
RAW_ANSWER = "The refund window is ninety days for every customer"


def ladder(candidate_id: str, at: float, rng: random.Random, thresholds: dict[str, float]):
    """The records one candidate leaves on `decisions` on its way up the ladder."""
    sgi = max(0.0, rng.gauss(1.6, 0.7))
    p = min(0.99, max(0.01, rng.betavariate(4, 1.6)))
    long_form = rng.random() < 0.3  # several sentences: the long-form cuts apply
    accept_cut, review_cut = (
        (thresholds["grounding_accept_long"], thresholds["grounding_review_long"])
        if long_form
        else (thresholds["grounding_accept"], thresholds["grounding_review"])
    )
    timings = {"geometry": rng.uniform(18, 60)}
    records = [
        decision_record(
            candidate_id,
            "geometry",
            "scored",
            decided_at=at,
            score=sgi,
            method="sgi",
            reason=f"SGI {sgi:.3f}; P(grounded) {p:.3f}",
            evidence={"grounding_probability": p, "features": {"long_form": float(long_form)}},
            thresholds=thresholds,
            timings=dict(timings),
        )
    ]

    def step(stage: str, action: str, ms: float, **extra: Any) -> None:
        timings[stage] = ms
        records.append(
            decision_record(
                candidate_id, stage, action, decided_at=at, timings=dict(timings), **extra
            )
        )

    if p >= accept_cut:
        step("switch", "accept", rng.uniform(0.3, 2), score=p, method="grounding")
        step("rules", "accept", rng.uniform(1, 4))
        topic, action = "state", "accept"
    elif p >= review_cut:
        step("switch", "escalate", rng.uniform(0.3, 2), score=p, method="grounding")
        verdict = rng.choice(["accept", "reject", "unresolved", "accept"])
        step("judge", verdict, rng.uniform(250, 900))
        topic, action = {
            "accept": ("state", "accept"),
            "reject": ("escalations.reject", "reject"),
            "unresolved": ("escalations.review", "escalate"),
        }[verdict]
    else:
        step("switch", "reject", rng.uniform(0.3, 2), score=p, method="grounding")
        topic, action = rng.choice(
            [("escalations.fallback", "fallback")] * 4 + [("escalations.regenerate", "regenerate")]
        )
    step("outcome", action, 0.0, topic=topic)
    del records[-1]["timings"]["outcome"]  # an outcome carries the stages' timings only
    return records


def history(n: int, thresholds: dict[str, float], minutes: int = 45) -> list[dict[str, Any]]:
    """`n` candidates spread over the last `minutes`, as a running ladder leaves them."""
    rng = random.Random(13)
    now = time.time()
    out = []
    for i in range(n):
        at = now - minutes * 60 * (1 - i / n) ** 1.3
        out += ladder(f"c-{i:03d}", at, rng, thresholds)
    return out


def count(records: list[dict[str, Any]], topic: str) -> int:
    return sum(1 for r in records if r["stage"] == "outcome" and r.get("topic") == topic)


async def queue_for_review(bootstrap: str, settings: Settings, candidate_id: str) -> None:
    candidate = Candidate(
        id=candidate_id,
        session_id=f"s-{candidate_id}",
        question=QUESTION,
        response=RAW_ANSWER,
        turn=1,
        context=CONTEXT,
    )
    env = Envelope(
        candidate=candidate,
        route="default",
        mode="active",
        trail=({"stage": "judge", "action": "unresolved", "reason": "judge: not sure"},),
    )
    key = candidate.session_id.encode()
    await produce(bootstrap, settings.topic(Topic.REVIEW), [(key, env.encode())])


ANN = REVIEWER_TOKENS["ann"]


async def sign_in(visit: Visit, token: str) -> None:
    """Sign in with a token alone: who it names is the server's answer, not typed."""
    await visit.page.fill("#login-token", token)
    await visit.page.click("#login-ok")


async def test_fresh_visitor_sees_an_empty_whole_page(visit: Visit):
    page = visit.page
    await expect(page.locator("#cards .card")).to_have_count(7)
    await expect(page.locator("#cards .card.state .value")).to_have_text("0")
    await expect(page.locator("#cards .card.review .value")).to_have_text("0")
    await expect(page.locator("#cards .card.review .sub")).to_have_text("0 sent in total")
    await expect(page.locator("#timeline svg")).to_have_count(1)
    await expect(page.locator("#hists")).to_have_text("no geometry scores yet")
    await expect(page.locator("#latency")).to_have_text("no timings yet")
    await expect(page.locator("#review")).to_have_text("nothing waits for review")
    await expect(page.locator("#decisions")).to_have_text("no decisions yet")
    await expect(page.locator("#creds")).to_have_text("Sign in")
    visit.assert_clean()


async def test_produced_records_move_counts_and_charts_live(
    visit: Visit, kafka_bootstrap: str, dashboard_settings: Settings
):
    page = visit.page
    await page.evaluate("window.stillThisPage = true")
    thresholds = dashboard_settings.load_policy().thresholds_dict()
    records = history(150, thresholds)
    await queue_for_review(kafka_bootstrap, dashboard_settings, "rev-screenshot")
    await send_decisions(kafka_bootstrap, dashboard_settings, *records)

    cards = page.locator("#cards")
    await expect(cards.locator(".card.state .value")).to_have_text(str(count(records, "state")))
    await expect(cards.locator(".card.reject .value")).to_have_text(
        str(count(records, "escalations.reject"))
    )
    await expect(cards.locator(".card.plain .value")).to_have_text(f"{len(records):,}")
    review_sent = count(records, "escalations.review")
    await expect(cards.locator(".card.review .sub")).to_have_text(f"{review_sent} sent in total")
    await expect(cards.locator(".card.review .value")).to_have_text("1")  # what waits now
    # Outcomes per minute: a stacked bar segment per outcome and minute.
    await expect(page.locator("#timeline rect.fill.state").first).to_be_attached()
    await expect(page.locator("#timeline rect.fill.fallback").first).to_be_attached()
    # P(grounded), the score the switch routes on, first, its cuts at four decimals.
    first = page.locator("#hists .hist-block").first
    await expect(first).to_have_attribute("data-method", "grounding")
    accept = f"accept {thresholds['grounding_accept']:.4f}"
    await expect(first.locator("text.cut-label", has_text=accept)).to_have_count(1)
    # Long-form answers beside it, under their own cuts.
    long_form = page.locator("#hists [data-method=grounding_long]")
    await expect(long_form.locator(".hist-title .tag")).to_have_text("routed on")
    accept_long = f"accept {thresholds['grounding_accept_long']:.4f}"
    await expect(long_form.locator("text.cut-label", has_text=accept_long)).to_have_count(1)
    # On the SGI axis, or "strong_pass inf (accepts nothing)" at its end when the cut is inf.
    strong = f"strong_pass {thresholds['sgi_strong_pass']:.4f}"
    await expect(
        page.locator("#hists [data-method=sgi] text.cut-label", has_text=strong)
    ).to_have_count(1)
    # Latency per stage, and the whole ladder.
    for stage in ("geometry", "switch", "judge", "whole ladder"):
        await expect(page.locator("#latency th", has_text=stage)).to_have_count(1)
    # One score per row: geometry rows show P(grounded), not SGI beside it.
    newest = records[-1]["candidate_id"]
    geometry_row = page.locator(f'#decisions tr[data-candidate="{newest}"]').last
    await expect(geometry_row.locator("td.score .score-label")).to_have_text("P(grounded)")
    assert await page.evaluate("window.stillThisPage") is True  # no reload happened

    # The screenshot for docs/: a signed-in reviewer's view, texts and all.
    await page.click("#creds")
    await sign_in(visit, ANN)
    await expect(page.locator("#review tr.texts")).to_contain_text(RAW_ANSWER)
    await page.evaluate("window.scrollTo(0, 0)")
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    await page.screenshot(path=str(SCREENSHOTS / "dashboard.png"))
    visit.assert_clean()


async def test_a_candidates_trail_is_found_by_id(
    visit: Visit, kafka_bootstrap: str, dashboard_settings: Settings
):
    thresholds = dashboard_settings.load_policy().thresholds_dict()
    rng = random.Random(7)
    now = time.time()
    wanted = ladder("trail-me", now, rng, thresholds)
    await send_decisions(
        kafka_bootstrap, dashboard_settings, *ladder("other", now, rng, thresholds), *wanted
    )
    page = visit.page
    await expect(page.locator('#decisions tr[data-candidate="other"]').first).to_be_attached()
    await page.fill("#filter", "trail-me")

    rows = page.locator("#decisions tr")
    await expect(rows).to_have_count(len(wanted))
    await expect(page.locator('#decisions tr[data-candidate="other"]')).to_have_count(0)
    trail = page.locator("#trail")
    await expect(trail).to_be_visible()
    for r in wanted:
        label = r["topic"] if r["stage"] == "outcome" else r["stage"]
        await expect(trail.locator(".step strong", has_text=label)).to_have_count(1)
    steps = await trail.locator(".step strong").all_text_contents()
    assert steps[0] == "geometry" and steps[-1] == wanted[-1]["topic"]  # oldest first
    # One arrow between steps, never two (issue 22 saw "→ → escalations.review").
    assert "→ →" not in " ".join((await trail.inner_text()).split())
    assert await trail.locator(".arrow").count() == len(wanted) - 1

    await page.fill("#filter", "no-such-candidate")
    await expect(page.locator("#decisions")).to_have_text("no such candidate")
    visit.assert_clean()


async def test_reviewer_accepts_in_the_page_and_it_reaches_state(
    visit: Visit, kafka_bootstrap: str, dashboard_settings: Settings, tmp_path: Path
):
    # An accepted item passes the rules stage, and the terminal writer delivers it to
    # `state`: run the real workers.
    env = worker_env(kafka_bootstrap, dashboard_settings.topic_prefix, tmp_path / "data")
    workers = [Workers(env, stage, tmp_path / f"{stage}.log") for stage in ("rules", "terminal")]
    try:
        for worker in workers:
            await asyncio.to_thread(worker.start)
        await accept_in_the_page(visit, kafka_bootstrap, dashboard_settings)
    finally:
        for worker in workers:
            await asyncio.to_thread(worker.stop)


async def accept_in_the_page(visit: Visit, kafka_bootstrap: str, settings: Settings) -> None:
    await queue_for_review(kafka_bootstrap, settings, "rev-1")
    page = visit.page
    row = page.locator('#review tr.item[data-candidate="rev-1"]')
    await page.click("#creds")  # the queue shows; its texts wait for the token
    await expect(row).to_be_visible()
    assert RAW_ANSWER not in await page.content()
    await sign_in(visit, ANN)
    await expect(page.locator("#who")).to_have_text("reviewer: ann")
    texts = page.locator("#review tr.texts")
    await expect(texts).to_contain_text(QUESTION)
    await expect(texts).to_contain_text(CONTEXT)
    await expect(texts).to_contain_text(RAW_ANSWER)

    await row.locator("input").fill("matches the policy page")
    await row.locator("button.accept").click()
    await expect(page.locator("#review-msg")).to_have_text("rev-1: accepted by ann")

    on_state = await consume_all(kafka_bootstrap, settings.topic(Topic.STATE), expect=1, timeout=60)
    assert [parse_envelope(r.value).candidate.id for r in on_state] == ["rev-1"]
    await expect(page.locator("#review")).to_have_text("nothing waits for review")
    visit.assert_clean()


async def test_an_action_without_the_token_is_refused_with_a_clear_message(
    visit: Visit, kafka_bootstrap: str, dashboard_settings: Settings
):
    await queue_for_review(kafka_bootstrap, dashboard_settings, "rev-2")
    page = visit.page
    row = page.locator('#review tr.item[data-candidate="rev-2"]')
    await page.reload()  # the queue is read on load; the item was queued after it
    await expect(row).to_be_visible()
    message = page.locator("#review-msg")

    await row.locator("button.accept").click()  # no token yet: the page asks for it
    await expect(page.locator("#login")).to_be_visible()
    await page.click("#login-cancel")
    await expect(message).to_have_text(
        "rev-2: not sent: this action needs your token. Sign in first."
    )

    await row.locator("button.reject").click()  # a wrong token: the server refuses
    await sign_in(visit, "not-the-token")
    await expect(message).to_contain_text("refused: missing or wrong bearer token")
    await expect(message).to_contain_text("Sign in again with your token")
    await expect(page.locator("#creds")).to_have_text("Sign in")  # the wrong token is dropped

    # Signing in again with the right token answers the refusal: it goes at once, not at
    # the next 10-second refresh (issue 22 saw it stay red for 12 s).
    await page.click("#creds")
    await sign_in(visit, ANN)
    await expect(page.locator("#who")).to_have_text("reviewer: ann")
    await expect(message).to_be_hidden(timeout=2_000)
    await page.click("#creds")  # sign out again: nothing below is decided

    # The shared dashboard token reads, but names nobody: the page says so, and the
    # server refuses its verdict.
    await row.locator("button.accept").click()
    await sign_in(visit, DASHBOARD_TOKEN)
    await expect(message).to_contain_text("a verdict needs a reviewer's own credential")
    await expect(page.locator("#who")).to_have_text(
        "signed in with the dashboard token (reads; no verdicts)"
    )
    await page.click("#creds")

    await expect(row).to_be_visible()  # still waiting: nothing was decided
    assert RAW_ANSWER not in await page.content()
    on_state = await consume_all(
        kafka_bootstrap, dashboard_settings.topic(Topic.STATE), expect=1, timeout=2
    )
    assert on_state == []
    visit.assert_clean()


async def rendered_times(rows: Any, n: int, within_s: float = 10.0) -> list[int]:
    """The `data-at` of `rows` once `n` of them are rendered. Why not one read after a count:
    the page may re-render the table between the two (a refresh after a reload replaces its
    rows), and the read then finds none; CI saw `[] == [...]` after a reload."""
    deadline = time.monotonic() + within_s
    while True:
        times = [int(t) for t in await rows.evaluate_all("rs => rs.map(r => r.dataset.at)")]
        if len(times) == n or time.monotonic() > deadline:
            return times
        await asyncio.sleep(0.05)


async def test_issue_22_order_dead_letters_kill_switch_time_and_deep_bodies(
    visit: Visit, kafka_bootstrap: str, dashboard_settings: Settings
):
    """What a newcomer saw in the browser (issue 22, item 6), each kept fixed."""
    from workers.runtime.control import publish_kill_switch

    page = visit.page
    now = time.time()
    # Records of several sessions (so several partitions) arrive out of time order.
    late = [decision_record(f"o-{i}", "geometry", "scored", decided_at=now - 60 + at)
            for i, at in enumerate((30, 10, 50, 20, 40))]  # fmt: skip
    dead = decision_record(
        "dead-1", "outcome", "deadletter", topic="deadletter", route="", mode="", reason="bad json"
    )
    await send_decisions(kafka_bootstrap, dashboard_settings, *late, dead)
    rows = page.locator("#decisions tr[data-at]")
    await expect(rows).to_have_count(len(late) + 1)
    times = await rendered_times(rows, len(late) + 1)
    assert times == sorted(times, reverse=True), times  # "Recent decisions": newest first
    await page.reload()  # the same order as the server sends it on load
    await expect(rows).to_have_count(len(late) + 1)
    again = await rendered_times(rows, len(late) + 1)
    assert again == times

    # A dead letter has no route or mode to show: not "? / ?".
    await expect(page.locator("#routes")).to_contain_text("dead-lettered / before routing")
    assert "? / ?" not in await page.locator("#routes").inner_text()

    # The kill switch banner tells the time in 24 hours, as the rest of the page does.
    await publish_kill_switch(
        dashboard_settings.kafka(), dashboard_settings.topic(Topic.CONTROL), True, "ops"
    )
    banner = page.locator("#banner-detail")
    await expect(banner).to_contain_text("Turned on by ops at ")
    text = await banner.inner_text()
    assert "AM" not in text and "PM" not in text, text
    assert any(part.count(":") == 2 for part in text.split()), text

    # A body nested 300 deep is refused as too deep, not as "not a JSON object".
    answer = await page.evaluate(
        """async (token) => {
            const deep = "[".repeat(300) + "]".repeat(300);
            const res = await fetch("/api/kill-switch", {method: "POST",
                headers: {"Content-Type": "application/json", Authorization: `Bearer ${token}`},
                body: `{"on": false, "by": "ops", "x": ${deep}}`});
            return [res.status, (await res.json()).error];
        }""",
        DASHBOARD_TOKEN,
    )
    assert answer == [400, "body refused: nesting deeper than 64 levels"]
    visit.assert_clean()  # and no favicon (or anything else) missing


async def test_behind_a_proxy_the_page_is_the_proxys_reviewer_without_signing_in(
    kafka_bootstrap: str, dashboard_settings: Settings
):
    from dataclasses import replace

    from aiohttp import web

    from workers.web.app import build_app

    proxied = replace(dashboard_settings, reviewer_identity_header="X-Forwarded-User")
    runner = web.AppRunner(build_app(proxied, proxied.load_policy()))
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    await queue_for_review(kafka_bootstrap, dashboard_settings, "rev-proxy")
    try:
        headers = {"X-Forwarded-User": "carol@example.org"}
        async with open_tab(f"http://{host}:{port}", headers) as visit:
            page = visit.page
            await expect(page.locator("#who")).to_have_text("reviewer: carol@example.org")
            await expect(page.locator("#creds")).to_be_hidden()  # nothing to sign in to
            row = page.locator('#review tr.item[data-candidate="rev-proxy"]')
            await expect(row).to_be_visible()
            await expect(page.locator("#review tr.texts")).to_contain_text(RAW_ANSWER)
            await row.locator("button.reject").click()
            await expect(page.locator("#review-msg")).to_have_text(
                "rev-proxy: rejected by carol@example.org"
            )
            visit.assert_clean()
    finally:
        await runner.cleanup()
