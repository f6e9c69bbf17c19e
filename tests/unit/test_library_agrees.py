"""The library's defaults are the active policy's, as the workers use them; the seed's cuts
stay available by name. (tests/integration/test_library_agrees.py runs the examples
through the ladder with the real encoder.)"""

from __future__ import annotations

import pytest

import pipeline
from pipeline.bounds.thresholds import DGI_PASS, SGI_REVIEW, SGI_STRONG_PASS, Thresholds
from pipeline.rungs import grounding_switch as core_switch
from pipeline.scores.check import check as core_check
from pipeline.scores.results import GroundingScore, SGIResult
from tests.fixtures.fakes import FakeEncoder
from tests.fixtures.ladder_scenario import CONTEXT, QUESTION, R_ACCEPT, R_MIDDLE, VECTORS
from topics.codec import dumps
from topics.names import Topic
from topics.schema import GeometryPayload, parse_envelope
from workers.interfaces import Inbound, StageContext
from workers.stages.geometry import GeometryStage


def sgi(value: float) -> SGIResult:
    return SGIResult(value, 0.0, 0.0, 0, 1)


def grounding(probability: float) -> GroundingScore:
    return GroundingScore(probability, sgi(1.0), {})


BETWEEN = 0.51
"""A short answer's P(grounded) between the seed's review cut (0.50) and the shipped one."""


@pytest.fixture(scope="module")
def shipped() -> Thresholds:
    return pipeline.default_policy().thresholds


class TestDefaults:
    def test_the_shipped_cuts_are_not_the_seeds(self, shipped: Thresholds) -> None:
        # Otherwise the tests below could not tell the two defaults apart.
        assert shipped.sgi_strong_pass > 2.0 > SGI_STRONG_PASS
        assert shipped.grounding_review > BETWEEN > Thresholds.seed().grounding_review

    def test_switch_takes_the_policys_cuts(self, shipped: Thresholds) -> None:
        assert pipeline.GroundingSwitch().thresholds == shipped
        assert pipeline.GroundingSwitch(on_reject="reject").thresholds == shipped

    def test_a_given_cut_overrides_only_itself(self, shipped: Thresholds) -> None:
        t = pipeline.GroundingSwitch(accept_threshold_sgi=5.0).thresholds
        assert (t.sgi_strong_pass, t.sgi_review, t.grounding_accept) == (
            5.0,
            shipped.sgi_review,
            shipped.grounding_accept,
        )

    def test_an_sgi_of_two_escalates_under_the_policy_and_passes_under_the_seed(self) -> None:
        assert pipeline.GroundingSwitch().decide(sgi(2.0)).action is pipeline.SwitchAction.ESCALATE
        assert core_switch.GroundingSwitch().decide(sgi(2.0)).action is pipeline.SwitchAction.ACCEPT

    def test_p_grounded_between_the_review_cuts(self) -> None:
        # Below the shipped review cut (on_reject), above the seed's (escalate).
        assert pipeline.check(grounding(BETWEEN)).level is pipeline.Level.RISK
        assert core_check(grounding(BETWEEN)).level is pipeline.Level.REVIEW
        assert pipeline.GroundingSwitch().decide(grounding(BETWEEN)).action == "fallback"

    def test_check_and_switch_agree(self) -> None:
        for score in (sgi(0.5), sgi(2.0), sgi(5.0), grounding(BETWEEN), grounding(0.9)):
            assert pipeline.GroundingSwitch().decide(score).check == pipeline.check(score)

    def test_the_seeds_cuts_stay_available_by_name(self) -> None:
        seed = Thresholds.seed()
        assert (seed.sgi_strong_pass, seed.sgi_review, seed.dgi_pass) == (1.20, 0.95, 0.525)
        assert (SGI_STRONG_PASS, SGI_REVIEW, DGI_PASS) == (1.20, 0.95, 0.525)
        assert pipeline.check(sgi(1.3), seed).level is pipeline.Level.OK


class TestScoreCandidate:
    async def test_is_the_geometry_stages_score(self) -> None:
        """What the geometry stage puts on the envelope equals the library's score."""
        encoder = FakeEncoder(VECTORS)
        policy = pipeline.default_policy()
        assert policy.grounding is not None
        ctx = StageContext(policy=policy)
        ctx.services["encoder"] = encoder
        cases = ((R_ACCEPT, CONTEXT), (R_MIDDLE, [CONTEXT, QUESTION]))
        batch = [
            Inbound(
                b"s",
                dumps(
                    {
                        "id": f"c{i}",
                        "session_id": "s",
                        "question": QUESTION,
                        "response": response,
                        "context": context,
                    }
                ),
            )
            for i, (response, context) in enumerate(cases)
        ]
        emits = await GeometryStage().process(batch, ctx)
        scored = [parse_envelope(e.value) for e in emits if e.topic is Topic.SCORED]
        assert len(scored) == len(cases)
        for env, (response, context) in zip(scored, cases, strict=True):
            library = pipeline.score_candidate(QUESTION, response, context, encoder)
            assert isinstance(library, GroundingScore)
            assert env.geometry.to_dict() == GeometryPayload(library).to_dict()
