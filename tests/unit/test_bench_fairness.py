"""`bench fairness` sends what the issue describes: answers that pass validation yet are
expensive, spread among the ordinary candidates (issue 23, item 4)."""

from __future__ import annotations

from pipeline.guards.admission import WorkCaps, admit
from topics.codec import dumps
from topics.schema import parse_candidate
from workers.bench.data import unique_candidates
from workers.bench.fairness import BIG_BYTES, CLAIMS, HOSTILE, big_answer, many_claims, mixed
from workers.runtime.settings import Settings

LIMIT = Settings().max_candidate_bytes


def test_the_big_answer_is_900_kb_and_passes_validation() -> None:
    raw = dumps(big_answer("t", 0))
    assert BIG_BYTES <= len(raw) <= LIMIT
    parse_candidate(raw, max_bytes=LIMIT)  # raises MalformedMessage if it did not pass


def test_the_claims_answer_has_200_claims_and_passes_validation() -> None:
    c = many_claims("t", 0)
    parse_candidate(dumps(c), max_bytes=LIMIT)
    verdict = admit(c["question"], [c["context"]], c["response"], WorkCaps(response_words=10**6))
    assert dict(verdict.measures)["claims"] == CLAIMS
    assert not verdict.admitted


def test_the_hostile_ones_are_spread_among_the_ordinary() -> None:
    ordinary = unique_candidates(100, "o")
    rows = mixed(ordinary, many_claims, "h")
    at = [i for i, r in enumerate(rows) if r["id"].startswith("h-")]
    assert len(rows) == 100 + HOSTILE and len(at) == HOSTILE
    assert at[0] > 0 and at[-1] < len(rows) - 1
    assert [r for r in rows if not r["id"].startswith("h-")] == ordinary
