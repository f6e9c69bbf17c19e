"""The claim-support head and its pair features (pipeline.claims.head): numpy only, no model."""

from __future__ import annotations

import numpy as np
import pytest

from pipeline.claims.head import LEXICAL_FEATURES, ClaimHead, assess, pair_features, prepare_pairs
from pipeline.errors import ScoringError

DIM = 4
CONTEXT = "The Harwick ferry was launched in 1962. It carries 240 passengers."


def fake_encode(texts):
    """A deterministic stand-in for the sentence encoder: one row per text."""
    rows = []
    for t in texts:
        rng = np.random.default_rng(sum(map(ord, t)))
        rows.append(rng.normal(size=DIM))
    return np.array(rows, dtype=np.float32).reshape(len(texts), DIM)


def coverage_head(width: int) -> ClaimHead:
    """A logistic head that reads only the window coverage feature (steeply)."""
    w = np.zeros((width, 1), dtype=np.float32)
    w[LEXICAL_FEATURES.index("window_coverage"), 0] = 20.0
    return ClaimHead(
        np.zeros(width, np.float32), np.ones(width, np.float32), ((w, np.array([-10.0])),)
    )


WIDTH = len(LEXICAL_FEATURES)


class TestPairFeatures:
    def test_layout_and_lexical_facts(self) -> None:
        v = np.ones(DIM, dtype=np.float32)
        f = pair_features("It carries 300 passengers.", ["It carries 240 passengers."], v, v, 1.0)
        named = dict(zip(LEXICAL_FEATURES, f[: len(LEXICAL_FEATURES)], strict=True))
        assert f.shape == (WIDTH,)
        assert named["cosine"] == pytest.approx(1.0)
        assert named["unsupported_number"] == 1.0
        assert named["window_coverage"] == pytest.approx(2 / 3)  # carries, passengers; not 300

    def test_best_statement_sees_a_claim_stitched_from_two(self) -> None:
        v = np.ones(DIM, dtype=np.float32)
        claim = "The ferry launched in 1962 carries 240 passengers."
        f = pair_features(claim, CONTEXT.split(". "), v, v, 1.0)
        named = dict(zip(LEXICAL_FEATURES, f[: len(LEXICAL_FEATURES)], strict=True))
        assert named["window_coverage"] == 1.0
        assert named["best_statement_coverage"] < 1.0

    def test_negation_mismatch(self) -> None:
        v = np.ones(DIM, dtype=np.float32)
        f = pair_features("It was not launched in 1962.", ["It was launched in 1962."], v, v, 1.0)
        assert f[LEXICAL_FEATURES.index("negation_mismatch")] == 1.0

    def test_context_coverage_is_passed_through(self) -> None:
        v = np.ones(DIM, dtype=np.float32)
        f = pair_features("Ferry.", ["Ferry."], v, v, 0.25)
        assert f[LEXICAL_FEATURES.index("context_coverage")] == 0.25

    def test_zero_vectors_give_zero_cosine(self) -> None:
        z = np.zeros(DIM, dtype=np.float32)
        assert pair_features("Ferry.", ["Ferry."], z, z, 1.0)[0] == 0.0


class TestClaimHead:
    def test_probability_follows_the_layers(self) -> None:
        head = coverage_head(WIDTH)
        x = np.zeros((2, WIDTH), dtype=np.float32)
        x[0, LEXICAL_FEATURES.index("window_coverage")] = 1.0
        p = head.probability(x)
        assert p[0] > 0.99 and p[1] < 0.01

    def test_hidden_layer_uses_relu(self) -> None:
        w0 = np.array([[1.0], [-1.0]], dtype=np.float32)
        head = ClaimHead(
            np.zeros(2, np.float32),
            np.ones(2, np.float32),
            ((w0, np.zeros(1, np.float32)), (np.array([[1.0]], np.float32), np.zeros(1))),
        )
        assert head.probability(np.array([[0.0, 3.0]]))[0] == pytest.approx(0.5)

    def test_shapes_are_checked(self) -> None:
        with pytest.raises(ScoringError):
            ClaimHead(np.zeros(3), np.ones(2), ((np.zeros((3, 1)), np.zeros(1)),))
        with pytest.raises(ScoringError):
            ClaimHead(np.zeros(3), np.ones(3), ((np.zeros((3, 2)), np.zeros(2)),))
        with pytest.raises(ScoringError):
            coverage_head(WIDTH).probability(np.zeros((1, WIDTH + 1)))


class TestAssess:
    def test_weakest_claim_is_the_unsupported_one(self) -> None:
        response = "The ferry was launched in 1962. It carries 900 cars and lorries."
        got = assess(response, CONTEXT, fake_encode, coverage_head(WIDTH))
        assert got.weakest is not None and "900" in got.weakest.text
        assert got.claim_scores[0] > 0.9 > got.score
        assert got.window is not None and "240" in got.window.text

    def test_pairs_follow_the_candidates(self) -> None:
        windows, cands, features = prepare_pairs(
            ["It carries 240 passengers."], CONTEXT, fake_encode
        )
        assert len(windows) == 2 and len(cands[0]) == 2  # two sentences, one window each
        assert features.shape == (2, WIDTH)

    def test_empty_context_leaves_claims_unsupported(self) -> None:
        got = assess("It carries 240 passengers.", "", fake_encode, coverage_head(WIDTH))
        assert got.score == 0.0 and got.window is None
