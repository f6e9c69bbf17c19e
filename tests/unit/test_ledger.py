"""The outcome ledger's rule: first outcome wins; a person may answer a review once."""

from __future__ import annotations

from pipeline.trail.ledger import Admission, Attempt, admit, ledger_entry


def entry(topic: str, *, human: bool = False) -> dict:
    return ledger_entry(Attempt("c1", topic, human), outcome_hash="h", decided_at="t")


class TestFirstOutcomeWins:
    def test_an_unknown_id_is_delivered(self) -> None:
        assert admit(None, Attempt("c1", "state")) is Admission.DELIVER

    def test_a_second_outcome_is_superseded_whatever_it_says(self) -> None:
        for topic in ("state", "escalations.fallback", "deadletter"):
            assert admit(entry("escalations.fallback"), Attempt("c1", topic)) is (
                Admission.SUPERSEDED
            )

    def test_the_same_outcome_again_is_superseded_too(self) -> None:
        assert admit(entry("state"), Attempt("c1", "state")) is Admission.SUPERSEDED


class TestReview:
    def test_a_persons_verdict_follows_a_review_outcome(self) -> None:
        assert admit(entry("escalations.review"), Attempt("c1", "state", human=True)) is (
            Admission.DELIVER
        )

    def test_a_persons_outcome_other_than_review_is_final(self) -> None:
        answered = entry("state", human=True)
        assert admit(answered, Attempt("c1", "escalations.reject", human=True)) is (
            Admission.SUPERSEDED
        )

    def test_parked_again_after_a_verdict_it_waits_for_a_person_again(self) -> None:
        parked_again = entry("escalations.review", human=True)
        assert admit(parked_again, Attempt("c1", "state", human=True)) is Admission.DELIVER
        assert admit(parked_again, Attempt("c1", "state")) is Admission.SUPERSEDED

    def test_a_machine_cannot_reopen_a_review(self) -> None:
        assert admit(entry("escalations.review"), Attempt("c1", "state")) is (Admission.SUPERSEDED)

    def test_a_person_cannot_overrule_a_non_review_outcome(self) -> None:
        assert admit(entry("escalations.reject"), Attempt("c1", "state", human=True)) is (
            Admission.SUPERSEDED
        )

    def test_the_entry_records_who_decided(self) -> None:
        assert entry("state", human=True)["human"] is True
        assert entry("state")["topic"] == "state"
