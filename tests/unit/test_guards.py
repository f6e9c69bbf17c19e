"""The guards in the stages: an unfamiliar or foreign candidate whose P(grounded) is above
the accept cut is escalated (to the judge where there is one), never accepted, with the
distance or the languages in the record; a familiar English one decides as before."""

from __future__ import annotations

import numpy as np

from pipeline.bounds.thresholds import Thresholds
from pipeline.fit.familiarity_model import fit_familiarity
from pipeline.guards.familiarity import Familiarity
from pipeline.policy.document import parse_policy
from pipeline.policy.routing import RouteConfig
from pipeline.policy.sessions import SessionState
from pipeline.rungs.grounding_switch import GroundingSwitch, SwitchAction
from pipeline.scores.batch import familiarity_vectors, score_batch
from pipeline.scores.grounding import FEATURES, GroundingModel
from pipeline.scores.results import GroundingScore
from pipeline.stages import geometry, switch
from tests.fixtures.fakes import FakeEncoder
from topics.schema import Candidate, Envelope, GeometryPayload, parse_envelope
from workers.stages.geometry import _score_by_route
from workers.stages.switch import geometry_result

QUESTION = "How long can a deleted file be restored?"
CONTEXT = (
    "On the Business plan, deleted files are moved to a recovery area and can be restored "
    "for 90 days from the date of deletion; after 90 days they are permanently purged."
)
ANSWER = "A deleted file can be restored for 90 days, then it is purged for good."
OTHER_CONTEXT = (
    "The quarterly call covered shipping volumes, the new dividend of thirteen cents and "
    "the barrels still on the water at the end of the year."
)
OTHER_ANSWER = "The dividend rises to thirteen cents a share next quarter."
DE_QUESTION = "Wie lange kann eine gelöschte Datei wiederhergestellt werden?"
DE_CONTEXT = (
    "Im Business-Tarif werden gelöschte Dateien in einen Wiederherstellungsbereich "
    "verschoben und können 90 Tage lang wiederhergestellt werden; danach werden sie "
    "endgültig entfernt."
)
DE_ANSWER = "Eine gelöschte Datei kann 90 Tage lang wiederhergestellt werden."


def unit(i: int, j: int, w: float = 0.8) -> np.ndarray:
    v = np.zeros(8)
    v[i], v[j] = w, 1.0 - w
    return v


ENCODER = FakeEncoder(
    {
        QUESTION: unit(0, 7),
        CONTEXT: unit(1, 2),
        ANSWER: unit(1, 2, 0.7),
        OTHER_CONTEXT: unit(4, 5),
        OTHER_ANSWER: unit(4, 5, 0.7),
        # the German candidate reads, to the encoder, exactly as the English one
        DE_QUESTION: unit(0, 7),
        DE_CONTEXT: unit(1, 2),
        DE_ANSWER: unit(1, 2, 0.7),
    }
)


def familiar_test() -> Familiarity:
    """A familiarity test fitted on rows around the English candidate's vector."""
    (center,) = familiarity_vectors([((CONTEXT,), ANSWER)], ENCODER)
    rng = np.random.default_rng(0)
    rows = center + 0.02 * rng.normal(size=(200, len(center)))
    return fit_familiarity(rows, [str(i) for i in range(200)], dimensions=4)[0]


def sure(familiarity: Familiarity | None) -> GroundingModel:
    """A model sure of every answer (P(grounded) ≈ 1), with or without a familiarity test."""
    return GroundingModel(FEATURES, (0.0,) * len(FEATURES), 20.0, {}, None, familiarity)


def scored(question: str, context: str, answer: str, model: GroundingModel) -> GroundingScore:
    (score,) = score_batch(
        [(question, (context,), answer)], ENCODER, None, model, languages=("en",)
    )
    assert isinstance(score, GroundingScore)
    return score


def switch_verdict(score: GroundingScore, judge: bool) -> SwitchAction | str:
    candidate = Candidate(id="c1", session_id="s1", question=QUESTION, response=ANSWER)
    route = RouteConfig()
    verdict, _ = switch.decide(
        candidate,
        route,
        SessionState(),
        score,
        GroundingSwitch.from_thresholds(Thresholds()),
        {},
        None,
        judge,
    )
    return verdict.action


class TestFamiliarity:
    def test_a_familiar_english_answer_is_accepted_as_before(self) -> None:
        with_test = scored(QUESTION, CONTEXT, ANSWER, sure(familiar_test()))
        without = scored(QUESTION, CONTEXT, ANSWER, sure(None))
        assert not with_test.flagged and with_test.value == without.value > 0.99
        assert with_test.guards["familiarity"]["familiar"] is True
        for judge in (False, True):
            assert switch_verdict(with_test, judge) == SwitchAction.ACCEPT

    def test_an_unfamiliar_answer_escalates_with_its_distance(self) -> None:
        test = familiar_test()
        score = scored(QUESTION, OTHER_CONTEXT, OTHER_ANSWER, sure(test))
        assert score.value > 0.99 and score.flagged
        assert score.out_of_range.startswith("unfamiliar: distance ")
        reading = score.guards["familiarity"]
        assert reading["distance"] > reading["cut"] == test.cut and not reading["familiar"]
        for judge in (False, True):  # escalated: consistency, then the judge where there is one
            assert switch_verdict(score, judge) == SwitchAction.ESCALATE
        # without the test the same answer is accepted: the test is what holds it back
        assert switch_verdict(scored(QUESTION, OTHER_CONTEXT, OTHER_ANSWER, sure(None)), False) == (
            SwitchAction.ACCEPT
        )

    def test_the_record_names_the_distance_and_the_flag_survives_the_envelope(self) -> None:
        score = scored(QUESTION, OTHER_CONTEXT, OTHER_ANSWER, sure(familiar_test()))
        verdict = geometry.decide(score, Thresholds(), {}, "fake", None)
        assert verdict.evidence["familiarity"]["distance"] > verdict.evidence["familiarity"]["cut"]
        assert verdict.evidence["out_of_range"].startswith("unfamiliar: distance ")
        candidate = Candidate(id="c1", session_id="s1", question="q?", response="r.")
        env = Envelope(candidate=candidate, route="default", mode="evaluate")
        back = geometry_result(parse_envelope(_with(env, score).encode()))
        assert isinstance(back, GroundingScore) and back.flagged
        assert GroundingSwitch.from_thresholds(Thresholds()).decide(back).action == "escalate"


def _with(env: Envelope, score: GroundingScore) -> Envelope:
    from dataclasses import replace

    return replace(env, geometry=GeometryPayload(score))


class TestLanguage:
    def test_a_german_candidate_escalates_with_the_languages(self) -> None:
        score = scored(DE_QUESTION, DE_CONTEXT, DE_ANSWER, sure(familiar_test()))
        assert score.value > 0.99 and score.flagged
        assert "the answer reads as 'de'" in score.out_of_range
        assert score.guards["languages"]["answer"]["language"] == "de"
        for judge in (False, True):
            assert switch_verdict(score, judge) == SwitchAction.ESCALATE
        verdict = geometry.decide(score, Thresholds(), {}, "fake", None)
        assert verdict.evidence["languages"]["context"]["language"] == "de"

    def test_without_the_guard_the_german_candidate_would_be_accepted(self) -> None:
        (score,) = score_batch(
            [(DE_QUESTION, (DE_CONTEXT,), DE_ANSWER)], ENCODER, None, sure(familiar_test())
        )
        assert isinstance(score, GroundingScore) and not score.flagged
        assert switch_verdict(score, False) == SwitchAction.ACCEPT

    def test_the_worker_reads_the_routes_languages(self) -> None:
        policy = parse_policy(
            {
                "grounding": sure(None).to_dict(),
                "routes": {"default": {}, "german": {"languages": ["de"]}},
            }
        )
        envelopes = [
            Envelope(
                candidate=Candidate(
                    id=route,
                    session_id="s",
                    question=DE_QUESTION,
                    response=DE_ANSWER,
                    context=DE_CONTEXT,
                ),
                route=route,
                mode="evaluate",
            )
            for route in ("default", "german")
        ]
        default, german = _score_by_route(envelopes, ENCODER, None, policy)
        assert default.flagged and "the route accepts en" in default.flag_reason
        assert not german.flagged
