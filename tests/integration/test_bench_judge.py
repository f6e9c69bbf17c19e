"""`bench judge` end to end on the fixture's labelled answers: the scripted judge on a real
socket, and two judge workers on the real broker under a route budget (issue 31 item 6).

A budget of 8 calls a minute over 4 partitions (2 each) and 20 answers produced in 2 s:
the server never sees more than 8 requests in any 60 s, every answer has exactly one
outcome, none reaches state without the judge's yes, and the judged answers resubmitted
are answered from the verdict cache at no call. `--kafka-only` does the same without
scoring."""

from __future__ import annotations

from pathlib import Path

import pytest

from workers.bench import judge as bench_judge

from .harness import FIXTURES

pytestmark = pytest.mark.timeout(300)

BUDGET = 8


def test_bench_judge_holds_the_budget_on_kafka_and_resubmissions_hit_the_cache(
    kafka_bootstrap: str, capsys: pytest.CaptureFixture[str]
) -> None:
    opts = bench_judge.Options(
        (Path(FIXTURES / "labelled.jsonl"),),
        accuracy=0.85,
        share=0.5,
        kafka=True,
        bootstrap=kafka_bootstrap,
        kafka_n=20,
        produce_seconds=2.0,
        calls_per_minute=BUDGET,
        partitions=4,
        timeout=120.0,
    )
    result = bench_judge.run(opts)
    printed = capsys.readouterr().out
    print(printed)

    # In-process: the frontier beside judging every answer, tokens, the cache.
    assert "labelled.jsonl: 20 answers, 10 right" in printed
    assert "every answer" in printed and "0.50 *" in printed
    files = result.notes["files"]["labelled.jsonl"]
    assert files["frontier"][-1]["share"] == "every answer"
    assert files["frontier"][-1]["asked"] == 1.0
    assert files["first_calls"] == 20
    assert files["resubmitted_hits"] == 20 and files["resubmitted_calls"] == 0
    assert "tokens per judged answer" in printed

    # On Kafka: the budget across two workers, one outcome each, state only on a yes.
    kafka = result.notes["kafka"]
    assert kafka["n"] == 20
    assert 0 < kafka["calls"] <= BUDGET
    assert kafka["most_in_60s"] <= BUDGET
    assert kafka["with_one_outcome"] == 20 and kafka["unearned_state"] == 0
    assert sum(kafka["outcomes"].values()) == 20
    assert kafka["outcomes"].get("escalations.review", 0) >= 20 - BUDGET  # over budget
    assert kafka["judged"] == kafka["calls"]
    assert kafka["resubmitted"] == kafka["judged"]
    assert kafka["resubmitted_hits"] == kafka["resubmitted"]
    assert kafka["resubmitted_calls"] == 0
    assert kafka["resubmitted_with_one_outcome"] == kafka["resubmitted"]
    assert result.meets is not None and result.line().startswith("bench judge:")


def test_bench_judge_kafka_only_skips_the_scoring(
    kafka_bootstrap: str, capsys: pytest.CaptureFixture[str]
) -> None:
    opts = bench_judge.Options(
        (Path(FIXTURES / "labelled.jsonl"),),
        kafka=True,
        kafka_only=True,
        bootstrap=kafka_bootstrap,
        kafka_n=12,
        produce_seconds=1.0,
        calls_per_minute=4,
        partitions=4,
        timeout=120.0,
    )
    result = bench_judge.run(opts)
    printed = capsys.readouterr().out
    assert "scored" not in printed and "kafka: 12 candidates" in printed
    assert result.figure <= 4 and result.goal == 4
    assert result.rates["with exactly one outcome"] == 12
    assert result.rates["in state unearned"] == 0
    assert result.rates["resubmitted cache hits"] == result.rates["resubmitted"] > 0
    assert result.rates["resubmitted calls"] == 0
    assert result.meets is True
