"""Stage 3: grouping sampled answers by meaning and the grounding decision over them."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.errors import PolicyError, ScoringError
from pipeline.rungs.self_consistency import (
    BudgetLimit,
    ConsistencyConfig,
    ConsistencyLevel,
    GroundingOutcome,
    build_sample_request,
    decide_consistency,
    group_by_meaning,
    level_for,
)

SAME, OTHER = 0.95, 0.10


def block_matrix(labels: list[int]) -> np.ndarray:
    """Similarity matrix where samples with equal labels mean the same thing."""
    lab = np.asarray(labels)
    sim = np.where(lab[:, None] == lab[None, :], SAME, OTHER).astype(float)
    np.fill_diagonal(sim, 1.0)
    return sim


def response_to(labels: list[int], meaning: int) -> np.ndarray:
    """The response's similarity to each sample: high for samples of `meaning`."""
    return np.asarray([SAME if lab == meaning else OTHER for lab in labels])


def texts(labels: list[int]) -> list[str]:
    return [f"answer meaning {lab} (sample {i})" for i, lab in enumerate(labels)]


def decide(labels, meaning=0, **kwargs):
    config = kwargs.pop("config", ConsistencyConfig())
    return decide_consistency(
        response_to(labels, meaning), block_matrix(labels), texts(labels), config, **kwargs
    )


class TestGrouping:
    def test_same_meaning_from_two_sources_collapses(self):
        # Sample 0 from the encoder, sample 1 from another source: same meaning, one group.
        sim = np.array([[1.0, 0.91, 0.2], [0.91, 1.0, 0.1], [0.2, 0.1, 1.0]])
        assert group_by_meaning(sim, 0.8) == [[0, 1], [2]]

    def test_complete_link_does_not_chain(self):
        # a~b and b~c but a and c differ: c must not join a's meaning through b.
        sim = np.array([[1.0, 0.9, 0.3], [0.9, 1.0, 0.85], [0.3, 0.85, 1.0]])
        assert group_by_meaning(sim, 0.8) == [[0, 1], [2]]

    def test_threshold_is_inclusive(self):
        sim = np.array([[1.0, 0.8], [0.8, 1.0]])
        assert group_by_meaning(sim, 0.8) == [[0, 1]]
        assert group_by_meaning(sim, 0.8000001) == [[0], [1]]

    def test_nli_one_direction_is_not_same_meaning(self):
        # Bidirectional entailment: 0 entails 1 but 1 does not entail 0.
        sim = np.array([[1.0, 1.0], [0.0, 1.0]])
        assert group_by_meaning(sim, 0.5) == [[0], [1]]

    def test_nan_is_never_same(self):
        sim = np.array([[1.0, np.nan], [np.nan, 1.0]])
        assert group_by_meaning(sim, 0.5) == [[0], [1]]

    def test_empty(self):
        assert group_by_meaning(np.zeros((0, 0)), 0.8) == []

    def test_bad_shape(self):
        with pytest.raises(ScoringError):
            group_by_meaning(np.zeros((2, 3)), 0.8)

    @settings(max_examples=60, deadline=None)
    @given(st.lists(st.integers(0, 3), min_size=1, max_size=12))
    def test_partition_and_determinism(self, labels):
        sim = block_matrix(labels)
        groups = group_by_meaning(sim, 0.8)
        flat = sorted(i for g in groups for i in g)
        assert flat == list(range(len(labels)))
        assert groups == group_by_meaning(sim.copy(), 0.8)
        # Block structure is recovered exactly.
        for g in groups:
            assert len({labels[i] for i in g}) == 1
        assert len(groups) == len(set(labels))


class TestDecision:
    def test_dominant_meaning_commits_and_passes(self):
        d = decide([0, 0, 0, 0, 1])
        assert d.outcome is GroundingOutcome.COMMITTED
        assert d.committed is not None and d.committed.members == (0, 1, 2, 3)
        assert d.committed.signature == "m0"
        assert d.committed.score == pytest.approx(0.8)
        assert d.response_agrees and d.passes
        assert d.competing == ()

    def test_single_meaning_commits(self):
        d = decide([0, 0, 0])
        assert d.outcome is GroundingOutcome.COMMITTED
        assert d.committed.score == 1.0
        assert "one meaning" in d.reason

    def test_two_meanings_within_margin_require_clarification(self):
        d = decide([0, 1, 0, 1, 0])  # 0.6 vs 0.4: lead 0.2 < 0.25
        assert d.outcome is GroundingOutcome.REQUIRES_CLARIFICATION
        assert d.committed is None
        assert [i.members for i in d.competing] == [(0, 2, 4), (1, 3)]
        assert not d.passes
        assert "clarification" in d.reason

    def test_margin_exactly_commits(self):
        cfg = ConsistencyConfig(dominance_margin=0.2)
        d = decide([0, 1, 0, 1, 0], config=cfg)  # 3/5 - 2/5 is 0.19999999999999996 in floats
        assert d.outcome is GroundingOutcome.COMMITTED

    def test_competing_excludes_meanings_outside_the_margin(self):
        # 4 vs 4 vs 1 of 9: the lone sample trails the leaders by 0.33 >= 0.25.
        d = decide([0, 0, 0, 0, 1, 1, 1, 1, 2])
        assert d.outcome is GroundingOutcome.REQUIRES_CLARIFICATION
        assert len(d.competing) == 2
        assert len(d.interpretations) == 3

    def test_response_disagreeing_commits_but_does_not_pass(self):
        d = decide([0, 0, 0, 0, 1], meaning=1)
        assert d.outcome is GroundingOutcome.COMMITTED
        assert not d.response_agrees
        assert not d.passes
        assert "does not agree" in d.reason
        assert d.level is ConsistencyLevel.INCONSISTENT

    def test_budget_cut_never_commits_even_with_one_meaning(self):
        d = decide([0, 0, 0], budget_limit=BudgetLimit.TIMEOUT)
        assert d.outcome is GroundingOutcome.BUDGET_EXCEEDED
        assert d.committed is None
        assert not d.passes
        assert d.budget_limit is BudgetLimit.TIMEOUT
        assert len(d.partial_at_cutoff) == 1
        assert d.partial_at_cutoff[0].members == (0, 1, 2)
        assert "timeout" in d.reason

    def test_budget_limit_accepts_string(self):
        d = decide([0, 1], budget_limit="max_tokens")
        assert d.budget_limit is BudgetLimit.MAX_TOKENS
        assert len(d.partial_at_cutoff) == 2

    def test_unknown_budget_limit(self):
        with pytest.raises(PolicyError, match="budget_limit"):
            decide([0, 0], budget_limit="lunch")

    def test_no_samples_unresolved(self):
        d = decide_consistency(np.zeros(0), np.zeros((0, 0)), [])
        assert d.outcome is GroundingOutcome.UNRESOLVED
        assert d.committed is None and d.competing == ()
        assert d.consistency_score == 0.0
        assert "no usable samples" in d.reason

    def test_empty_samples_are_not_usable(self):
        sim = np.ones((3, 3))
        d = decide_consistency(np.ones(3), sim, ["", "   ", "Paris"])
        assert d.outcome is GroundingOutcome.UNRESOLVED
        assert d.usable_samples == 1 and d.total_samples == 3

    def test_empty_samples_ignored_in_groups_and_score(self):
        labels = [0, 0, 1, 0]
        samples = texts(labels)
        samples[2] = ""
        d = decide_consistency(response_to(labels, 0), block_matrix(labels), samples)
        assert d.outcome is GroundingOutcome.COMMITTED
        assert d.committed.members == (0, 1, 3)
        assert d.consistency_score == 1.0

    def test_representative_is_the_strongest_member(self):
        sim = np.array(
            [
                [1.0, 0.82, 0.81],
                [0.82, 1.0, 0.97],
                [0.81, 0.97, 1.0],
            ]
        )
        d = decide_consistency(np.full(3, 0.9), sim, ["a", "b", "c"])
        assert d.committed.representative == 1
        assert d.committed.evidence == ("b", "c", "a")

    def test_shape_mismatch(self):
        with pytest.raises(ScoringError):
            decide_consistency(np.ones(2), np.ones((3, 3)), ["a", "b", "c"])
        with pytest.raises(ScoringError):
            decide_consistency(np.ones(3), np.ones((2, 2)), ["a", "b", "c"])

    def test_to_dict_is_json_and_text_only_in_evidence(self):
        d = decide([0, 1, 0, 1, 0])
        data = d.to_dict()
        json.dumps(data)
        assert data["outcome"] == "requires_clarification"
        assert "answer meaning" not in data["reason"]
        assert data["competing"][0]["evidence"][0].startswith("answer meaning")

    def test_evidence_is_short(self):
        long = "word " * 500
        d = decide_consistency(np.ones(4), np.ones((4, 4)), [long] * 4)
        assert len(d.committed.evidence) == 3
        assert all(len(e) <= 240 for e in d.committed.evidence)


class TestLevels:
    @pytest.mark.parametrize(
        ("score", "level"),
        [
            (0.80, ConsistencyLevel.CONSISTENT),
            (0.7999999, ConsistencyLevel.PARTLY),
            (0.55, ConsistencyLevel.PARTLY),
            (0.5499999, ConsistencyLevel.INCONSISTENT),
            (1.0, ConsistencyLevel.CONSISTENT),
            (0.0, ConsistencyLevel.INCONSISTENT),
        ],
    )
    def test_cut_points(self, score, level):
        assert level_for(score, ConsistencyConfig()) is level

    def test_score_exactly_080_from_samples(self):
        d = decide([0, 0, 0, 0, 1])  # 4 of 5 match the response
        assert d.consistency_score == 0.8
        assert d.level is ConsistencyLevel.CONSISTENT

    def test_score_exactly_055_from_samples(self):
        labels = [0] * 11 + [1] * 9  # 11 of 20
        cfg = ConsistencyConfig(n_samples=20)
        d = decide(labels, config=cfg)
        assert d.consistency_score == 0.55
        assert d.level is ConsistencyLevel.PARTLY

    def test_just_below_055(self):
        labels = [0] * 12 + [1] * 10  # 12 of 22 = 0.5454...
        d = decide(labels, config=ConsistencyConfig(n_samples=22))
        assert d.level is ConsistencyLevel.INCONSISTENT

    def test_similarity_exactly_at_same_meaning_matches(self):
        d = decide_consistency(np.array([0.8, 0.79]), np.ones((2, 2)), ["a", "b"])
        assert d.consistency_score == 0.5


class TestConfig:
    def test_defaults(self):
        c = ConsistencyConfig()
        assert (c.same_meaning, c.dominance_margin, c.min_samples) == (0.80, 0.25, 2)
        assert (c.n_samples, c.max_tokens, c.token_budget) == (5, 256, 4000)

    def test_from_mapping(self):
        c = ConsistencyConfig.from_mapping({"same_meaning": 0.7, "n_samples": 8})
        assert c.same_meaning == 0.7 and c.n_samples == 8

    def test_unknown_key_names_the_field(self):
        with pytest.raises(PolicyError) as err:
            ConsistencyConfig.from_mapping({"samples": 3})
        assert err.value.field == "consistency.samples"

    @pytest.mark.parametrize(
        ("key", "value"),
        [
            ("same_meaning", 0.0),
            ("same_meaning", 1.5),
            ("dominance_margin", 0.0),
            ("min_samples", 0),
            ("min_samples", 9),
            ("min_samples", 2.0),
            ("n_samples", True),
            ("partly", 0.9),
            ("temperature", -0.1),
            ("max_tokens", 0),
            ("token_budget", 10),
            ("agree_threshold", float("nan")),
        ],
    )
    def test_invalid_values_name_the_field(self, key, value):
        with pytest.raises(PolicyError) as err:
            ConsistencyConfig.from_mapping({key: value})
        assert err.value.field == f"consistency.{key}"


class TestSampleRequest:
    def test_with_context(self):
        body = build_sample_request("m", "Q?", ["c1", ""], n=5, temperature=0.7, max_tokens=64)
        assert body["n"] == 5 and body["max_tokens"] == 64 and body["temperature"] == 0.7
        assert "[1] c1" in body["messages"][1]["content"]

    def test_without_context(self):
        body = build_sample_request("m", "Q?", None, n=1, temperature=0.0, max_tokens=8)
        assert body["messages"][1]["content"] == "Question: Q?"
