"""`eval --reader DIR`: the reader measured beside the claim head on the same labelled data,
before it is given any say.

Answer level: each answer's weakest-claim P(supported), by the head and by the reader,
against the answer's label. Claim level: each claim's P(supported) against the claim's
label where the data gives one — every claim of a right answer is supported; a
hallucinated answer's claims overlapping a marked span (``metadata.spans``, as RAGTruth
marks them) are unsupported and the rest supported; a hallucinated answer without
locatable spans labels its claim only when it has exactly one. Answers without a context
are not read by either. AUROC is `pipeline.fit.metrics.auroc` (None for one class).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pipeline.chunks import context_chunks
from pipeline.claims.head import ClaimHead
from pipeline.claims.units import ClaimSupport
from pipeline.errors import ScoringError
from pipeline.fit.metrics import auroc
from pipeline.scores.batch import Reader, claim_reader_batch, claim_support_batch
from pipeline.scores.geometric import Encoder
from workers.eval.datasets import LabelledCandidate

__all__ = ["claim_labels", "reader_figures"]

BATCH = 64


def _span_ranges(response: str, spans: Sequence[object]) -> list[tuple[int, int]]:
    out = []
    for span in spans:
        text = str(span).strip()
        at = response.find(text) if text else -1
        if at >= 0:
            out.append((at, at + len(text)))
    return out


def claim_labels(item: LabelledCandidate, support: ClaimSupport) -> list[bool | None]:
    """Each claim's label (True: supported), None where the data does not say."""
    claims = support.claims
    if item.grounded:
        return [True] * len(claims)
    response = str(item.candidate.get("response", ""))
    meta = item.candidate.get("metadata") or {}
    ranges = _span_ranges(response, meta.get("spans") or [])
    if ranges:
        return [not any(c.start < b and a < c.end for a, b in ranges) for c in claims]
    return [False] if len(claims) == 1 else [None] * len(claims)


def _auroc(scores: list[float], labels: list[bool]) -> float | None:
    try:
        return float(auroc(scores, labels)) if scores else None
    except ScoringError:
        return None


def reader_figures(
    items: Sequence[LabelledCandidate],
    encoder: Encoder,
    head: ClaimHead,
    reader: Reader,
    name: str,
) -> dict[str, Any]:
    """Claim- and answer-level AUROC of the head and of the reader on `items`."""
    scorable = [
        i
        for i in items
        if context_chunks(i.candidate.get("context"))
        and str(i.candidate.get("response", "")).strip()
    ]
    pairs = [
        (tuple(context_chunks(i.candidate["context"]) or ()), str(i.candidate["response"]))
        for i in scorable
    ]
    heads: list[ClaimSupport] = []
    reads: list[ClaimSupport] = []
    for start in range(0, len(pairs), BATCH):
        chunk = pairs[start : start + BATCH]
        heads += claim_support_batch(chunk, encoder, head)
        reads += claim_reader_batch(chunk, encoder, reader)
    answers: dict[str, list] = {"head": [], "reader": [], "label": []}
    claims: dict[str, list] = {"head": [], "reader": [], "label": []}
    for item, by_head, by_reader in zip(scorable, heads, reads, strict=True):
        if not by_head.claims:
            continue
        answers["head"].append(by_head.score)
        answers["reader"].append(by_reader.score)
        answers["label"].append(item.grounded)
        for label, h, r in zip(
            claim_labels(item, by_head), by_head.claim_scores, by_reader.claim_scores, strict=True
        ):
            if label is not None:
                claims["head"].append(h)
                claims["reader"].append(r)
                claims["label"].append(label)
    return {
        "name": name,
        "n_answers": len(answers["label"]),
        "n_claims": len(claims["label"]),
        "auroc_answers_head": _auroc(answers["head"], answers["label"]),
        "auroc_answers_reader": _auroc(answers["reader"], answers["label"]),
        "auroc_claims_head": _auroc(claims["head"], claims["label"]),
        "auroc_claims_reader": _auroc(claims["reader"], claims["label"]),
    }
