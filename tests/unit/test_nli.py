"""NliSimilarity.matrix with a cross-encoder whose verdict depends on the pair it is given.

The fake says "entails" in proportion to how many of the hypothesis's words the premise
contains, with a different logit for every ordered pair; so a prediction read into the
wrong cell, a pair left out or the wrong label column changes the matrix. (Which way
round a whole batch is sent cannot show: the similarity is the smaller direction.)
tests/integration/test_nli.py loads a real, tiny model from disk.
"""

from __future__ import annotations

import math
import sys
import types
from pathlib import Path

import numpy as np
import pytest

from workers.clients.nli import NliSimilarity

LABELS = {0: "contradiction", 1: "neutral", 2: "entailment"}  # not the usual column 1


def entail_logit(premise: str, hypothesis: str) -> float:
    """High when the premise contains the hypothesis's words; unique to each ordered pair."""
    words = hypothesis.split()
    covered = sum(w in premise.split() for w in words) / len(words)
    return 10.0 * covered - 6.0 + 0.01 * len(premise) - 0.001 * len(hypothesis)


def p_entail(premise: str, hypothesis: str) -> float:
    e = math.exp(entail_logit(premise, hypothesis))
    return e / (e + 2.0)  # the other two logits are 0


class FakeCrossEncoder:
    def __init__(self, path: str, **_: object) -> None:
        self.config = types.SimpleNamespace(id2label=LABELS)
        self.pairs: list[tuple[str, str]] = []

    def predict(self, pairs, convert_to_numpy: bool = True) -> np.ndarray:
        self.pairs.extend(pairs)
        return np.array([[0.0, 0.0, entail_logit(p, h)] for p, h in pairs])


@pytest.fixture
def nli(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> NliSimilarity:
    fake = types.ModuleType("sentence_transformers")
    fake.CrossEncoder = FakeCrossEncoder  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "sentence_transformers", fake)
    return NliSimilarity(str(tmp_path))


TEXTS = ["the shop closes at six", "closes at six", "six the shop closes at", "dogs bark"]


def test_each_cell_is_the_smaller_of_the_two_directions(nli: NliSimilarity) -> None:
    m = nli.matrix(TEXTS)
    expected = np.array(
        [
            [1.0 if i == j else min(p_entail(a, b), p_entail(b, a)) for j, b in enumerate(TEXTS)]
            for i, a in enumerate(TEXTS)
        ]
    )
    np.testing.assert_allclose(m, expected, rtol=1e-12)


def test_every_ordered_pair_is_asked_once(nli: NliSimilarity) -> None:
    nli.matrix(TEXTS)
    asked = nli.model.pairs
    assert sorted(asked) == sorted((a, b) for a in TEXTS for b in TEXTS if a != b)


def test_meaning_follows_the_texts(nli: NliSimilarity) -> None:
    m = nli.matrix(TEXTS)
    assert m[0, 2] > 0.9  # the same words both ways: the same meaning
    assert m[0, 1] < 0.5  # "closes at six" does not entail the shop
    assert m[0, 3] < 0.1 and m[1, 3] < 0.1


def test_a_model_without_an_entailment_label_is_refused(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(
        FakeCrossEncoder,
        "__init__",
        lambda self, path, **_: setattr(self, "config", types.SimpleNamespace(id2label={0: "a"})),
    )
    fake = types.ModuleType("sentence_transformers")
    fake.CrossEncoder = FakeCrossEncoder  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "sentence_transformers", fake)
    with pytest.raises(ValueError, match="entailment label"):
        NliSimilarity(str(tmp_path))


class _Reader:
    """A claim reader whose P(supported) is the share of the claim's words the evidence
    holds: asymmetric, so reading a pair the wrong way round shows."""

    def __init__(self, model_dir: Path) -> None:
        self.pairs: list[tuple[str, str]] = []

    def probability(self, pairs):
        self.pairs.extend(pairs)
        return np.array([sum(w in e.split() for w in c.split()) / len(c.split()) for c, e in pairs])


def test_the_claim_reader_as_nli_reads_hypothesis_as_claim_and_premise_as_evidence(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import pipeline.claims.reader
    from workers.clients.nli import ReaderSimilarity

    monkeypatch.setattr(pipeline.claims.reader, "ClaimReader", _Reader)
    sim = ReaderSimilarity(Path("unused"))
    m = sim.matrix(["the shop closes at six", "closes at six", "dogs bark"])
    # "closes at six" is wholly inside the first text, not the other way round; both
    # directions must hold, so the pair scores the weaker one (3 of 5 words).
    assert m[0, 1] == m[1, 0] == pytest.approx(3 / 5)
    assert m[0, 2] == 0.0 and np.allclose(np.diag(m), 1.0)
    assert ("closes at six", "the shop closes at six") in sim.reader.pairs  # (claim, evidence)
    assert len(sim.reader.pairs) == 6  # every ordered pair, in one call


def test_a_trained_reader_directory_is_the_nli_model_and_reader_without_one_says_how(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import pipeline.claims.reader
    from workers.clients.nli import ReaderSimilarity, load_nli

    monkeypatch.setattr(pipeline.claims.reader, "ClaimReader", _Reader)
    monkeypatch.setattr(pipeline.claims.reader, "bundled_reader_dir", lambda: tmp_path / "none")
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / pipeline.claims.reader.MODEL_FILE).write_bytes(b"onnx")
    load_nli.cache_clear()
    try:
        assert isinstance(load_nli(str(tmp_path / "mine")), ReaderSimilarity)
        with pytest.raises(FileNotFoundError, match="train claims --out DIR"):
            load_nli("reader")
    finally:
        load_nli.cache_clear()
