"""Lexical source support: content coverage, numbers, names, stemming, question words."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipeline.claims.support import Span, SupportReport, measure_support, stem
from pipeline.errors import ScoringError

CONTEXT = (
    "Acme Cloud keeps deleted files for 30 days on the Business plan. "
    "Support is based in Lisbon and answers within 4 hours."
)


def support(response: str, *context: str, question: str = "") -> SupportReport:
    return measure_support(response, context or (CONTEXT,), question)


def texts(spans: tuple[Span, ...]) -> list[str]:
    return [s.text for s in spans]


class TestCoverage:
    def test_fully_supported_sentence_has_coverage_one(self) -> None:
        r = support("Acme keeps deleted files for 30 days.")
        assert r.content_coverage == 1.0
        assert r.unsupported_words == ()
        assert r.n_content == 6  # Acme, keeps, deleted, files, 30, days

    def test_share_of_content_words(self) -> None:
        # content words: deleted, files, vanish, 30, days ("after" is a stop word)
        r = support("Deleted files vanish after 30 days.")
        assert r.n_content == 5
        assert texts(r.unsupported_words) == ["vanish"]
        assert r.content_coverage == pytest.approx(4 / 5)

    def test_stop_words_and_short_words_do_not_count(self) -> None:
        r = support("It is so, and it was.")
        assert r.n_content == 0
        assert r.content_coverage == 1.0

    def test_words_about_the_source_need_no_support(self) -> None:
        r = support("Based on the provided passage, Acme keeps files.")
        assert r.n_content == 3  # Acme, keeps, files
        assert r.content_coverage == 1.0

    def test_empty_response_claims_nothing(self) -> None:
        r = support("")
        assert r.content_coverage == 1.0
        assert r.sentence_coverage == ()
        assert r.min_sentence_coverage == 1.0

    def test_invented_sentence_has_low_coverage(self) -> None:
        r = support("Refunds require a signed affidavit from headquarters.")
        assert r.content_coverage == 0.0
        assert texts(r.unsupported_words) == [
            "Refunds",
            "require",
            "signed",
            "affidavit",
            "headquarters",
        ]

    def test_context_chunks_are_pooled(self) -> None:
        r = measure_support("Lisbon answers quickly", ["Support is in Lisbon.", "It answers."])
        assert texts(r.unsupported_words) == ["quickly"]

    def test_unsupported_word_spans_point_into_the_response(self) -> None:
        response = "Files are in Lisbon forever."
        r = support(response)
        (span,) = r.unsupported_words
        assert span == Span("forever", 20, 27)
        assert response[span.start : span.end] == span.text


class TestStemming:
    @pytest.mark.parametrize(
        ("a", "b"),
        [
            ("files", "file"),
            ("deleted", "delete"),
            ("deleting", "delete"),
            ("cities", "city"),
            ("studied", "study"),
            ("running", "run"),
            ("buildings", "building"),
            ("Acme's", "acme"),
            ("Plans", "plan"),
        ],
    )
    def test_inflections_meet(self, a: str, b: str) -> None:
        assert stem(a) == stem(b)

    @pytest.mark.parametrize(("a", "b"), [("file", "fine"), ("plan", "plant"), ("day", "dog")])
    def test_different_words_stay_apart(self, a: str, b: str) -> None:
        assert stem(a) != stem(b)

    def test_inflected_response_word_is_supported(self) -> None:
        r = measure_support("The file was deleted.", ["Deleting files is allowed."])
        assert r.content_coverage == 1.0


class TestQuestionWords:
    def test_question_words_are_given_not_counted(self) -> None:
        r = support("Quota files vanish.", question="What happens to quota files?")
        assert texts(r.given_words) == ["Quota", "files"]
        assert r.n_given == 2
        assert r.n_content == 1  # only "vanish" needs support
        assert r.content_coverage == 0.0

    def test_answer_made_only_of_question_words_has_coverage_one(self) -> None:
        r = support("Quota is enforced", question="Is quota enforced?")
        assert r.n_content == 0
        assert r.content_coverage == 1.0

    def test_numbers_and_names_from_the_question_are_given(self) -> None:
        r = support("Yes, Oslo had 12 outages.", question="Did Oslo have 12 outages?")
        assert r.unsupported_numbers == ()
        assert r.unsupported_names == ()


class TestNumbers:
    def test_number_in_context_is_supported(self) -> None:
        assert support("Support answers within 4 hours.").unsupported_numbers == ()

    def test_invented_number_is_flagged_with_span(self) -> None:
        response = "Deleted files are kept for 90 days."
        r = support(response)
        assert r.unsupported_numbers == (Span("90", 27, 29),)

    @pytest.mark.parametrize(
        ("response", "context"),
        [
            ("It costs 1,000 euros.", "It costs 1000 euros."),
            ("A 90% share.", "A 90.0 percent share."),
            ("Built in the 19th century.", "Built in century 19."),
            ("Seven members.", "There were 7 members."),
            ("There were 7 members.", "Seven members."),
            ("Grew 2.50 times.", "Grew 2.5 times."),
        ],
    )
    def test_same_value_in_another_form_is_supported(self, response: str, context: str) -> None:
        assert measure_support(response, [context]).unsupported_numbers == ()

    @pytest.mark.parametrize(
        ("response", "context"),
        [
            ("It costs 1,000 euros.", "It costs 100 euros."),
            ("Over 2.5 days.", "Over 25 days."),
            ("In the 1990s.", "In 1990."),
            ("Eight members.", "There were 7 members."),
        ],
    )
    def test_different_value_is_unsupported(self, response: str, context: str) -> None:
        assert len(measure_support(response, [context]).unsupported_numbers) == 1

    def test_dates_split_into_day_and_year(self) -> None:
        r = measure_support("Born on March 2, 1991.", ["born March 2, 1992"])
        assert texts(r.unsupported_numbers) == ["1991"]

    def test_numbers_count_as_content(self) -> None:
        r = measure_support("42", ["nothing here"])
        assert r.n_content == 1
        assert r.content_coverage == 0.0

    def test_one_is_not_a_number(self) -> None:
        assert measure_support("Lisbon is one option.", ["Lisbon option"]).unsupported_numbers == ()


class TestNames:
    def test_invented_name_mid_sentence_is_flagged(self) -> None:
        response = "Support is based in Madrid."
        r = support(response)
        assert r.unsupported_names == (Span("Madrid", 20, 26),)

    def test_name_from_context_is_supported(self) -> None:
        assert support("Support sits in Lisbon.").unsupported_names == ()

    def test_multi_word_name_is_one_span(self) -> None:
        r = measure_support("It was sold to Bank of Granada.", ["It was sold."])
        assert texts(r.unsupported_names) == ["Bank of Granada"]

    def test_name_needs_every_word_in_context(self) -> None:
        context = ["Acme was founded by Ada Lovelace."]
        assert measure_support("It was founded by Ada Byron.", context).unsupported_names == (
            Span("Ada Byron", 18, 27),
        )
        assert measure_support("It was founded by Ada Lovelace.", context).unsupported_names == ()

    def test_single_capitalised_word_at_sentence_start_is_not_a_name(self) -> None:
        r = measure_support("Refunds are slow. Lisbon agrees.", ["Lisbon"])
        assert r.unsupported_names == ()
        assert texts(r.unsupported_words) == ["Refunds", "slow", "agrees"]

    def test_multi_word_name_at_sentence_start_is_a_name(self) -> None:
        r = measure_support("New Amsterdam hosts it.", ["hosts it"])
        assert texts(r.unsupported_names) == ["New Amsterdam"]

    def test_acronym_is_a_name(self) -> None:
        r = measure_support("NASA approved it; the FAA did too.", ["NASA approved"])
        assert texts(r.unsupported_names) == ["FAA"]

    def test_possessive_name_is_supported(self) -> None:
        r = measure_support("It is Arthur's Magazine.", ["Arthur's Magazine (1844)"])
        assert r.unsupported_names == ()

    def test_word_after_a_colon_is_a_sentence_start(self) -> None:
        r = measure_support("Answer: Refunds are slow in Madrid.", ["slow"])
        assert texts(r.unsupported_names) == ["Madrid"]

    def test_times_of_day_are_not_names(self) -> None:
        r = measure_support("It opens at 9 AM and closes at 5 PM.", ["opens 9, closes 5"])
        assert r.unsupported_names == ()

    def test_dotted_abbreviation_meets_the_acronym(self) -> None:
        assert measure_support("Sold in the US market.", ["U.S. market"]).unsupported_names == ()
        r = measure_support("Sold in the U.S. market.", ["sold in US market"])
        assert r.unsupported_names == ()
        assert r.content_coverage == 1.0

    def test_leading_stop_word_is_not_part_of_the_name(self) -> None:
        r = measure_support("The Oberoi Group is in Mumbai.", ["The Oberoi Group is in Delhi."])
        assert texts(r.unsupported_names) == ["Mumbai"]


class TestSentences:
    def test_per_sentence_coverage_and_minimum(self) -> None:
        r = support("Acme keeps files 30 days. Refunds require affidavits.")
        assert r.sentence_coverage == (1.0, 0.0)
        assert r.min_sentence_coverage == 0.0
        assert texts(r.sentence_spans) == [
            "Acme keeps files 30 days.",
            "Refunds require affidavits.",
        ]

    def test_sentence_without_content_counts_as_covered(self) -> None:
        r = support("Yes. Lisbon has it.")
        assert r.sentence_coverage == (1.0, 1.0)

    def test_newlines_split_sentences(self) -> None:
        r = support("- files kept\n- affidavits needed")
        assert len(r.sentence_coverage) == 2
        assert r.sentence_coverage[1] == 0.0


class TestLocalCoverage:
    # Five source sentences; "Porto", "ferries" and "midnight" sit far apart.
    LONG = (
        "Porto lies on the Douro river. "
        "The old town climbs the northern bank. "
        "Trams cross the upper deck of the bridge. "
        "Wine lodges line the southern bank. "
        "Ferries stop running at midnight."
    )

    def test_claim_from_one_neighbourhood_is_locally_covered(self) -> None:
        r = support("Wine lodges line the southern bank.", self.LONG)
        assert r.sentence_local_coverage == (1.0,)
        assert r.sentence_content == (5,)  # wine, lodges, line, southern, bank

    def test_claim_stitched_from_distant_sentences_is_not(self) -> None:
        # Every word occurs somewhere, so plain coverage is full; but no three neighbouring
        # source sentences hold both "Porto" and "ferries"/"midnight".
        r = support("Porto ferries stop at midnight.", self.LONG)
        assert r.sentence_coverage == (1.0,)
        assert r.sentence_local_coverage[0] == pytest.approx(3 / 4)

    def test_window_spans_three_neighbouring_sentences(self) -> None:
        # "trams" (3rd sentence) and "ferries" (5th) fit one window; "Douro" (1st) does not.
        assert support("Trams and ferries.", self.LONG).sentence_local_coverage == (1.0,)
        assert support("Douro ferries.", self.LONG).sentence_local_coverage == (0.5,)

    def test_chunks_do_not_merge_into_one_sentence(self) -> None:
        r = support("Douro ferries.", "Douro is a river", "Ferries are boats")
        assert r.sentence_local_coverage == (1.0,)  # adjacent chunks are neighbours

    def test_sentence_without_content_is_locally_covered(self) -> None:
        r = support("Yes. Porto lies on the Douro.", self.LONG)
        assert r.sentence_content == (0, 3)
        assert r.sentence_local_coverage == (1.0, 1.0)


class TestInputs:
    def test_bare_string_context_is_one_chunk(self) -> None:
        # Read as one chunk (pipeline.encoding.chunks), not as a sequence of one-letter chunks.
        assert measure_support("Porto", "Porto lies on the Douro.") == measure_support(
            "Porto", ["Porto lies on the Douro."]
        )
        assert measure_support("Porto", "Porto lies on the Douro.").content_coverage == 1.0

    def test_non_string_chunk_is_refused(self) -> None:
        with pytest.raises(ScoringError, match=r"context\[1\]"):
            measure_support("x", ["ok", 3])  # type: ignore[list-item]

    def test_empty_context_supports_nothing(self) -> None:
        r = measure_support("Lisbon answers in 4 hours", [])
        assert r.content_coverage == 0.0
        assert texts(r.unsupported_numbers) == ["4"]


_PIECES = [*"abcXYZ019 .,%'-\n", "Lisbon", "files", "Deleted", " the ", "1,000", "2.5", "NASA"]
_TEXT = st.lists(st.sampled_from(_PIECES), max_size=40).map("".join) | st.text(max_size=40)


def coverage_in_unit_interval(r: SupportReport) -> bool:
    return 0.0 <= r.content_coverage <= 1.0 and all(0.0 <= c <= 1.0 for c in r.sentence_coverage)


def spans_point_into(r: SupportReport, response: str) -> bool:
    spans = r.unsupported_words + r.unsupported_numbers + r.unsupported_names + r.given_words
    return all(response[s.start : s.end] == s.text for s in spans)


class TestProperties:
    @given(response=_TEXT, context=st.lists(_TEXT, max_size=3), question=_TEXT)
    def test_deterministic_bounded_and_spans_exact(
        self, response: str, context: list[str], question: str
    ) -> None:
        r = measure_support(response, context, question)
        assert r == measure_support(response, list(context), question)
        assert coverage_in_unit_interval(r)
        assert spans_point_into(r, response)
        assert r.min_sentence_coverage == min(r.sentence_coverage, default=1.0)
        assert len(r.sentence_local_coverage) == len(r.sentence_coverage)
        assert all(
            0.0 <= local <= cov <= 1.0
            for local, cov in zip(r.sentence_local_coverage, r.sentence_coverage, strict=True)
        )

    @given(response=_TEXT, context=st.lists(_TEXT, max_size=3), question=_TEXT)
    def test_response_in_its_own_context_is_fully_supported(
        self, response: str, context: list[str], question: str
    ) -> None:
        r = measure_support(response, [*context, response], question)
        assert r.content_coverage == 1.0
        assert r.unsupported_words == ()
        assert r.unsupported_numbers == ()
        assert r.unsupported_names == ()

    @given(response=_TEXT, context=_TEXT, extra=_TEXT)
    def test_more_context_never_lowers_coverage(
        self, response: str, context: str, extra: str
    ) -> None:
        before = measure_support(response, [context])
        after = measure_support(response, [context, extra])
        assert after.content_coverage >= before.content_coverage
