"""Concurrent review verdicts on the real broker: exactly one wins, the others are told who
decided first, and a verdict abandoned between its claim and its routing is completed as
it was given, never lost (issue 9, item 6); on the dashboard, each racing reviewer is the
name their own token proves, never a typed one. The reviewers hold the review key
(`groundstream keys generate`): a verdict is signed with it, and the pending list takes a
`review` record as a verdict only when the review key signed it."""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import replace
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer

from pipeline.policy.document import load_policy
from pipeline.stages.review import Claim, HumanVerdict
from pipeline.trail.records import make_record
from tests.integration.conftest import consume_all, produce
from tests.integration.harness import cli, worker_env
from topics.codec import dumps
from topics.conclusion import read_conclusion
from topics.names import Topic
from topics.schema import Envelope, candidate_from_dict, parse_envelope
from topics.security.keys import load_signer, load_trusted
from topics.security.signatures import sign, verify
from workers.runtime import review
from workers.runtime.review import AlreadyDecided, decide, pending
from workers.runtime.reviewers import token_digest
from workers.runtime.settings import Settings

REVIEWERS = ("alice", "bob", "carol", "dave")
OUT = [t for t in Topic if t not in (Topic.CONTROL, Topic.DECISIONS, Topic.REVIEW)]


def parked(cid: str) -> Envelope:
    c = candidate_from_dict(
        {"id": cid, "session_id": f"s-{cid}", "question": "Q?", "response": "A.", "context": "C."}
    )
    trail = ({"stage": "judge", "action": "escalate", "reason": "judge unsure", "gate": "u"},)
    return Envelope(c, route="default", mode="evaluate", trail=trail, last_hash=f"park-{cid}")


async def park(settings: Settings, env: Envelope) -> None:
    key = env.candidate.session_id.encode()
    await produce(settings.bootstrap_servers, settings.topic(Topic.REVIEW), [(key, env.encode())])


async def routed(settings: Settings, cid: str) -> list[tuple[str, Envelope]]:
    """Every envelope of `cid` sent on from review (committed only), with its topic: for a
    conclusion, the terminal topic it is bound for (no terminal writer runs here)."""
    out = []
    for topic in OUT:
        for r in await consume_all(
            settings.bootstrap_servers, settings.topic(topic), timeout=5,
            isolation_level="read_committed",
        ):  # fmt: skip
            try:
                env = parse_envelope(r.value)
            except ValueError:
                continue
            if env.candidate.id == cid:
                name = topic.value
                if topic is Topic.CONCLUDED:
                    bound = read_conclusion(r.value, tuple(r.headers)).topic
                    name = bound.removeprefix(settings.topic_prefix)
                out.append((name, env))
    return out


async def review_records(settings: Settings, cid: str) -> list[dict]:
    from topics.codec import loads

    records = await consume_all(
        settings.bootstrap_servers, settings.topic(Topic.DECISIONS), timeout=5,
        isolation_level="read_committed",
    )  # fmt: skip
    return [
        rec
        for rec in map(loads, (r.value for r in records))
        if rec["candidate_id"] == cid and rec["stage"] == "review"
    ]


async def signers(settings: Settings, cid: str) -> set[str]:
    """Who signed `cid`'s records on `decisions` and its conclusion on `concluded`."""
    public = load_trusted(settings.trusted_keys_dir)
    out = set()
    for topic in (Topic.DECISIONS, Topic.CONCLUDED):
        for r in await consume_all(
            settings.bootstrap_servers, settings.topic(topic), timeout=5,
            isolation_level="read_committed",
        ):  # fmt: skip
            if cid.encode() in r.value:
                out.add(verify(public, topic.value, r.key, r.value, tuple(r.headers)))
    return out


async def forge_review_record(settings: Settings, env: Envelope, key_file: str, as_: str) -> None:
    """A `review` record deciding `env`'s parking, signed with another stage's key."""
    record = make_record(
        candidate_id=env.candidate.id, session_id=env.candidate.session_id, turn=0,
        stage="review", action="reject", write_to_state=False, reason="forged",
        policy_version="p", decided_at=1_700_000_000.0, mode="evaluate", route="default",
        prev_hash=env.last_hash,
    )  # fmt: skip
    value, key = dumps(record), env.candidate.session_id.encode()
    headers = sign(load_signer(key_file, as_), Topic.DECISIONS.value, key, value)
    producer = AIOKafkaProducer(bootstrap_servers=settings.bootstrap_servers, acks="all")
    await producer.start()
    try:
        await producer.send_and_wait(
            settings.topic(Topic.DECISIONS), value, key=key, headers=list(headers)
        )
    finally:
        await producer.stop()


@pytest.fixture
def env(kafka_bootstrap: str, topic_prefix: str, tmp_path: Path) -> dict[str, str]:
    env = worker_env(kafka_bootstrap, topic_prefix, tmp_path)
    cli(env, "topics", "create")
    keys, trusted = tmp_path / "keys", tmp_path / "trusted"
    cli(env, "keys", "generate", "--out", str(keys))
    trusted.mkdir()
    for public in keys.glob("*.pub"):
        (trusted / public.name).write_bytes(public.read_bytes())
    return env | {
        "GROUNDSTREAM_SIGNING_KEY_FILE": str(keys / "review.key"),
        "GROUNDSTREAM_TRUSTED_KEYS_DIR": str(trusted),
    }


@pytest.fixture
def settings(env: dict[str, str]) -> Settings:
    return Settings.from_env(env)


async def test_concurrent_verdicts_exactly_one_wins(settings: Settings, env) -> None:
    policy = load_policy(None)
    await park(settings, parked("race-1"))
    shown = (await asyncio.to_thread(cli, env, "review", "show", "race-1")).stdout
    for text in ("question:\n  Q?", "context [0] (retrieval):\n  C.", "answer:\n  A."):
        assert text in shown, shown
    listed = (await asyncio.to_thread(cli, env, "review", "list", "--json", "--texts")).stdout
    (item,) = [json.loads(line) for line in listed.splitlines()]
    assert item["texts"] == {
        "question": "Q?",
        "context": ["C."],
        "sources": ["retrieval"],
        "answer": "A.",
    }
    verdicts = [HumanVerdict.ACCEPT, HumanVerdict.REJECT] * 2
    results = await asyncio.gather(
        *(
            decide(settings, policy, "race-1", v, by, "")
            for by, v in zip(REVIEWERS, verdicts, strict=True)
        ),
        return_exceptions=True,
    )
    won = [r for r in results if isinstance(r, dict)]
    lost = [r for r in results if isinstance(r, AlreadyDecided)]
    assert len(won) == 1 and len(lost) == len(REVIEWERS) - 1, results
    winner = won[0]["evidence"]["reviewer"]
    for exc in lost:
        assert f"already decided by {winner} at " in str(exc)

    sent = await routed(settings, "race-1")
    print(f"\nconcurrent verdicts {len(REVIEWERS)}: won {len(won)}, refused {len(lost)}, "
          f"routed {len(sent)}")  # fmt: skip
    assert len(sent) == 1
    assert sent[0][1].human is not None and sent[0][1].human.by == winner
    assert len(await review_records(settings, "race-1")) == 1
    assert await signers(settings, "race-1") == {"review"}
    assert "race-1" not in {p.envelope.candidate.id for p in await pending(settings)}
    with pytest.raises(AlreadyDecided, match=f"already decided by {winner}"):
        await decide(settings, policy, "race-1", HumanVerdict.ACCEPT, "erin", "")


async def test_an_abandoned_claim_is_completed_as_given(settings: Settings, monkeypatch) -> None:
    policy = load_policy(None)
    env = parked("crash-1")
    await park(settings, env)
    # carol's verdict was claimed, then her process died before routing it.
    claim = Claim("c0ffee", "crash-1", env.last_hash, "reject", "carol", "", time.time())
    await review._send_claim(settings, claim)
    listed = {p.envelope.candidate.id: p for p in await pending(settings)}
    assert listed["crash-1"].summary()["claimed_by"] == "carol"  # still listed

    with pytest.raises(AlreadyDecided, match="already decided by carol"):
        await decide(settings, policy, "crash-1", HumanVerdict.ACCEPT, "dave", "")
    assert await routed(settings, "crash-1") == []  # too fresh to take over

    monkeypatch.setattr(review, "CLAIM_STALE_SECONDS", 0.0)
    with pytest.raises(AlreadyDecided, match="already decided by carol"):
        await decide(settings, policy, "crash-1", HumanVerdict.ACCEPT, "dave", "")
    sent = await routed(settings, "crash-1")
    # carol's reject is what was routed, to the reject topic: not dave's accept to rules.
    assert [(topic, e.human.by, e.human.verdict) for topic, e in sent] == [
        (Topic.REJECT.value, "carol", "reject")
    ]


async def test_a_candidate_parked_again_after_a_verdict_is_listed_again(settings: Settings) -> None:
    policy = load_policy(None)
    first = parked("again-1")
    await park(settings, first)
    await decide(settings, policy, "again-1", HumanVerdict.ACCEPT, "alice", "")
    assert "again-1" not in {p.envelope.candidate.id for p in await pending(settings)}
    # Re-escalated later (a new parking record): it must not vanish from the list.
    await park(settings, replace(first, last_hash="park-again-1-second"))
    listed = {p.envelope.candidate.id: p for p in await pending(settings)}
    assert listed["again-1"].envelope.last_hash == "park-again-1-second"
    record = await decide(settings, policy, "again-1", HumanVerdict.REJECT, "bob", "")
    assert (record["action"], record["prev_hash"]) == ("reject", "park-again-1-second")


async def test_racing_reviewers_on_the_dashboard_are_their_tokens_names(
    settings: Settings, tmp_path: Path
) -> None:
    from aiohttp.test_utils import TestClient, TestServer

    from workers.web.app import build_app

    tokens = {name: f"{name}-own-token" for name in REVIEWERS}
    tokens_file = tmp_path / "reviewers.txt"
    tokens_file.write_text("".join(f"{n}:{token_digest(t)}\n" for n, t in tokens.items()))
    served = replace(settings, reviewer_tokens_file=str(tokens_file))
    await park(settings, parked("race-web"))
    async with TestClient(TestServer(build_app(served, load_policy(None)))) as client:

        async def verdict(name: str, verdict: str) -> tuple[int, dict]:
            resp = await client.post(
                "/api/review/race-web",
                json={"verdict": verdict, "by": "typed-name"},  # ignored: the token names them
                headers={"Authorization": f"Bearer {tokens[name]}"},
            )
            return resp.status, await resp.json()

        answers = await asyncio.gather(
            *(verdict(n, v) for n, v in zip(REVIEWERS, ["accept", "reject"] * 2, strict=True))
        )
    won = [body for status, body in answers if status == 200]
    lost = [body["error"] for status, body in answers if status == 409]
    assert len(won) == 1 and len(lost) == len(REVIEWERS) - 1, answers
    winner = won[0]["decision"]["evidence"]["reviewer"]
    assert winner in REVIEWERS
    assert all(f"already decided by {winner} at " in error for error in lost), lost
    (record,) = await review_records(settings, "race-web")
    assert record["evidence"]["reviewer"] == winner
    (sent,) = await routed(settings, "race-web")
    assert sent[1].human is not None and sent[1].human.by == winner


async def test_a_review_record_another_stage_signed_does_not_hide_a_parked_answer(
    settings: Settings,
) -> None:
    env = parked("hidden-1")
    await park(settings, env)
    keys = Path(settings.signing_key_file).parent
    await forge_review_record(settings, env, str(keys / "judge.key"), "judge")
    await forge_review_record(settings, env, str(keys / "judge.key"), "review")
    assert "hidden-1" in {p.envelope.candidate.id for p in await pending(settings)}
    record = await decide(settings, load_policy(None), "hidden-1", HumanVerdict.REJECT, "bob", "")
    assert record["prev_hash"] == env.last_hash
    assert "hidden-1" not in {p.envelope.candidate.id for p in await pending(settings)}
