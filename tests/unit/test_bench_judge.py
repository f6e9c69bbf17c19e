"""`bench judge`'s pure parts: the busiest 60 s, the out-of-fold frontier on the judge's
actual replies and its printing, the audit of outcomes; and its scripted judge on a real
socket, read back by the judge client."""

from __future__ import annotations

import json

import numpy as np
import pytest

from pipeline.errors import DataFileError
from pipeline.judge.question import JudgeConfig, JudgeVerdict, decide_judge
from pipeline.policy.breaker import BreakerConfig
from workers.bench.judge import (
    audit,
    frontier,
    labelled_answers,
    most_in_window,
    outcome_row,
    render_frontier,
)
from workers.bench.judge_fake import ScriptedJudge, judge_is_right
from workers.clients.llm import ChatEndpoint


def test_most_in_window_is_the_busiest_half_open_minute() -> None:
    assert most_in_window([]) == 0
    assert most_in_window([5.0]) == 1
    # 0, 30, 59.9 in one minute; 60 starts the next ([0, 60) holds three).
    assert most_in_window([0.0, 30.0, 59.9, 60.0]) == 3
    assert most_in_window([0.0, 60.0, 120.0]) == 1
    # Unsorted input, a burst later on.
    times = [200.0, 0.0, 201.0, 10.0, 202.5, 259.0, 260.0]
    assert most_in_window(times) == 4  # 200, 201, 202.5, 259
    # Against the brute force on random times.
    rng = np.random.default_rng(7)
    for _ in range(20):
        t = rng.uniform(0, 300, size=rng.integers(1, 80)).tolist()
        brute = max(sum(1 for u in t if s <= u < s + 60.0) for s in t)
        assert most_in_window(t) == brute
    assert most_in_window([0.0, 1.0, 2.5], window=2.0) == 2


def test_outcome_row_counts_accepts_and_judged_yeses() -> None:
    y = np.array([1, 1, 0, 0, 1], bool)
    accepted = np.array([1, 0, 1, 0, 0], bool)
    asked = np.array([0, 1, 0, 1, 1], bool)
    yes = np.array([1, 1, 1, 1, 0], bool)  # the unasked answers' replies do not count
    row = outcome_row("x", y, accepted, asked, yes)
    assert (row.n, row.n_right, row.right, row.wrong, row.asked) == (5, 3, 2, 2, 3)
    assert row.right_share == 2 / 3 and row.wrong_share == 0.5 and row.asked_share == 0.6


def test_the_frontier_asks_more_as_the_share_grows_and_ends_with_every_answer() -> None:
    rng = np.random.default_rng(0)
    n = 400
    y = rng.random(n) < 0.6
    p = np.clip(np.where(y, rng.normal(0.7, 0.2, n), rng.normal(0.35, 0.2, n)), 0, 1)
    yes = np.where(rng.random(n) < 0.85, y, ~y)  # an 85% judge's replies
    groups = [f"g{i // 4}" for i in range(n)]
    shares = (0.0, 0.2, 0.5, 0.9)
    rows = frontier(p, y, yes, groups, shares, accuracy=0.85, max_error=0.05, folds=5)
    assert [r.label for r in rows] == ["0.00", "0.20", "0.50", "0.90", "every answer"]
    asked = [r.asked_share for r in rows[:-1]]
    assert asked[0] == 0.0
    assert all(a <= s + 0.08 for a, s in zip(asked, shares, strict=True))  # out of fold
    assert asked == sorted(asked) and asked[-1] > 0.2
    every = rows[-1]
    assert every.asked == n
    assert every.right == int((y & yes).sum()) and every.wrong == int((~y & yes).sum())
    # The band keeps state cleaner than judging everything with this judge.
    assert rows[2].wrong_share < every.wrong_share
    lines = render_frontier("data.jsonl", rows, chosen="0.50")
    assert lines[0].startswith(f"data.jsonl: {n} answers, {int(y.sum())} right")
    assert "right→state" in lines[1] and "state wrong" in lines[1] and "asked" in lines[1]
    starred = [line for line in lines if "*" in line]
    assert len(starred) == 1 and starred[0].split()[0] == "0.50"
    assert lines[-1].split()[:2] == ["every", "answer"]
    assert lines[-1].split()[-1] == "100.0%"


def test_a_perfect_ranking_fits_a_band_that_needs_no_judge() -> None:
    y = np.array([0] * 50 + [1] * 50, bool)
    p = np.linspace(0.01, 0.99, 100)
    yes = ~y  # a judge that is always wrong: never asked, nothing lost
    groups = [str(i) for i in range(100)]
    rows = frontier(p, y, yes, groups, (0.5,), accuracy=0.85, max_error=0.05, folds=5)
    # Out of fold a cut fitted in a gap of the other folds may let one boundary answer by.
    assert rows[0].asked == 0 and rows[0].wrong <= 1 and rows[0].right_share > 0.9
    assert rows[-1].right == 0 and rows[-1].wrong == 50


def _rec(cid: str, stage: str, **kw) -> dict:
    return {"candidate_id": cid, "stage": stage, **kw}


def test_audit_counts_outcomes_and_state_without_a_yes() -> None:
    records = [
        _rec("a", "judge", action="accept", gate=None, level="yes", evidence={"cache": "miss"}),
        _rec("a", "outcome", topic="state"),
        _rec("b", "judge", action="review", gate="judge_budget", level=None, evidence={}),
        _rec("b", "outcome", topic="escalations.review"),
        _rec("c", "judge", action="accept", gate=None, level="yes", evidence={"cache": "hit"}),
        _rec("c", "outcome", topic="state"),
        _rec("d", "switch", action="accept"),
        _rec("d", "outcome", topic="state"),
        _rec("e", "judge", action="reject", gate=None, level="no", evidence={"cache": "miss"}),
        _rec("e", "outcome", topic="escalations.reject"),
        _rec("e", "outcome", topic="escalations.reject"),  # twice: not exactly one
        _rec("f", "judge", action="escalate", gate="grounding_veto", level="yes", evidence={}),
        _rec("f", "outcome", topic="state"),  # a veto's yes is no accept
        _rec("zz", "outcome", topic="state"),  # not ours
    ]
    got = audit(records, ["a", "b", "c", "d", "e", "f", "g"])
    assert got.candidates == 7 and got.with_one_outcome == 5
    assert got.without_outcome == ["g"] and got.with_several == ["e"]
    assert got.in_state == 4 and got.unearned_state == ["f"]
    assert got.cache_hits == 1 and got.judged == ["a", "e", "f"]
    assert not got.ok
    fine = audit([r for r in records if r["candidate_id"] in "abcd"], ["a", "b", "c", "d"])
    assert fine.ok and fine.topics == {"state": 3, "escalations.review": 1}


async def test_the_scripted_judge_answers_by_label_over_a_socket() -> None:
    answers = {(f"q{i}", f"r{i}"): (f"id-{i}", i % 2 == 0) for i in range(40)}
    judge = await ScriptedJudge(answers, accuracy=0.8).start()
    config = JudgeConfig()
    try:
        async with ChatEndpoint(judge.base_url, "m", BreakerConfig()) as endpoint:
            for (q, r), (cid, grounded) in answers.items():
                readout, calls = await endpoint.judge(q, ["some context"], r, config)
                assert readout is not None and calls[-1].prompt_tokens > 0
                said = decide_judge(readout, config).verdict
                right = judge_is_right(cid, 0.8)
                assert said is (JudgeVerdict.YES if grounded == right else JudgeVerdict.NO)
            readout, calls = await endpoint.judge("unknown", None, "x", config)
            assert readout is None  # no labelled candidate: a 500, never a verdict
    finally:
        await judge.stop()
    assert len(judge.calls) == 40
    wrong = sum(not judge_is_right(cid, 0.8) for cid, _ in answers.values())
    assert 0 < wrong < 20
    # Nested: a more accurate judge errs on a subset of the less accurate one's errors.
    assert {c for c, _ in answers.values() if not judge_is_right(c, 0.9)} <= {
        c for c, _ in answers.values() if not judge_is_right(c, 0.8)
    }


def test_labelled_answers_reads_candidates_and_halueval_qa(tmp_path) -> None:
    qa = tmp_path / "qa.jsonl"
    record = {"knowledge": "K.", "question": "Q?", "right_answer": "R", "hallucinated_answer": "H"}
    qa.write_text(json.dumps(record) + "\n\n" + json.dumps(record) + "\n")
    got = labelled_answers(qa)
    assert [(c["id"], c["response"], y) for c, y in got] == [
        ("halueval-qa-0-right", "R", True),
        ("halueval-qa-0-hallucinated", "H", False),
        ("halueval-qa-1-right", "R", True),
        ("halueval-qa-1-hallucinated", "H", False),
    ]
    assert got[0][0]["context"] == "K." and len(labelled_answers(qa, limit=1)) == 2
    cands = tmp_path / "c.jsonl"
    cands.write_text(
        json.dumps({"id": "a", "question": "q", "response": "r", "metadata": {"label": "right"}})
        + "\n"
        + json.dumps({"id": "b", "response": "r", "metadata": {"label": "hallucinated"}})
        + "\n"
    )
    assert [(c["id"], c["session_id"], y) for c, y in labelled_answers(cands)] == [
        ("a", "a", True),
        ("b", "b", False),
    ]
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"id": "a", "response": "r", "metadata": {"label": "maybe"}}) + "\n")
    with pytest.raises(DataFileError, match=r"bad\.jsonl: line 1"):
        labelled_answers(bad)
    bad.write_text("{not json\n")
    with pytest.raises(DataFileError, match="not a JSON line"):
        labelled_answers(bad)
