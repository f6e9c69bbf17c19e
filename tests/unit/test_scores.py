"""Stage 1 geometry: SGI and DGI against hand-computed angles, degenerate inputs, batching."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from pipeline.bounds.thresholds import SGI_DEGENERATE
from pipeline.errors import ScoringError
from pipeline.scores.geometric import (
    as_chunks,
    compute_dgi,
    compute_dgi_batch,
    compute_sgi,
    compute_sgi_batch,
    dgi_from_embeddings,
    mean_embedding,
    sgi_from_embeddings,
)
from pipeline.scores.results import DGIResult, SGIResult
from tests.fixtures.fakes import FakeEncoder

Q = np.array([1.0, 0.0])
C = np.array([0.0, 1.0])


def at(t: float) -> np.ndarray:
    """The 2-D unit vector at angle `t` from the question axis."""
    return np.array([math.cos(t), math.sin(t)])


def sgi_at(t: float) -> float:
    """SGI of a response at angle t between q=(1,0) and c=(0,1): θ_rq / θ_rc."""
    return t / (math.pi / 2 - t)


class TestSgiHandComputed:
    @pytest.mark.parametrize("t", [0.2, 0.5, 0.7853981633974483, 1.0, 1.3])
    def test_sgi_is_the_angle_ratio(self, t):
        result = sgi_from_embeddings(Q, at(t), [C])
        assert result.value == pytest.approx(sgi_at(t), rel=1e-12)
        assert result.theta_rq == pytest.approx(t, abs=1e-12)
        assert result.theta_rc == pytest.approx(math.pi / 2 - t, abs=1e-12)
        assert result.best_chunk == 0
        assert result.n_chunks == 1
        assert not result.flagged
        assert result.method == "sgi"

    def test_halfway_response_scores_one(self):
        assert sgi_from_embeddings(Q, at(math.pi / 4), [C]).value == pytest.approx(1.0)

    def test_three_dimensional_vectors(self):
        q, c = np.array([1.0, 0.0, 0.0]), np.array([0.0, 0.0, 1.0])
        r = np.array([1.0, 0.0, math.sqrt(3.0)]) / 2.0  # 60° from q, 30° from c
        result = sgi_from_embeddings(q, r, [c])
        assert result.theta_rq == pytest.approx(math.pi / 3)
        assert result.theta_rc == pytest.approx(math.pi / 6)
        assert result.value == pytest.approx(2.0)

    def test_non_normalised_inputs_give_the_same_result(self):
        base = sgi_from_embeddings(Q, at(0.9), [C])
        scaled = sgi_from_embeddings(7.5 * Q, 0.003 * at(0.9), [42.0 * C])
        assert scaled.value == pytest.approx(base.value, rel=1e-12)
        assert scaled.theta_rq == pytest.approx(base.theta_rq, rel=1e-12)

    def test_integer_and_float32_inputs_are_computed_in_float64(self):
        result = sgi_from_embeddings(
            np.array([2, 0]), np.array([1, 1], dtype=np.float32), [np.array([0, 5])]
        )
        assert result.value == pytest.approx(1.0, rel=1e-12)


class TestSgiChunks:
    def test_best_chunk_counts(self):
        r = at(0.6)
        chunks = [at(0.1), at(1.4), at(0.9)]  # the best chunk is the one closest to r
        result = sgi_from_embeddings(Q, r, chunks)
        assert result.best_chunk == 2
        assert result.n_chunks == 3
        assert result.theta_rc == pytest.approx(0.3)
        assert result.value == pytest.approx(0.6 / 0.3)

    def test_best_is_the_maximum_over_single_chunk_scores(self):
        r = at(0.6)
        chunks = [at(0.1), at(1.4), at(0.9), at(1.1)]
        single = [sgi_from_embeddings(Q, r, [c]).value for c in chunks]
        assert sgi_from_embeddings(Q, r, chunks).value == max(single)

    def test_response_equal_to_context_is_the_degenerate_sentinel(self):
        result = sgi_from_embeddings(Q, C, [C])
        assert result.value == SGI_DEGENERATE == 10.0
        assert not result.flagged

    def test_sentinel_also_when_theta_rc_is_tiny(self):
        r = at(math.pi / 2 - 1e-9)
        assert sgi_from_embeddings(Q, r, [C]).value == SGI_DEGENERATE

    def test_sentinel_chunk_wins_over_others(self):
        result = sgi_from_embeddings(Q, C, [at(0.3), C])
        assert result.value == SGI_DEGENERATE
        assert result.best_chunk == 1

    def test_no_chunks_is_a_scoring_error(self):
        with pytest.raises(ScoringError):
            sgi_from_embeddings(Q, at(0.5), [])


class TestSgiDegenerate:
    def test_zero_question_is_flagged(self):
        result = sgi_from_embeddings(np.zeros(2), at(0.5), [C])
        assert result.flagged
        assert result.value == 0.0
        assert "question" in result.flag_reason
        assert result.best_chunk == -1

    def test_nan_response_is_flagged(self):
        result = sgi_from_embeddings(Q, np.array([np.nan, 1.0]), [C])
        assert result.flagged
        assert result.value == 0.0
        assert "response" in result.flag_reason

    def test_infinite_response_is_flagged(self):
        result = sgi_from_embeddings(Q, np.array([np.inf, 1.0]), [C])
        assert result.flagged
        assert result.value == 0.0

    def test_zero_response_is_flagged(self):
        result = sgi_from_embeddings(Q, np.zeros(2), [C])
        assert result.flagged and result.value == 0.0
        assert "response" in result.flag_reason

    def test_every_context_zero_or_nan_is_flagged(self):
        result = sgi_from_embeddings(Q, at(0.5), [np.zeros(2), np.array([np.nan, 0.0])])
        assert result.flagged
        assert result.value == 0.0
        assert "context" in result.flag_reason
        assert result.best_chunk == -1
        assert result.n_chunks == 2

    def test_a_zero_chunk_is_skipped_not_fatal(self):
        result = sgi_from_embeddings(Q, at(0.9), [np.zeros(2), C])
        assert not result.flagged
        assert result.best_chunk == 1
        assert result.value == pytest.approx(sgi_at(0.9))

    def test_flagged_results_serialise(self):
        result = sgi_from_embeddings(np.zeros(2), at(0.5), [C])
        d = result.to_dict()
        assert d["flagged"] is True
        assert d["flag_reason"] == result.flag_reason
        assert d["method"] == "sgi"


class TestDgi:
    def test_hand_computed(self):
        # r - q = (-1, 1): unit (-1, 1)/√2; against μ̂ = (0, 1) the cosine is 1/√2.
        result = dgi_from_embeddings(Q, C, np.array([0.0, 1.0]))
        assert result.value == pytest.approx(1 / math.sqrt(2), rel=1e-12)
        assert result.displacement_norm == pytest.approx(math.sqrt(2), rel=1e-12)
        assert result.method == "dgi"
        assert not result.flagged

    def test_displacement_along_reference_scores_one(self):
        mu = np.array([-1.0, 1.0])
        assert dgi_from_embeddings(Q, C, mu).value == pytest.approx(1.0)
        assert dgi_from_embeddings(Q, C, -mu).value == pytest.approx(-1.0)

    def test_unnormalised_reference_and_inputs(self):
        base = dgi_from_embeddings(Q, at(1.0), np.array([0.0, 1.0]))
        scaled = dgi_from_embeddings(3 * Q, 0.2 * at(1.0), np.array([0.0, 9.0]))
        assert scaled.value == pytest.approx(base.value, rel=1e-12)

    def test_response_equal_to_question_is_flagged(self):
        result = dgi_from_embeddings(Q, 5 * Q, np.array([0.0, 1.0]))
        assert result.flagged
        assert result.value == 0.0
        assert result.flag_reason

    @pytest.mark.parametrize(
        ("q", "r", "mu", "word"),
        [
            (np.zeros(2), C, C, "question"),
            (Q, np.array([np.nan, 0.0]), C, "response"),
            (Q, C, np.zeros(2), "reference"),
        ],
    )
    def test_zero_or_nan_inputs_are_flagged(self, q, r, mu, word):
        result = dgi_from_embeddings(q, r, mu)
        assert result.flagged
        assert result.value == 0.0
        assert word in result.flag_reason


class TestTextValidation:
    def encoder(self) -> FakeEncoder:
        return FakeEncoder({"q": Q, "c": C, "r": at(0.9), "c2": at(1.2)})

    @pytest.mark.parametrize(
        "item",
        [
            ("", "c", "r"),
            ("   ", "c", "r"),
            ("q", "c", ""),
            ("q", "", "r"),
            ("q", [], "r"),
            ("q", ["c", " "], "r"),
            ("q", ["c", 3], "r"),
        ],
    )
    def test_empty_text_is_a_scoring_error(self, item):
        enc = self.encoder()
        with pytest.raises(ScoringError):
            compute_sgi_batch([item], enc)
        assert enc.calls == []

    @pytest.mark.parametrize("item", [("", "r"), ("q", ""), ("q", "\n\t")])
    def test_empty_text_is_a_scoring_error_for_dgi(self, item):
        enc = self.encoder()
        with pytest.raises(ScoringError):
            compute_dgi_batch([item], enc, C)
        assert enc.calls == []

    def test_scoring_error_is_a_value_error(self):
        with pytest.raises(ValueError):
            compute_sgi_batch([("q", "c", "")], self.encoder())

    def test_context_string_is_one_chunk(self):
        assert as_chunks("c") == ["c"]
        result = compute_sgi_batch([("q", "c", "r")], self.encoder())[0]
        assert result.n_chunks == 1
        assert result.value == pytest.approx(sgi_at(0.9))

    def test_context_list_and_tuple_are_chunks(self):
        enc = self.encoder()
        from_list = compute_sgi_batch([("q", ["c2", "c"], "r")], enc)[0]
        from_tuple = compute_sgi_batch([("q", ("c2", "c"), "r")], enc)[0]
        assert from_list == from_tuple
        assert from_list.n_chunks == 2
        assert from_list.best_chunk == 0  # c2 at 1.2 rad is nearer r at 0.9 rad than c
        assert from_list.value == pytest.approx(0.9 / 0.3)

    def test_single_compute_helpers_take_an_encoder(self):
        enc = self.encoder()
        assert compute_sgi("q", "c", "r", encoder=enc).value == pytest.approx(sgi_at(0.9))
        dgi = compute_dgi("q", "c", encoder=enc, reference=np.array([-1.0, 1.0]))
        assert dgi.value == pytest.approx(1.0)


class TestBatching:
    def test_one_encode_call_with_distinct_texts(self):
        enc = FakeEncoder(
            {"q": Q, "c": C, "r1": at(0.9), "r2": at(0.3), "q2": at(-0.2), "c2": at(1.2)}
        )
        items = [
            ("q", "c", "r1"),
            ("q", "c", "r2"),  # question and context repeat
            ("q2", ["c", "c2"], "r1"),
            ("q", "c", "r1"),  # a full duplicate
        ]
        results = compute_sgi_batch(items, enc)
        assert len(enc.calls) == 1
        sent = enc.calls[0]
        assert len(sent) == len(set(sent))
        assert set(sent) == {"q", "c", "r1", "r2", "q2", "c2"}
        assert results[0] == results[3]
        assert results[0].value == pytest.approx(sgi_at(0.9))
        assert results[1].value == pytest.approx(sgi_at(0.3))

    def test_batch_equals_one_by_one(self):
        enc = FakeEncoder({"q": Q, "c": C, "r1": at(0.9), "r2": at(0.3), "c2": at(1.2)})
        items = [("q", "c", "r1"), ("q", ["c2", "c"], "r2")]
        batch = compute_sgi_batch(items, enc)
        single = [compute_sgi_batch([item], enc)[0] for item in items]
        assert batch == single

    def test_dgi_batch_one_encode_call(self):
        enc = FakeEncoder({"q": Q, "r1": C, "r2": at(0.5)})
        results = compute_dgi_batch([("q", "r1"), ("q", "r2"), ("q", "r1")], enc, C)
        assert len(enc.calls) == 1
        assert sorted(enc.calls[0]) == ["q", "r1", "r2"]
        assert results[0] == results[2]
        assert all(isinstance(r, DGIResult) for r in results)

    def test_empty_batch_makes_no_call(self):
        enc = FakeEncoder({})
        assert compute_sgi_batch([], enc) == []
        assert compute_dgi_batch([], enc, C) == []
        assert enc.calls == []

    def test_windowed_response_is_the_mean_of_its_windows(self):
        a, b = 0.6, 1.0
        enc = FakeEncoder(
            {"q": Q, "c": C, "w1": at(a), "w2": 3.0 * at(b)},
            splits={"long response": ["w1", "w2"]},
        )
        result = compute_sgi_batch([("q", "c", "long response")], enc)[0]
        assert result.response_windows == 2
        # the mean of two unit vectors points halfway between them
        assert result.value == pytest.approx(sgi_at((a + b) / 2), rel=1e-12)
        assert set(enc.calls[0]) == {"q", "c", "w1", "w2"}

    def test_windowed_response_in_dgi(self):
        enc = FakeEncoder({"q": Q, "w1": C, "w2": C}, splits={"long": ["w1", "w2"]})
        result = compute_dgi_batch([("q", "long")], enc, np.array([-1.0, 1.0]))[0]
        assert result.response_windows == 2
        assert result.value == pytest.approx(1.0)

    def test_mean_embedding_normalises_each_window(self):
        rows = np.array([[10.0, 0.0], [0.0, 0.1]])
        assert mean_embedding(rows) == pytest.approx(np.array([0.5, 0.5]))

    def test_windowed_context_maps_back_to_the_callers_chunk(self):
        enc = FakeEncoder(
            {"q": Q, "r": at(0.9), "short": at(0.2), "cw1": at(0.4), "cw2": at(1.0)},
            splits={"long chunk": ["cw1", "cw2"]},
        )
        result = compute_sgi_batch([("q", ["short", "long chunk"], "r")], enc)[0]
        assert result.best_chunk == 1  # the caller's index, not the window index (2)
        assert result.n_chunks == 2
        assert result.context_windows == 3
        assert result.value == pytest.approx(0.9 / 0.1, rel=1e-9)

    def test_windowed_context_first_chunk(self):
        enc = FakeEncoder(
            {"q": Q, "r": at(0.9), "cw1": at(0.95), "cw2": at(0.2), "other": at(1.5)},
            splits={"long chunk": ["cw1", "cw2"]},
        )
        result = compute_sgi_batch([("q", ["long chunk", "other"], "r")], enc)[0]
        assert result.best_chunk == 0
        assert result.n_chunks == 2
        assert result.context_windows == 3

    def test_windows_shared_between_items_are_encoded_once(self):
        enc = FakeEncoder(
            {"q": Q, "r": at(0.9), "cw1": at(0.4), "cw2": at(1.0)},
            splits={"long chunk": ["cw1", "cw2"], "long response": ["cw1", "r"]},
        )
        compute_sgi_batch([("q", "long chunk", "r"), ("q", "long chunk", "long response")], enc)
        assert len(enc.calls) == 1
        assert sorted(enc.calls[0]) == ["cw1", "cw2", "q", "r"]

    def test_flagged_window_in_batch_reports_unmapped_best_chunk(self):
        enc = FakeEncoder({"q": np.zeros(2), "c": C, "r": at(0.5)})
        result = compute_sgi_batch([("q", ["c", "c"], "r")], enc)[0]
        assert result.flagged
        assert result.best_chunk == -1
        assert result.n_chunks == 2


# Components on a 1e-3 grid: no subnormals, so power-of-two scaling stays exact.
vectors3 = st.lists(st.integers(-10_000, 10_000), min_size=3, max_size=3).map(
    lambda xs: np.array(xs, dtype=np.float64) / 1000.0
)
scales = st.floats(1e-3, 1e3, allow_nan=False, allow_infinity=False)


def _well_separated(*vs: np.ndarray) -> bool:
    units = []
    for v in vs:
        n = np.linalg.norm(v)
        if n < 0.1:
            return False
        units.append(v / n)
    return all(
        abs(float(np.dot(units[i], units[j]))) < 0.999
        for i in range(len(units))
        for j in range(i + 1, len(units))
    )


class TestProperties:
    @settings(max_examples=200, deadline=None)
    @given(q=vectors3, r=vectors3, c=vectors3, sq=scales, sr=scales, sc=scales)
    def test_sgi_invariant_to_positive_scaling(self, q, r, c, sq, sr, sc):
        assume(_well_separated(q, r, c))
        base = sgi_from_embeddings(q, r, [c])
        scaled = sgi_from_embeddings(sq * q, sr * r, [sc * c])
        assert scaled.value == pytest.approx(base.value, rel=1e-6)
        assert scaled.flagged == base.flagged

    @settings(max_examples=100, deadline=None)
    @given(q=vectors3, r=vectors3, c=vectors3, k=st.integers(-20, 20))
    def test_power_of_two_scaling_is_exact(self, q, r, c, k):
        assume(_well_separated(q, r, c))
        factor = 2.0**k
        assert sgi_from_embeddings(q * factor, r, [c]) == sgi_from_embeddings(q, r, [c])

    @settings(max_examples=100, deadline=None)
    @given(q=vectors3, r=vectors3, c=vectors3, mu=vectors3)
    def test_deterministic(self, q, r, c, mu):
        assert sgi_from_embeddings(q, r, [c]) == sgi_from_embeddings(q.copy(), r.copy(), [c.copy()])
        assert dgi_from_embeddings(q, r, mu) == dgi_from_embeddings(q.copy(), r.copy(), mu.copy())

    @settings(max_examples=100, deadline=None)
    @given(q=vectors3, r=vectors3, c=vectors3)
    def test_sgi_is_finite_and_non_negative(self, q, r, c):
        result = sgi_from_embeddings(q, r, [c])
        assert isinstance(result, SGIResult)
        assert math.isfinite(result.value)
        assert result.value >= 0.0
        if result.flagged:
            assert result.value == 0.0 and result.flag_reason

    @settings(max_examples=100, deadline=None)
    @given(q=vectors3, r=vectors3, mu=vectors3)
    def test_dgi_is_the_cosine_of_the_unit_displacement_to_mu(self, q, r, mu):
        assume(_well_separated(q, r) and float(np.linalg.norm(mu)) >= 0.1)
        qh = [x / math.hypot(*q) for x in q]
        rh = [x / math.hypot(*r) for x in r]
        d = [b - a for a, b in zip(qh, rh, strict=True)]
        expected = sum(x * m for x, m in zip(d, mu, strict=True)) / (
            math.hypot(*d) * math.hypot(*mu)
        )
        result = dgi_from_embeddings(q, r, mu)
        assert result.value == pytest.approx(expected, abs=1e-9)
        assert dgi_from_embeddings(q, r, -mu).value == pytest.approx(-result.value, abs=1e-12)
        assert dgi_from_embeddings(r, q, mu).value == pytest.approx(-result.value, abs=1e-12)
