"""The dashboard's P(grounded) histograms: short and long-form answers each under their cuts."""

from __future__ import annotations

from typing import Any

from pipeline.trail.records import make_record
from workers.web.state import DashboardState

CUTS = {
    "grounding_accept": 0.8,
    "grounding_review": 0.5,
    "grounding_accept_long": 0.9,
    "grounding_review_long": 0.6,
    "sgi_strong_pass": 4.0,
}


def geometry(candidate_id: str, p: float, **evidence: Any) -> dict[str, Any]:
    return make_record(
        candidate_id=candidate_id,
        stage="geometry",
        action="scored",
        session_id="s",
        turn=1,
        write_to_state=False,
        reason="",
        policy_version="test",
        decided_at=1.0,
        mode="active",
        route="default",
        prev_hash="",
        score=1.2,
        method="sgi",
        evidence={"grounding_probability": p, **evidence},
        thresholds=CUTS,
    )


def test_long_form_answers_get_their_own_histogram_and_cuts():
    state = DashboardState()
    state.ingest(geometry("a", 0.85, features={"long_form": 0.0}))
    state.ingest(geometry("b", 0.95, features={"long_form": 1.0}))
    state.ingest(geometry("c", 0.55))  # an older record without features reads as short
    hists = state.summary()["histograms"]
    assert hists["grounding"]["count"] == 2
    assert hists["grounding"]["thresholds"] == {"grounding_accept": 0.8, "grounding_review": 0.5}
    assert hists["grounding_long"]["count"] == 1
    assert hists["grounding_long"]["thresholds"] == {
        "grounding_long_accept": 0.9,
        "grounding_long_review": 0.6,
    }
    assert hists["sgi"]["thresholds"] == {"sgi_strong_pass": 4.0}
