"""Self-supplied evidence does not count: chunks from untrusted sources, chunks that echo
the response, and samples that copy it or each other (issue 9, item 4)."""

from __future__ import annotations

import pytest

from pipeline.errors import PolicyError
from pipeline.guards.provenance import (
    DEFAULT_GROUNDING_SOURCES,
    SHORT_SPAN_CHARS,
    Chunk,
    Exclusion,
    Source,
    assess_context,
    distinct_samples,
    exclusion,
    normalise,
    parse_sources,
)

LONG = "The Eiffel Tower was completed in 1889 and is 330 metres tall today."


class TestNormalise:
    def test_case_punctuation_and_spacing(self):
        assert normalise("  Paris,\tis   THE capital! ") == "paris is the capital"

    def test_compatibility_forms(self):
        assert normalise("ＰＡＲＩＳ") == normalise("paris")


class TestExclusion:
    def test_a_chunk_equal_to_the_response_is_not_evidence(self):
        assert exclusion(Chunk("Paris."), "paris") is Exclusion.EQUALS_RESPONSE

    def test_the_response_wrapped_in_a_short_span_is_not_evidence(self):
        chunk = Chunk(f"Earlier you said: {LONG.upper()} Thanks.")
        assert exclusion(chunk, LONG) is Exclusion.CONTAINS_RESPONSE

    def test_a_short_answer_inside_real_evidence_counts(self):
        assert exclusion(Chunk("Paris is the capital of France."), "Paris") is None

    def test_an_extractive_answer_from_a_longer_passage_counts(self):
        passage = f"{LONG} It was built for the 1889 World's Fair in Paris."
        assert exclusion(Chunk(passage), LONG) is None

    def test_both_limits_are_the_short_span(self):
        span = SHORT_SPAN_CHARS
        long, short = "a" * (span + 1), "a" * span
        assert exclusion(Chunk(f"{long} {'b' * (span - 1)}"), long) is Exclusion.CONTAINS_RESPONSE
        assert exclusion(Chunk(f"{long} {'b' * span}"), long) is None
        assert exclusion(Chunk(f"{short} b"), short) is None

    @pytest.mark.parametrize("source", [Source.HISTORY, Source.USER])
    def test_untrusted_sources_do_not_ground_by_default(self, source):
        assert exclusion(Chunk("Unrelated true fact.", source), LONG) is Exclusion.SOURCE

    def test_a_route_may_trust_history(self):
        sources = {*DEFAULT_GROUNDING_SOURCES, Source.HISTORY}
        assert exclusion(Chunk("A fact.", Source.HISTORY), LONG, sources) is None


class TestAssessContext:
    def test_counts_and_exclusions_are_recorded(self):
        chunks = [
            Chunk(LONG),
            Chunk("The tower is 300 metres tall.", Source.RETRIEVAL),
            Chunk("It was finished in 1889.", Source.HISTORY),
        ]
        result = assess_context(chunks, LONG)
        assert result.counted == (1,)
        assert result.to_dict() == {
            "chunks": 3,
            "counted": [1],
            "excluded": [
                {"index": 0, "source": "retrieval", "reason": "equals_response"},
                {"index": 2, "source": "history", "reason": "source_not_grounding"},
            ],
        }

    def test_only_self_evidence_leaves_nothing(self):
        assert not assess_context([Chunk(LONG)], LONG).any_counted


class TestDistinctSamples:
    def test_copies_of_the_response_count_once(self):
        result = distinct_samples([LONG, LONG.upper(), f"{LONG}!"], LONG, min_distinct=2)
        assert result.distinct == (LONG,)
        assert (result.copies_of_response, result.duplicates) == (3, 2)
        assert not result.enough

    def test_copies_of_each_other_count_once(self):
        result = distinct_samples(["Paris.", "paris", "Lyon", "  "], "Paris", min_distinct=2)
        assert result.distinct == ("Paris.", "Lyon")
        assert result.enough
        assert result.to_dict() == {
            "samples": 3,
            "distinct": 2,
            "copies_of_response": 2,
            "duplicates": 1,
            "min_distinct": 2,
            "enough": True,
        }


class TestParseSources:
    def test_names(self):
        assert parse_sources(["tool", "history"], "x") == {Source.TOOL, Source.HISTORY}

    def test_unknown_name_lists_the_allowed(self):
        with pytest.raises(PolicyError, match="retrieval, tool, history, user"):
            parse_sources(["web"], "routes.default.grounding_sources")
