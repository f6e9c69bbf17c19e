"""An accept cut that no fitted cut could meet is infinite: nothing auto-accepts, however
high it scores, and the policy, the audit text and the records all say "inf"."""

from __future__ import annotations

import math

import numpy as np
import orjson
import pytest

from pipeline.bounds.thresholds import Thresholds
from pipeline.errors import PolicyError
from pipeline.fit.grounding_model import fit_grounding
from pipeline.policy.document import parse_policy
from pipeline.rungs.grounding_switch import GroundingSwitch, SwitchAction
from pipeline.scores.check import Level, check
from pipeline.scores.grounding import FEATURES
from pipeline.scores.results import GroundingScore, SGIResult
from pipeline.trail.records import make_record, verify_chain

NOTHING = Thresholds(sgi_strong_pass=math.inf, sgi_review=0.9, grounding_accept=math.inf)


def sgi(value: float) -> SGIResult:
    return SGIResult(value, 1.0, 1.0 / value, 0, 1)


def test_accept_cuts_may_be_infinite_the_others_may_not() -> None:
    assert NOTHING.sgi_strong_pass == math.inf
    for name in ("sgi_review", "dgi_pass", "grounding_review"):
        with pytest.raises(PolicyError, match=f"thresholds.{name}"):
            Thresholds(**{name: math.inf})
    with pytest.raises(PolicyError, match="sgi_strong_pass"):
        Thresholds(sgi_strong_pass=-math.inf)
    with pytest.raises(PolicyError, match="grounding_accept"):
        Thresholds(grounding_accept=math.nan)


def test_no_sgi_however_high_is_accepted() -> None:
    switch = GroundingSwitch.from_thresholds(NOTHING)
    for value in (1.5, 50.0, 1e12):
        decision = switch.decide(sgi(value))
        assert decision.action is SwitchAction.ESCALATE
        assert not decision.write_to_state
    assert switch.decide(sgi(0.5)).action is SwitchAction.FALLBACK


def test_no_probability_is_accepted() -> None:
    score = GroundingScore(1.0, sgi(2.0), {})
    decision = GroundingSwitch.from_thresholds(NOTHING).decide(score)
    assert decision.action is SwitchAction.ESCALATE


def test_audit_text_says_inf() -> None:
    verdict = check(sgi(7.0), NOTHING)
    assert verdict.level is Level.REVIEW
    assert verdict.detail == "SGI 7.000 in [0.9, inf)"
    assert "inf)" in check(GroundingScore(0.99, sgi(2.0), {}), NOTHING).detail


def test_policy_file_round_trip_keeps_inf() -> None:
    import tomllib

    import tomli_w

    text = tomli_w.dumps({"thresholds": {"sgi_strong_pass": math.inf, "sgi_review": 0.9}})
    assert "sgi_strong_pass = inf" in text
    policy = parse_policy(tomllib.loads(text))
    assert policy.thresholds.sgi_strong_pass == math.inf


def test_records_carry_the_string_inf_and_still_verify() -> None:
    record = make_record(
        candidate_id="c1",
        session_id="s",
        turn=0,
        stage="switch",
        action="escalate",
        write_to_state=False,
        reason="r",
        policy_version="p",
        decided_at=0.0,
        mode="evaluate",
        route="default",
        prev_hash="",
        thresholds=NOTHING.to_dict(),
    )
    assert record["thresholds"]["sgi_strong_pass"] == "inf"
    assert record["thresholds"]["sgi_review"] == 0.9
    decoded = orjson.loads(orjson.dumps(record))
    assert decoded["thresholds"]["grounding_accept"] == "inf"
    assert verify_chain([decoded]) == []
    assert NOTHING.to_record()["sgi_strong_pass"] == "inf"


def test_grounding_fit_that_cannot_meet_the_bound_accepts_nothing() -> None:
    # Coverage separates the labels, except that the best-covered answer is ungrounded:
    # every cut accepts it, so none is clean enough at a 0% bound.
    coverage = np.linspace(0.0, 1.0, 40)
    rows = [{name: 0.0 for name in FEATURES} | {"content_coverage": float(c)} for c in coverage]
    labels = [bool(c > 0.5) for c in coverage[:-1]] + [False]
    fit = fit_grounding(rows, labels, ["f"] * 40, max_accept_error=0.0)
    assert fit.model.coefficients[FEATURES.index("content_coverage")] > 0
    assert fit.accept == math.inf
    assert fit.model.metrics["accepts_nothing"] == 1.0
