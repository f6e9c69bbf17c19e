"""The judge's accuracy estimated from decisions where a person and the judge both ruled
(issue 31 item 1: `calibrate DATA --judge-share S --from-decisions`)."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from click.testing import CliRunner

import pipeline.encoding.encoder
import workers.eval.reviewed as reviewed
from tests.fixtures.fakes import HashEncoder
from workers.cli import main
from workers.eval.reviewed import JudgeAccuracy, judge_accuracy

LABELLED = Path(__file__).resolve().parents[1] / "fixtures" / "labelled.jsonl"


def human(cid: str, action: str, at: str = "2026-12-01T10:00:00+00:00", route="default"):
    return {
        "stage": "review",
        "method": "human",
        "action": action,
        "candidate_id": cid,
        "decided_at": at,
        "route": route,
    }


def judged(cid: str, level: str | None, at: str = "2026-12-01T09:00:00+00:00", **kw):
    return {
        "stage": "judge",
        "method": "judge",
        "level": level,
        "candidate_id": cid,
        "decided_at": at,
        **kw,
    }


def test_agreement_counts_only_candidates_both_ruled_on() -> None:
    records = [
        judged("a", "yes"),
        human("a", "accept"),  # agree
        judged("b", "yes", gate="grounding_veto"),
        human("b", "reject"),  # the judge's yes, a person's reject
        judged("c", "no"),
        human("c", "accept"),  # the judge's no, a person's accept
        judged("d", "no"),
        human("d", "reject"),  # agree
        judged("e", "unsure"),
        human("e", "accept"),  # no verdict of the judge
        judged("f", None, gate="judge_budget"),
        human("f", "reject"),  # over budget: never asked
        judged("g", "yes"),  # nobody reviewed it
        human("h", "accept"),  # the judge never saw it
        {"stage": "review", "method": "auto", "action": "reject", "candidate_id": "a"},
    ]
    got = judge_accuracy(records)
    assert got == JudgeAccuracy(n=4, agreed=2, yes_rejected=1, no_accepted=1)
    assert got.accuracy == 0.5
    low, high = got.interval()
    assert 0.0 < low < 0.5 < high < 1.0
    assert "from 4 candidates both a person and the judge ruled on" in got.render()


def test_the_latest_verdict_of_each_counts_and_since_and_route_filter() -> None:
    records = [
        judged("a", "no", at="2026-12-01T08:00:00+00:00"),
        judged("a", "yes", at="2026-12-01T09:00:00+00:00"),  # the judge's latest
        human("a", "reject", at="2026-12-01T10:00:00+00:00"),
        human("a", "accept", at="2026-12-01T11:00:00+00:00"),  # the person's latest
        judged("b", "yes"),
        human("b", "reject", at="2026-11-01T10:00:00+00:00"),  # before `since`
        judged("c", "yes"),
        human("c", "accept", route="qa"),
    ]
    assert judge_accuracy(records) == JudgeAccuracy(3, 2, 1, 0)
    since = reviewed.parse_since("2026-11-15")
    assert judge_accuracy(records, since=since) == JudgeAccuracy(2, 2, 0, 0)
    assert judge_accuracy(records, route="qa") == JudgeAccuracy(1, 1, 0, 0)
    assert judge_accuracy([]).accuracy is None
    assert "no candidate" in judge_accuracy([]).render()


def test_the_interval_narrows_with_more_candidates() -> None:
    small, large = JudgeAccuracy(20, 17, 2, 1), JudgeAccuracy(2000, 1700, 200, 100)
    assert small.accuracy == large.accuracy == 0.85
    (a, b), (c, d) = small.interval(), large.interval()
    assert a < c < 0.85 < d < b
    assert JudgeAccuracy(5, 5, 0, 0).interval()[1] == 1.0


@pytest.fixture
def estimate(monkeypatch: pytest.MonkeyPatch) -> list[dict]:
    """No broker: the decisions `calibrate --from-decisions` reads are these records."""
    records = [judged(f"c{i}", "yes" if i % 5 else "no") for i in range(40)]
    records += [human(f"c{i}", "accept") for i in range(40)]  # the judge right 32 of 40
    seen: list[dict] = []

    async def read(settings, *, since, route, timeout=30.0):
        seen.append({"since": since, "route": route})
        return judge_accuracy(records, since=since, route=route)

    monkeypatch.setattr(reviewed, "read_judge_accuracy", read)
    monkeypatch.setattr(
        pipeline.encoding.encoder, "default_encoder", lambda *a, **k: HashEncoder(dim=16)
    )
    return seen


def run(*args: str):
    return CliRunner().invoke(main, ["calibrate", *args])


def test_judge_share_from_decisions_fits_with_the_estimate(tmp_path, estimate) -> None:
    out = tmp_path / "p.toml"
    args = [str(LABELLED), "--max-accept-error", "0.1", "--out", str(out)]
    result = run(*args, "--judge-share", "0.4", "--from-decisions")
    assert result.exit_code == 0, result.output
    assert "judge accuracy 0.800 (95% interval" in result.output
    assert "from 40 candidates both a person and the judge ruled on" in result.output
    assert "a judge right 80% of the time" in result.output  # the frontier's heading
    route = tomllib.loads(out.read_text())["routes"]["default"]
    assert route["calibration"]["judge_band"]["judge_accuracy"] == 0.8
    assert estimate == [{"since": None, "route": None}]


def test_judge_share_from_decisions_refusals(tmp_path, estimate) -> None:
    out = str(tmp_path / "p.toml")
    both = run(
        str(LABELLED), "--out", out, "--judge-share", "0.4", "--from-decisions",
        "--judge-accuracy", "0.9",
    )  # fmt: skip
    assert both.exit_code == 2 and "give one" in both.output
    no_data = run("--out", out, "--judge-share", "0.4", "--from-decisions")
    assert no_data.exit_code == 2 and "fits on DATA" in no_data.output
    bad_share = run(str(LABELLED), "--out", out, "--judge-share", "1.5", "--from-decisions")
    assert bad_share.exit_code == 2 and "--judge-share" in bad_share.output
    assert estimate == []  # all refused before reading Kafka


def test_no_shared_rulings_or_a_coin_is_refused(tmp_path, monkeypatch) -> None:
    for records, message in (
        ([judged("a", "yes"), human("b", "accept")], "give --judge-accuracy"),
        ([judged("a", "yes"), human("a", "reject")], "less than a coin"),
    ):

        async def read(settings, *, since, route, timeout=30.0, records=records):
            return judge_accuracy(records, since=since, route=route)

        monkeypatch.setattr(reviewed, "read_judge_accuracy", read)
        result = run(
            str(LABELLED), "--out", str(tmp_path / "p.toml"), "--judge-share", "0.4",
            "--from-decisions",
        )  # fmt: skip
        assert result.exit_code == 1 and message in result.output
        assert not (tmp_path / "p.toml").exists()
