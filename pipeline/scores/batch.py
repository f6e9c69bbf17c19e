"""The geometry stage's score for a batch of answers: one function for the workers and the
library alike, so `pipeline.score_candidate` and the stage cannot drift apart.

With a context an answer gets SGI of its core (`pipeline.claims.units.answer_core`), combined
with source and claim support into P(grounded) when a grounding model is given; without
one it gets DGI against the reference direction μ̂, or a flagged DGI when there is none
(fail safe: a flagged score never accepts). Pure: the encoder, μ̂ and the model are arguments.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from pipeline.claims.head import ClaimHead, PairReader, assess, reader_input
from pipeline.claims.readers import AnswerReader
from pipeline.claims.units import ClaimSupport, answer_core, context_statements, split_claims
from pipeline.guards.familiarity import familiarity_vector
from pipeline.guards.language import LANGUAGES, check_languages
from pipeline.scores.geometric import (
    Encoder,
    Vector,
    compute_dgi_batch,
    compute_sgi_batch,
    mean_embedding,
)
from pipeline.scores.geometric import _require_text as require_text
from pipeline.scores.grounding import CLAIM_READER, GroundingModel, reads_claims, score_grounding
from pipeline.scores.results import DGIResult, GroundingScore, SGIResult

NO_REFERENCE = "no reference direction in the policy"

ScoreInput = tuple[str, Sequence[str] | None, str]
"""(question, context chunks or None when there is no context, response)."""
Reader = PairReader | AnswerReader
"""A claim reader: (claim, evidence) pairs to P(supported), or whole answers to their claim
support (a token classifier, `pipeline.claims.readers`)."""


@dataclass(frozen=True, slots=True)
class Measured:
    """One answer's measurements before any model: the text the features read (its core,
    `answer_core`), SGI of that text, and the claim head's reading of the whole answer."""

    core: str
    sgi: SGIResult
    claim: ClaimSupport | None
    reader: ClaimSupport | None = None


def core_sgi_batch(
    items: Sequence[tuple[str, str | Sequence[str], str]], encoder: Encoder
) -> list[SGIResult]:
    """SGI of each (question, context, response) as the geometry stage measures it: of the
    answer's core (`pipeline.claims.units.answer_core`). The one SGI the policy's cuts are
    fitted on (`calibrate`, `pipeline.fit.fit_thresholds`) and applied to (the stage,
    `pipeline.compute_sgi`); `compute_sgi_batch` is the seed's formula on whatever text it
    is given."""
    return compute_sgi_batch(
        [
            (q, context, answer_core(require_text("response", r), require_text("question", q)))
            for q, context, r in items
        ],
        encoder,
    )


def measure_batch(
    items: Sequence[tuple[str, Sequence[str], str]],
    encoder: Encoder,
    claim_head: ClaimHead | None = None,
    claim_reader: Reader | None = None,
) -> list[Measured]:
    """SGI of each (question, context chunks, response)'s core, and its claim support when
    a head (and the claim reader's when a reader) is given: what the grounding model's
    features are computed from, the same for the stage, the library, `calibrate` and the
    refit from reviewers' verdicts."""
    cores = [answer_core(response, question) for question, _, response in items]
    sgi = core_sgi_batch(items, encoder)
    pairs = [(c, r) for _, c, r in items]
    claims: list[ClaimSupport | None] = (
        list(claim_support_batch(pairs, encoder, claim_head))
        if claim_head is not None and items
        else [None] * len(items)
    )
    read_: list[ClaimSupport | None] = (
        list(claim_reader_batch(pairs, encoder, claim_reader))
        if claim_reader is not None and items
        else [None] * len(items)
    )
    return [Measured(*m) for m in zip(cores, sgi, claims, read_, strict=True)]


def score_batch(
    items: Sequence[ScoreInput],
    encoder: Encoder,
    reference: Vector | None,
    model: GroundingModel | None = None,
    tasks: Sequence[str | None] | None = None,
    claim_head: ClaimHead | None = None,
    claim_reader: Reader | None = None,
    languages: Sequence[str] | None = None,
) -> list[SGIResult | DGIResult | GroundingScore]:
    """The score of every item, in order; `tasks` are the items' task kinds, when known,
    checked against the grounding model's fitted domain. When the model reads claim
    support, `claim_head` scores each response's claims against its context with the same
    encoder (without a head the feature is 0: unmeasured support is no support), and when it
    reads the claim reader's score, `claim_reader` reads them likewise. When the model
    carries a familiarity test, each answer's familiarity vector is read from the same
    (cached) embeddings; with `languages` (the route's, `Policy.languages_for`) an answer or
    context in another language, or the two in different ones, is flagged
    (`pipeline.guards.language`)."""
    with_ctx = [i for i, (_, chunks, _) in enumerate(items) if chunks is not None]
    without = [i for i, (_, chunks, _) in enumerate(items) if chunks is None]
    out: list[SGIResult | DGIResult | GroundingScore | None] = [None] * len(items)
    head = claim_head if model is not None and reads_claims(model) else None
    reader = claim_reader if model is not None and reads_claims(model, CLAIM_READER) else None
    measured = measure_batch(
        [(items[i][0], tuple(items[i][1] or ()), items[i][2]) for i in with_ctx],
        encoder,
        head,
        reader,
    )
    vectors = (
        familiarity_vectors(
            [(tuple(items[i][1] or ()), m.core) for i, m in zip(with_ctx, measured, strict=True)],
            encoder,
        )
        if model is not None and model.familiarity is not None
        else [None] * len(with_ctx)
    )
    for i, m, vector in zip(with_ctx, measured, vectors, strict=True):
        question, chunks, _ = items[i]
        out[i] = (
            m.sgi
            if model is None
            else score_grounding(
                model,
                question,
                tuple(chunks or ()),
                m.core,
                m.sgi,
                None if tasks is None else tasks[i],
                m.claim,
                m.reader,
                vector,
            )
        )
        if m.reader is not None and isinstance(out[i], GroundingScore):
            out[i] = replace(out[i], reader=str(getattr(reader, "name", "reader")))
    if without:
        if reference is None:
            for i in without:
                out[i] = DGIResult(0.0, 0.0, 1, True, NO_REFERENCE)
        else:
            pairs = [(items[i][0], items[i][2]) for i in without]
            for i, result in zip(
                without, compute_dgi_batch(pairs, encoder, reference), strict=True
            ):
                out[i] = result
    if languages is not None:
        for i, (question, chunks, response) in enumerate(items):
            out[i] = language_guard(out[i], response, chunks, languages, question)  # type: ignore[arg-type]
    return out  # type: ignore[return-value]


def familiarity_vectors(
    items: Sequence[tuple[Sequence[str], str]], encoder: Encoder
) -> list[np.ndarray]:
    """The familiarity vector of each (context chunks, answer core): the mean of the core's
    window embeddings beside the mean of every context window's, as SGI embedded them (the
    encoder's cache answers; one call for the batch)."""
    layout = [
        (encoder.windows(core), [w for chunk in chunks for w in encoder.windows(chunk)])
        for chunks, core in items
    ]
    texts = list(dict.fromkeys(t for answer, context in layout for t in (*answer, *context)))
    if not texts:
        return []
    rows = dict(zip(texts, np.asarray(encoder.encode(texts), dtype=np.float64), strict=True))
    return [
        familiarity_vector(
            mean_embedding(np.stack([rows[t] for t in answer])),
            mean_embedding(np.stack([rows[t] for t in context])),
        )
        for answer, context in layout
    ]


def language_guard(
    score: SGIResult | DGIResult | GroundingScore,
    response: str,
    chunks: Sequence[str] | None,
    languages: Sequence[str],
    question: str | None = None,
) -> SGIResult | DGIResult | GroundingScore:
    """`score` flagged when the answer, its context or its question is in a language outside
    `languages`, or answer and context differ (`pipeline.guards.language.check_languages`), the
    languages in its reason; a P(grounded) keeps the languages as evidence either way. A
    score already flagged keeps its own reason first."""
    checked = check_languages(response, chunks, languages, question)
    reason = "; ".join(r for r in (score.flag_reason, checked.reason) if r)
    if isinstance(score, GroundingScore):
        guards = {**score.guards, LANGUAGES: checked.to_dict()}
        if score.sgi.flagged or not checked.reason:
            return replace(score, guards=guards)
        return replace(score, flagged=True, flag_reason=reason, guards=guards)
    if not checked.reason:
        return score
    return replace(score, flagged=True, flag_reason=reason)


def claim_support_batch(
    items: Sequence[tuple[Sequence[str], str]], encoder: Encoder, head: ClaimHead
) -> list[ClaimSupport]:
    """The claim head's reading of each (context chunks, response)."""
    _encode_claims_and_statements(items, encoder)
    return [assess(response, chunks, encoder.encode, head) for chunks, response in items]


def _encode_claims_and_statements(
    items: Sequence[tuple[Sequence[str], str]], encoder: Encoder
) -> None:
    """One encoder call for every claim and context statement of the batch (the encoder
    caches by content, so the per-response scoring that follows encodes nothing again)."""
    texts: dict[str, None] = {}
    for chunks, response in items:
        texts.update(dict.fromkeys(c.text for c in split_claims(response)))
        texts.update(dict.fromkeys(s for chunk in context_statements(chunks) for s in chunk))
    if texts:
        encoder.encode(list(texts))


def claim_reader_batch(
    items: Sequence[tuple[Sequence[str], str]], encoder: Encoder, reader: Reader
) -> list[ClaimSupport]:
    """The claim reader's reading of each (context chunks, response): the candidate
    windows are ranked as for the head, then every claim of the batch is read in one call.
    A token classifier reads each answer against its whole context instead, the batch in
    one call too."""
    if isinstance(reader, AnswerReader):
        return reader.read_answers(items)
    _encode_claims_and_statements(items, encoder)
    inputs = [reader_input(response, chunks, encoder.encode) for chunks, response in items]
    pairs = [pair for found in inputs for pair in found.pairs]
    probabilities = reader(pairs) if pairs else ()
    out, at = [], 0
    for found in inputs:
        out.append(found.summarise(probabilities[at : at + len(found.pairs)]))
        at += len(found.pairs)
    return out
