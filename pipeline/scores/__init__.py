"""The geometry rung's scores: from embeddings to a verdict on one answer.

* `geometric.py` — SGI with a context, DGI without one (the seed's formulas).
* `grounding.py` — P(grounded): geometry, source and claim support in one calibrated model.
* `batch.py` — the score of a batch of answers, as the workers and the library compute it.
* `check.py` — the human-readable verdict on a score against the cuts.
* `results.py` — the score values geometry produces (SGI, DGI, P(grounded)), frozen and
  JSON-serialisable.

It may import `guards`, `claims`, `bounds` and `encoding`, never a rung above it.
"""
