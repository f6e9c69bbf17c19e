"""Loading a claim head from disk (workers.clients.claims) and scoring with it, no real model."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from pipeline.claims.head import LEXICAL_FEATURES, ClaimHead
from tests.unit.test_claim_head import fake_encode
from workers.clients.claims import ClaimScorer, head_metadata, load_head
from workers.eval.train import _save

WIDTH = len(LEXICAL_FEATURES)


def two_layer_head() -> ClaimHead:
    rng = np.random.default_rng(0)
    return ClaimHead(
        rng.normal(size=WIDTH).astype(np.float32),
        np.abs(rng.normal(size=WIDTH)).astype(np.float32) + 0.5,
        (
            (rng.normal(size=(WIDTH, 3)).astype(np.float32), np.zeros(3, np.float32)),
            (rng.normal(size=(3, 1)).astype(np.float32), np.zeros(1, np.float32)),
        ),
    )


class FakeEncoder:
    def encode(self, texts):
        return fake_encode(texts)


def test_a_saved_head_loads_with_its_metadata(tmp_path: Path) -> None:
    head = two_layer_head()
    _save(head, tmp_path, {"seed": 7, "cv": {"cut": float("inf")}})
    loaded = load_head(tmp_path)
    x = np.random.default_rng(1).normal(size=(5, WIDTH)).astype(np.float32)
    # float16 weights: the shipped head agrees with the trained one to a few decimals
    np.testing.assert_allclose(loaded.probability(x), head.probability(x), atol=5e-3)
    assert head_metadata(tmp_path) == {"seed": 7, "cv": {"cut": None}}  # strict JSON


def test_a_missing_head_says_where_it_looked(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=str(tmp_path)):
        load_head(tmp_path / "none")


def test_scorer_scores_pairs_and_responses() -> None:
    scorer = ClaimScorer(two_layer_head(), FakeEncoder())
    p = scorer.score_pairs([("It sails at noon.", "The ferry sails at noon."), ("x y z", "a b c")])
    assert p.shape == (2,) and np.all((p >= 0) & (p <= 1))
    got = scorer.assess("It sails at noon. It has a bar.", "The ferry sails at noon.")
    assert len(got.claim_scores) == 2 and got.score == min(got.claim_scores)


def test_the_embedding_cache_survives_a_reload(tmp_path: Path) -> None:
    from workers.eval.train import EmbeddingCache

    calls: list[int] = []

    def encode(texts):
        calls.append(len(texts))
        return fake_encode(texts)

    texts = [f"text {i}" for i in range(600)]  # some digests end in a NUL byte
    first = EmbeddingCache(tmp_path / "e.npz", encode)
    rows = first.encode(texts)
    first.save()
    again = EmbeddingCache(tmp_path / "e.npz", encode)
    np.testing.assert_array_equal(again.encode(texts), rows)
    assert calls == [600]
