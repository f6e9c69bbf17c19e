"""Claims, windows and their bookkeeping (pipeline.claims.units): pure, no model."""

from __future__ import annotations

import numpy as np
import pytest

from pipeline.claims.units import (
    Claim,
    Window,
    answer_core,
    context_statements,
    lexical_overlap,
    rank_windows,
    split_claims,
    split_windows,
    strip_lead_in,
    summarise,
)
from pipeline.errors import ScoringError

CONTEXT = (
    "The lighthouse at Keld Point was built in 1874. It stands 31 metres tall. "
    "Its keeper, Ada Morrow, kept the lamp lit for forty years."
)


def texts(response: str) -> list[str]:
    return [c.text for c in split_claims(response)]


class TestSplitClaims:
    def test_one_claim_per_sentence(self) -> None:
        assert texts("The tower is white. It was painted in 1990.") == [
            "The tower is white.",
            "It was painted in 1990.",
        ]

    def test_clauses_with_their_own_verbs_are_split(self) -> None:
        got = texts("The tower is white, and the keeper lived in the cottage.")
        assert got == ["The tower is white", "The keeper lived in the cottage."]

    def test_semicolon_joins_are_split(self) -> None:
        assert len(split_claims("The lamp was oil-fired; it was replaced in 1950.")) == 2

    def test_lists_joined_by_and_stay_whole(self) -> None:
        assert texts("Season the fish with salt and pepper.") == [
            "Season the fish with salt and pepper."
        ]

    def test_a_clause_without_a_verb_keeps_the_sentence_whole(self) -> None:
        assert len(split_claims("The tower was built in 1874 and painted white.")) == 1

    def test_offsets_point_at_the_response(self) -> None:
        response = "Based on the passage, the answer is Ada Morrow. She kept the lamp."
        for claim in split_claims(response):
            assert claim.text.rstrip(".") in response[claim.start : claim.end]

    def test_sentences_without_content_are_not_claims(self) -> None:
        assert split_claims("Yes. It is.") == ()


class TestLeadIn:
    @pytest.mark.parametrize(
        ("wrapped", "bare"),
        [
            ("Based on the passage, the answer is Ada Morrow.", "Ada Morrow."),
            ("According to the provided context, the answer is 1874.", "1874."),
            ("The answer is forty years", "Forty years"),
            ("Ada Morrow is the answer.", "Ada Morrow."),
        ],
    )
    def test_wrappers_are_stripped(self, wrapped: str, bare: str) -> None:
        assert strip_lead_in(wrapped) == bare

    def test_a_plain_sentence_is_unchanged(self) -> None:
        assert strip_lead_in("It stands 31 metres tall.") == "It stands 31 metres tall."

    def test_a_wrapper_alone_is_kept(self) -> None:
        assert strip_lead_in("The answer is") == "The answer is"


class TestWindows:
    def test_runs_of_consecutive_sentences(self) -> None:
        windows = split_windows(CONTEXT, max_sentences=2)
        assert [(w.first, w.size) for w in windows] == [(0, 1), (0, 2), (1, 1), (1, 2), (2, 1)]
        assert windows[1].text.startswith("The lighthouse") and "31 metres" in windows[1].text

    def test_single_sentences_by_default(self) -> None:
        assert [w.size for w in split_windows(CONTEXT)] == [1, 1, 1]

    def test_windows_stay_within_a_chunk(self) -> None:
        windows = split_windows(["First chunk here.", "Second chunk here."], max_sentences=3)
        assert [(w.chunk, w.size) for w in windows] == [(0, 1), (1, 1)]

    def test_json_is_read_field_by_field(self) -> None:
        ctx = '{"name": "Gull Cafe", "hours": {"Monday": "9-17"}, "tags": ["tea", "cake"]}'
        fields = ("name: Gull Cafe", "hours Monday: 9-17", "tags: tea, cake")
        assert context_statements(ctx) == (fields,)
        assert split_windows(ctx, max_sentences=2)[1].text == "name: Gull Cafe; hours Monday: 9-17"

    def test_broken_json_is_prose(self) -> None:
        assert context_statements("{not json. Really not.") == (("{not json.", "Really not."),)

    def test_bad_context_and_size_raise(self) -> None:
        with pytest.raises(ScoringError):
            context_statements([1, 2])  # type: ignore[list-item]
        with pytest.raises(ScoringError):
            split_windows(CONTEXT, max_sentences=0)


class TestRanking:
    def test_lexical_overlap_counts_content_stems(self) -> None:
        assert lexical_overlap("The keeper kept the lamps.", CONTEXT) == 1.0
        assert lexical_overlap("The keeper kept 12 lamps.", CONTEXT) == pytest.approx(3 / 4)
        assert lexical_overlap("It is.", CONTEXT) == 1.0

    def test_best_windows_by_overlap(self) -> None:
        windows = [w.text for w in split_windows(CONTEXT, max_sentences=1)]
        assert rank_windows(["Ada Morrow kept the lamp lit."], windows, k=1) == ((2,),)

    def test_vectors_break_lexical_ties(self) -> None:
        windows = ["alpha beta", "alpha gamma"]
        cv = np.array([[0.0, 1.0]])
        wv = np.array([[1.0, 0.0], [0.0, 1.0]])
        assert rank_windows(["alpha"], windows, cv, wv, k=2) == ((1, 0),)

    def test_vectors_for_one_side_only_raise(self) -> None:
        with pytest.raises(ScoringError):
            rank_windows(["a"], ["b"], np.ones((1, 2)), None)

    def test_no_windows_gives_no_candidates(self) -> None:
        assert rank_windows(["claim words"], []) == ((),)


class TestSummarise:
    claims = (Claim("A tower.", 0, 8), Claim("A keeper.", 9, 18))
    windows = (Window("w0", 0, 0, 1), Window("w1", 0, 1, 1), Window("w2", 0, 2, 1))

    def test_weakest_claim_and_its_best_window(self) -> None:
        got = summarise(self.claims, self.windows, [(0, 1), (2, 1)], [(0.9, 0.2), (0.1, 0.4)])
        assert got.score == pytest.approx(0.4)
        assert got.weakest == self.claims[1]
        assert got.window == self.windows[1]
        assert got.claim_scores == pytest.approx((0.9, 0.4))

    def test_no_claims_claims_nothing(self) -> None:
        got = summarise((), self.windows, (), ())
        assert (got.score, got.weakest, got.window) == (1.0, None, None)

    def test_a_claim_without_windows_is_unsupported(self) -> None:
        got = summarise(self.claims[:1], (), [()], [()])
        assert (got.score, got.window) == (0.0, None)

    def test_shape_mismatch_raises(self) -> None:
        with pytest.raises(ScoringError):
            summarise(self.claims, self.windows, [(0,)], [(0.5,)])
        with pytest.raises(ScoringError):
            summarise(self.claims[:1], self.windows, [(0, 1)], [(0.5,)])


class TestAnswerCore:
    """What a one-sentence answer adds to its question: the text the features read."""

    Q = "What is the capital of Australia?"

    @pytest.mark.parametrize(
        "answer",
        [
            "Canberra",
            "Canberra.",
            "The capital of Australia is Canberra.",
            "Based on the passage, the answer is Canberra.",
            "Canberra is the answer.",
            "It's Canberra.",
        ],
    )
    def test_the_same_claim_in_any_wrapper_reads_the_same(self, answer: str) -> None:
        assert answer_core(answer, self.Q) == "Canberra"

    def test_every_new_word_stays(self) -> None:
        core = answer_core("The capital of Australia is Sydney, its largest city.", self.Q)
        assert core == "Sydney, its largest city"

    @pytest.mark.parametrize(
        ("answer", "kept"),
        [
            ("The capital of Australia is not Canberra.", "not Canberra"),
            ("Only Canberra is the capital.", "Only Canberra"),
        ],
    )
    def test_a_negation_or_quantifier_is_never_dropped(self, answer: str, kept: str) -> None:
        assert answer_core(answer, self.Q) == kept

    def test_a_meaning_word_outside_the_new_words_keeps_the_sentence_whole(self) -> None:
        assert answer_core("Sydney is not the capital of Australia.", self.Q) == "Sydney is not"
        # Here "not" is the question's word, so only "Sydney" is new; dropping the "not"
        # around it would turn the claim round, so the sentence is read whole.
        answer = "Sydney is not the capital of Australia."
        assert answer_core(answer, "Which city is not the capital of Australia?") == answer

    def test_several_sentences_or_no_question_are_left_whole(self) -> None:
        two = "Canberra is the capital. Sydney is larger."
        assert answer_core(two, self.Q) == two
        assert answer_core("The capital of Australia is Canberra.", "") == (
            "The capital of Australia is Canberra."
        )

    def test_an_answer_adding_nothing_keeps_its_words(self) -> None:
        assert answer_core("It's no.", "Is Sydney the capital of Australia?") == "no"
