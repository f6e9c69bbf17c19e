"""Fail closed out of distribution: a fitted model records the inputs it was fitted on, and
an answer outside them escalates with the reason instead of being accepted."""

from __future__ import annotations

import pytest

from pipeline.bounds.thresholds import Thresholds
from pipeline.errors import PolicyError
from pipeline.fit.grounding_model import fit_grounding
from pipeline.guards.domain import Domain, shape_inputs, task_of
from pipeline.rungs.grounding_switch import GroundingSwitch, SwitchAction
from pipeline.scores.check import check
from pipeline.scores.grounding import FEATURES, GroundingModel, grounding_features, score_grounding
from pipeline.scores.results import GroundingScore, SGIResult
from topics.schema import GeometryPayload
from workers.eval.report import summarize

CONTEXT = ("The museum opened in 1902. It holds four thousand paintings.",)
SHORT = "The museum opened in 1902."


def sgi(value: float = 1.5, windows: int = 1) -> SGIResult:
    return SGIResult(value, 1.0, 1.0 / value, 0, 1, context_windows=windows)


def domain() -> Domain:
    return Domain(
        {"response_words": (1.0, 10.0), "context_windows": (1.0, 2.0), "has_context": (1.0, 1.0)},
        tasks=("QA",),
        untasked=True,
        n=4,
    )


def confident_model(d: Domain | None) -> GroundingModel:
    """A model that is sure of everything: P(grounded) ≈ 1 whatever it reads."""
    return GroundingModel(FEATURES, (0.0,) * len(FEATURES), 20.0, {}, d)


class TestDomain:
    def test_fitted_ranges_and_tasks(self) -> None:
        rows = [{"a": 1.0, "b": 5.0}, {"a": 3.0, "b": -1.0}]
        d = Domain.fitted(rows, ["QA", None])
        assert d.ranges == {"a": (1.0, 3.0), "b": (-1.0, 5.0)}
        assert (d.tasks, d.untasked, d.n) == (("QA",), True, 2)
        assert Domain.fitted(rows, ["QA", "Summary"]).untasked is False

    def test_inside_has_no_reason(self) -> None:
        assert domain().outside({"response_words": 10.0, "context_windows": 1.0}, "QA") == ""

    def test_reason_names_the_input_its_value_and_the_range(self) -> None:
        reason = domain().outside({"response_words": 812.0, "context_windows": 1.0})
        assert reason == "outside the fitted range: response_words 812 not in [1, 10]"

    def test_unknown_task_kind_is_outside(self) -> None:
        assert "task 'Dialogue' not among the fitted kinds QA" in domain().outside({}, "Dialogue")
        strict = Domain({}, ("QA",), untasked=False)
        assert "no task kind given" in strict.outside({}, None)
        assert task_of({"task": "QA"}) == "QA" and task_of({"task": 3}) is None

    def test_policy_table_round_trip_and_errors(self) -> None:
        d = domain()
        assert Domain.from_mapping(d.to_dict(), "grounding.domain") == d
        with pytest.raises(PolicyError, match=r"grounding\.domain\.ranges\.x"):
            Domain.from_mapping({"ranges": {"x": [2.0]}}, "grounding.domain")
        with pytest.raises(PolicyError, match=r"grounding\.domain\.ranges\.x"):
            Domain.from_mapping({"ranges": {"x": [2.0, 1.0]}}, "grounding.domain")
        with pytest.raises(PolicyError, match=r"grounding\.domain\.colour"):
            Domain.from_mapping({"colour": 1}, "grounding.domain")


class TestScoring:
    def test_an_answer_inside_is_accepted_as_before(self) -> None:
        score = score_grounding(confident_model(domain()), "When?", CONTEXT, SHORT, sgi())
        assert not score.flagged and score.value > 0.99
        assert GroundingSwitch.from_thresholds(Thresholds()).decide(score).action == "accept"

    def test_an_answer_outside_escalates_with_the_reason(self) -> None:
        long_answer = " ".join(["The museum opened in 1902."] * 5)  # 25 words > 10
        score = score_grounding(confident_model(domain()), "When?", CONTEXT, long_answer, sgi())
        assert score.value > 0.99  # the model's word is kept, not trusted
        assert score.flagged and "response_words 25 not in [1, 10]" in score.out_of_range
        decision = GroundingSwitch.from_thresholds(Thresholds()).decide(score)
        assert decision.action is SwitchAction.ESCALATE  # up the ladder, never fallback
        assert not decision.write_to_state
        assert "response_words 25" in decision.reason
        assert "not fitted on answers like this" in check(score).message

    def test_a_source_larger_than_any_fitted_escalates(self) -> None:
        score = score_grounding(confident_model(domain()), "When?", CONTEXT, SHORT, sgi(windows=9))
        assert "context_windows 9 not in [1, 2]" in score.out_of_range

    def test_an_unknown_task_escalates(self) -> None:
        model = confident_model(domain())
        score = score_grounding(model, "When?", CONTEXT, SHORT, sgi(), task="Summary")
        assert "task 'Summary'" in score.out_of_range

    def test_a_low_score_outside_escalates_rather_than_falls_back(self) -> None:
        sure_not = GroundingModel(FEATURES, (0.0,) * len(FEATURES), -20.0, {}, domain())
        score = score_grounding(sure_not, "When?", CONTEXT, " ".join(["x"] * 30), sgi())
        assert GroundingSwitch.from_thresholds(Thresholds()).decide(score).action == "escalate"

    def test_a_model_without_a_domain_is_trusted_as_before(self) -> None:
        score = score_grounding(confident_model(None), "When?", CONTEXT, "x " * 500, sgi(5.0, 40))
        assert not score.flagged

    def test_the_flag_survives_the_envelope(self) -> None:
        score = score_grounding(confident_model(domain()), "When?", CONTEXT, "w " * 40, sgi())
        back = GeometryPayload.from_dict(GeometryPayload(score).to_dict()).score
        assert isinstance(back, GroundingScore)
        assert back.flagged and back.out_of_range == score.out_of_range
        assert not back.sgi.flagged


def test_fit_records_the_domain_of_features_shapes_and_tasks() -> None:
    answers = [SHORT, "It holds four thousand paintings.", "It opened in 1850.", "It is blue."]
    rows = [grounding_features("When?", CONTEXT, a, sgi()) for a in answers] * 5
    shapes = [shape_inputs(a, 1, True) for a in answers] * 5
    labels = [True, True, False, False] * 5
    fit = fit_grounding(
        rows, labels, ["f"] * 20, shapes=shapes, tasks=["QA"] * 20, max_accept_error=0.5
    )
    d = fit.model.domain
    assert d is not None and d.tasks == ("QA",) and d.untasked is False
    assert d.ranges["response_words"] == (3.0, 5.0)
    assert d.ranges["has_context"] == (1.0, 1.0)
    assert set(FEATURES) <= set(d.ranges)
    back = GroundingModel.from_mapping(fit.model.to_dict())
    assert back is not None and back.domain == d


def test_eval_reports_the_out_of_range_share() -> None:
    def records(cid: str, out: bool, topic: str) -> list[dict]:
        evidence = {"grounding_probability": 0.9} | ({"out_of_range": "x"} if out else {})
        return [
            {"candidate_id": cid, "stage": "geometry", "method": "sgi", "evidence": evidence},
            {"candidate_id": cid, "stage": "outcome", "topic": topic},
        ]

    recs = records("a", True, "escalations.review") + records("b", False, "state")
    recs += records("c", False, "state") + records("d", True, "escalations.review")
    m = summarize(recs, {"a": True, "b": True, "c": False, "d": False}, {}, 1.0)
    assert m["out_of_range_share"] == 0.5
    assert m["grounded_out_of_range_share"] == 0.5
