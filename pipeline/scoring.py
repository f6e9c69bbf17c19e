"""The geometry stage's score for a batch of answers: one function for the workers and the
library alike, so `pipeline.score_candidate` and the stage cannot drift apart.

With a context an answer gets SGI, combined with source support into P(grounded) when a
grounding model is given; without one it gets DGI against the reference direction μ̂, or a
flagged DGI when there is none (fail safe: a flagged score never accepts). At most two
encoder calls per batch. Pure: the encoder, μ̂ and the model are arguments.
"""

from __future__ import annotations

from collections.abc import Sequence

from pipeline.grounding import GroundingModel, score_grounding
from pipeline.results import DGIResult, GroundingScore, SGIResult
from pipeline.scores import Encoder, Vector, compute_dgi_batch, compute_sgi_batch

NO_REFERENCE = "no reference direction in the policy"

ScoreInput = tuple[str, Sequence[str] | None, str]
"""(question, context chunks or None when there is no context, response)."""


def score_batch(
    items: Sequence[ScoreInput],
    encoder: Encoder,
    reference: Vector | None,
    model: GroundingModel | None = None,
    tasks: Sequence[str | None] | None = None,
) -> list[SGIResult | DGIResult | GroundingScore]:
    """The score of every item, in order; `tasks` are the items' task kinds, when known,
    checked against the grounding model's fitted domain."""
    with_ctx = [i for i, (_, chunks, _) in enumerate(items) if chunks is not None]
    without = [i for i, (_, chunks, _) in enumerate(items) if chunks is None]
    out: list[SGIResult | DGIResult | GroundingScore | None] = [None] * len(items)
    sgi = compute_sgi_batch([items[i] for i in with_ctx], encoder)  # type: ignore[misc]
    for i, result in zip(with_ctx, sgi, strict=True):
        question, chunks, response = items[i]
        out[i] = (
            result
            if model is None
            else score_grounding(
                model,
                question,
                tuple(chunks or ()),
                response,
                result,
                None if tasks is None else tasks[i],
            )
        )
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
    return out  # type: ignore[return-value]
