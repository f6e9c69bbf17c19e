"""The language guard: English passes, another language or an answer and context that
disagree is flagged with the languages, and what cannot be told (a name, a number) is not."""

from __future__ import annotations

import pytest

from pipeline.errors import PolicyError
from pipeline.guards.language import check_languages, detect, encoder_languages, parse_languages
from pipeline.policy.document import parse_policy
from pipeline.policy.routing import RouteConfig

EN_CONTEXT = [
    "On the Business plan, deleted files are moved to a recovery area and can be restored "
    "for 90 days from the date of deletion; after 90 days they are permanently purged."
]
EN_ANSWER = "You can restore a deleted file for 90 days; after that it is purged for good."
DE_CONTEXT = [
    "Im Business-Tarif werden gelöschte Dateien in einen Wiederherstellungsbereich "
    "verschoben und können 90 Tage lang wiederhergestellt werden; danach werden sie "
    "endgültig entfernt."
]
DE_ANSWER = "Gelöschte Dateien können 90 Tage lang wiederhergestellt werden."


class TestDetect:
    def test_long_english_and_german_are_told(self) -> None:
        assert detect(EN_ANSWER).language == "en"
        assert detect(DE_ANSWER).language == "de" and detect(DE_ANSWER).confidence >= 0.7

    @pytest.mark.parametrize(
        "answer",
        ["Canberra", "1987", "Steyr Mannlicher", "President Richard Nixon", "It's Canberra."],
    )
    def test_a_short_answer_cannot_be_told(self, answer: str) -> None:
        assert detect(answer).language is None


class TestCheck:
    def test_english_answer_and_context_pass(self) -> None:
        checked = check_languages(EN_ANSWER, EN_CONTEXT, ["en"])
        assert checked.reason == ""
        assert (checked.answer.language, checked.context and checked.context.language) == (
            "en",
            "en",
        )

    def test_a_german_answer_and_context_are_flagged_with_the_languages(self) -> None:
        reason = check_languages(DE_ANSWER, DE_CONTEXT, ["en"]).reason
        assert reason.startswith("language: ")
        assert "the answer reads as 'de'" in reason and "the context reads as 'de'" in reason
        assert "the route accepts en" in reason

    def test_a_german_context_alone_is_flagged(self) -> None:
        assert "the context reads as 'de'" in check_languages("Canberra", DE_CONTEXT, ["en"]).reason

    def test_a_short_english_answer_is_not_flagged(self) -> None:
        for answer in ("Canberra", "90 days", "It's Canberra."):
            assert check_languages(answer, EN_CONTEXT, ["en"]).reason == ""

    def test_answer_and_context_that_disagree_are_flagged(self) -> None:
        reason = check_languages(DE_ANSWER, EN_CONTEXT, ["de", "en"]).reason
        assert reason == (
            "language: the answer reads as 'de' and the context as 'en'; the route accepts de, en"
        )

    def test_a_route_that_accepts_the_language_passes_it(self) -> None:
        assert check_languages(DE_ANSWER, DE_CONTEXT, ["de"]).reason == ""
        assert check_languages(DE_ANSWER, EN_CONTEXT, ["*"]).reason == ""

    def test_a_german_question_is_flagged(self) -> None:
        question = "Wie lange kann eine gelöschte Datei wiederhergestellt werden?"
        checked = check_languages(EN_ANSWER, EN_CONTEXT, ["en"], question)
        assert "the question reads as 'de'" in checked.reason
        assert check_languages(EN_ANSWER, EN_CONTEXT, ["en"], "How long?").reason == ""

    def test_no_context_reads_the_answer_only(self) -> None:
        checked = check_languages(DE_ANSWER, None, ["en"])
        assert checked.context is None and "the answer reads as 'de'" in checked.reason


class TestRouteSetting:
    def test_default_is_the_encoders_card(self) -> None:
        policy = parse_policy({"routes": {"default": {}}})
        assert policy.route("default").languages is None
        assert policy.languages_for("default") == ("en",)
        assert encoder_languages(None) == ("en",)
        assert encoder_languages("/models/all-MiniLM-L6-v2") == ("en",)

    def test_a_route_lists_its_languages(self) -> None:
        policy = parse_policy({"routes": {"default": {}, "de": {"languages": ["en", "de"]}}})
        assert policy.languages_for("de") == ("de", "en")

    @pytest.mark.parametrize("bad", [[], ["english"], "en", ["EN"], [1]])
    def test_bad_settings_name_the_route(self, bad: object) -> None:
        with pytest.raises(PolicyError, match=r"routes\.x\.languages"):
            RouteConfig.from_mapping("x", {"languages": bad})
        with pytest.raises(PolicyError):
            parse_languages(bad, "languages")
