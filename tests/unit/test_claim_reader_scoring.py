"""The claim reader on the ladder: each claim read against its candidate windows, the
weakest claim's P(supported) a feature of P(grounded), one reader call per batch."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest

from pipeline.claims.head import read, reader_input
from pipeline.errors import ScoringError
from pipeline.scores.batch import claim_reader_batch, measure_batch
from pipeline.scores.grounding import CLAIM_READER, FEATURES, GroundingModel, reads_claims


class _HashEncoder:
    """Deterministic bag-of-words vectors: enough for the window ranking's cosine."""

    dimension = 64

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dimension))
        for i, text in enumerate(texts):
            for word in text.lower().split():
                out[i, sum(map(ord, word.strip(".,"))) % self.dimension] += 1.0
        return out

    def windows(self, text: str) -> list[str]:
        return [text]


class _Reader:
    """P(supported) = 0.9 when the evidence holds every number of the claim, else 0.1;
    counts its calls."""

    def __init__(self) -> None:
        self.calls: list[int] = []

    def __call__(self, pairs: Sequence[tuple[str, str]]) -> np.ndarray:
        self.calls.append(len(pairs))
        out = []
        for claim, evidence in pairs:
            numbers = [w.strip(".,") for w in claim.split() if w.strip(".,").isdigit()]
            out.append(0.9 if all(n in evidence for n in numbers) else 0.1)
        return np.array(out)


CONTEXT = ["The bridge opened in 1932. It is 503 metres long. Ferries stopped in 1940."]


def test_the_weakest_claim_is_the_one_the_reader_doubts_and_its_window_is_named() -> None:
    reader = _Reader()
    support = read(
        "The bridge opened in 1932. It is 710 metres long.", CONTEXT, _HashEncoder().encode, reader
    )
    assert support.claim_scores == (0.9, 0.1)
    assert support.score == 0.1
    assert support.weakest is not None and support.weakest.text == "It is 710 metres long."
    assert support.window is not None and support.window.text in CONTEXT[0]


def test_evidence_is_the_candidate_windows_joined_in_context_order() -> None:
    found = reader_input("Ferries stopped in 1940.", CONTEXT, _HashEncoder().encode)
    ((claim, evidence),) = found.pairs
    assert claim == "Ferries stopped in 1940."
    assert evidence == (
        "The bridge opened in 1932. It is 503 metres long. Ferries stopped in 1940."
    )
    with pytest.raises(ScoringError, match="2 reader scores for 1 pairs"):
        found.summarise([0.5, 0.5])


def test_a_batch_is_read_in_one_reader_call() -> None:
    reader = _Reader()
    items = [(CONTEXT, "The bridge opened in 1932."), (CONTEXT, "It is 999 metres long.")]
    out = claim_reader_batch(items, _HashEncoder(), reader)
    assert reader.calls == [2]
    assert [s.score for s in out] == [0.9, 0.1]


def test_measure_batch_reads_claims_only_when_given_a_reader() -> None:
    items = [("How long is it?", tuple(CONTEXT), "It is 503 metres long.")]
    assert measure_batch(items, _HashEncoder())[0].reader is None
    measured = measure_batch(items, _HashEncoder(), claim_reader=_Reader())[0]
    assert measured.reader is not None and measured.reader.score == 0.9


def test_the_reader_runs_only_for_a_model_that_weighs_its_feature() -> None:
    assert CLAIM_READER in FEATURES and f"{CLAIM_READER}:long" in FEATURES
    without = GroundingModel(("log_sgi", CLAIM_READER), (1.0, 0.0), 0.0)
    with_it = GroundingModel(("log_sgi", f"{CLAIM_READER}:long"), (1.0, 2.0), 0.0)
    assert not reads_claims(without, CLAIM_READER)
    assert reads_claims(with_it, CLAIM_READER)
    assert not reads_claims(with_it)  # the head's feature has no weight there
