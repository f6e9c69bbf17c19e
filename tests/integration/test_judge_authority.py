"""A ladder that uses its judge, over a real socket: the scripted judge that knows the
labels (tests/fakes/scripted_judge.py) serves the real embedded ladder.

With a judge configured and ``below_review_with_judge = "judge"``, an answer below the
review cut reaches the judge instead of falling back, and the judge's yes is not overruled
by low word coverage in rules (recorded as a finding), while a name absent from every
source still blocks. With no judge, the same inputs under the same policy decide exactly
as under a policy without the new settings. No Kafka: the embedded runner; geometry uses a
fake encoder whose vectors fix each SGI (tests/fixtures/ladder_scenario.py).
"""

from __future__ import annotations

import json
from pathlib import Path

from pipeline.judge.question import unfence_data
from pipeline.policy.document import parse_policy
from pipeline.trail.records import OUTCOME_STAGE, comparable
from tests.fakes.openai_server import FakeOpenAIServer
from tests.fakes.scripted_judge import labelled_judge
from tests.fixtures.fakes import FakeEncoder
from tests.fixtures.ladder_scenario import (
    R_ACCEPT,
    R_NAMED,
    R_REJECT,
    T_ACCEPT,
    T_REJECT,
    VECTORS,
    at,
    cand,
)
from workers.interfaces import StageContext
from workers.runtime.embedded import EmbeddedResult, run_embedded
from workers.runtime.ladder import build_ladder
from workers.runtime.settings import Settings

R_PARAPHRASE = "Erased documents stay recoverable for a quarter of a year, then they are wiped."
"""Right, but in other words: low SGI and almost no content word of the source."""

VECTORS_HERE = {**VECTORS, R_PARAPHRASE: at(T_REJECT), R_NAMED: at(T_REJECT)}
CANDIDATES = [
    cand("paraphrase", R_PARAPHRASE),
    cand("wrong", R_REJECT),
    cand("named", R_NAMED),
    cand("copied", R_ACCEPT),
]
LABELS = {"paraphrase": "right", "wrong": "hallucinated", "named": "right", "copied": "right"}
assert T_ACCEPT > T_REJECT  # copied is auto-accepted, the others are below the review cut

WITH_JUDGE_ROUTE = {"routes": {"default": {"below_review_with_judge": "judge"}}}


def labelled_file(tmp_path: Path) -> Path:
    path = tmp_path / "labelled.jsonl"
    lines = [json.dumps({**c, "metadata": {"label": LABELS[c["id"]]}}) for c in CANDIDATES]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


async def run(policy_extra: dict, judge_url: str = "") -> EmbeddedResult:
    policy = parse_policy({"policy": {"version": "judge-test"}, **policy_extra})
    ctx = StageContext(policy=policy)
    ctx.services["encoder"] = FakeEncoder(VECTORS_HERE)
    settings = Settings(judge_url=judge_url, judge_model="judge" if judge_url else "")
    stages = build_ladder(settings)
    try:
        return await run_embedded(CANDIDATES, stages, ctx)
    finally:
        for stage in stages:
            await stage.close()


def outcome_topics(result: EmbeddedResult) -> dict[str, str]:
    return {cid: rec["topic"] for cid, rec in result.outcomes().items()}


def record(result: EmbeddedResult, cid: str, stage: str) -> dict:
    (found,) = [r for r in result.records if r["candidate_id"] == cid and r["stage"] == stage]
    return found


async def test_below_the_review_cut_the_judge_decides_and_coverage_does_not_overrule_it(
    tmp_path: Path,
) -> None:
    judge = labelled_judge(labelled_file(tmp_path))
    async with FakeOpenAIServer(default=judge) as server:
        result = await run(WITH_JUDGE_ROUTE, server.base_url)

    assert outcome_topics(result) == {
        "paraphrase": "state",  # the judge's yes, not overruled by word coverage
        "wrong": "escalations.fallback",  # the judge's clear no: the route's on_reject
        "named": "escalations.review",  # a judge's yes, but a name no source holds: a hard fact
        "copied": "state",  # geometry was conclusive: no judge call
    }
    asked = [unfence_data(r["messages"][-1]["content"])["response"] for r in server.requests]
    assert sorted(asked) == sorted([R_PARAPHRASE, R_REJECT, R_NAMED])
    switch = record(result, "paraphrase", "switch")
    assert switch["action"] == "escalate" and "the judge decides" in switch["reason"]
    rules = record(result, "paraphrase", "rules")
    assert rules["evidence"]["accepted_by"] == "judge"
    assert rules["evidence"]["rules"]["hits"] == []
    (finding,) = rules["evidence"]["rules"]["findings"]
    assert finding["rule"] == "source_support" and "covers" in finding["message"]
    named = record(result, "named", "rules")
    assert named["evidence"]["accepted_by"] == "judge"
    assert any("Zorblax" in h["message"] for h in named["evidence"]["rules"]["hits"])
    assert record(result, "copied", "rules")["evidence"]["accepted_by"] == "geometry"


async def test_with_no_judge_the_same_inputs_decide_as_before() -> None:
    before = await run({})
    after = await run(WITH_JUDGE_ROUTE)
    assert outcome_topics(after) == {
        "paraphrase": "escalations.fallback",
        "wrong": "escalations.fallback",
        "named": "escalations.fallback",
        "copied": "state",
    }
    assert [comparable(r) for r in after.records] == [comparable(r) for r in before.records]
    assert not any(r["stage"] == "judge" for r in after.records)
    assert sum(r["stage"] == OUTCOME_STAGE for r in after.records) == len(CANDIDATES)
