"""The shipped defaults, loaded in one place: the active policy, μ̂ and the encoder.

The core's functions are pure: thresholds, encoder and reference direction are arguments
(the seed's cuts when none are given). This layer sits above them and fills in what a
library user leaves out from the policy the workers read (GROUNDSTREAM_POLICY, else the
shipped default), so `check(score)`, `GroundingSwitch()` and `score_candidate(...)` give a
library user the verdict the service gives. Everything is loaded lazily, once per
process; `import pipeline` reads no file and loads no model.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path

import numpy as np

from pipeline.bounds.thresholds import Thresholds
from pipeline.claims.head import ClaimHead, read_head
from pipeline.encoding.chunks import context_chunks
from pipeline.encoding.encoder import load_encoder
from pipeline.policy.document import Policy, load_policy
from pipeline.rungs import grounding_switch as switch
from pipeline.scores.batch import Reader, core_sgi_batch, language_guard, score_batch
from pipeline.scores.check import Check, Score
from pipeline.scores.check import check as core_check
from pipeline.scores.geometric import Encoder, Vector, compute_dgi_batch
from pipeline.scores.results import DGIResult, GroundingScore, SGIResult

NO_REFERENCE = "no reference direction in the policy"


@lru_cache(maxsize=1)
def default_policy() -> Policy:
    """The active policy (GROUNDSTREAM_POLICY, else the shipped default), read once."""
    return load_policy()


def default_reference() -> np.ndarray:
    """μ̂ of the active policy as float64; LookupError when the policy carries none."""
    reference = default_policy().reference
    if reference is None:
        raise LookupError(f"{NO_REFERENCE} (reference.dgi_mu)")
    return np.array(reference, dtype=np.float64)


@lru_cache(maxsize=1)
def default_claim_head() -> ClaimHead:
    """The shipped claim-support head (`pipeline/data/claims/head.npz`), read once."""
    return read_head(Path(__file__).resolve().parents[1] / "data" / "claims" / "head.npz")


@lru_cache(maxsize=1)
def default_claim_reader() -> Reader | None:
    """The reader of GROUNDSTREAM_READER (a directory `groundstream reader export` or `train
    claims` wrote, checked against its reader.json), else the shipped claim reader
    (`pipeline/data/reader/`), loaded once; None where neither is (the grounding model then
    reads its feature as 0)."""
    import os

    from pipeline.claims.reader import MODEL_FILE, ClaimReader, bundled_reader_dir
    from pipeline.claims.readers import READER_ENV

    if os.environ.get(READER_ENV):
        return claim_reader_at(os.environ[READER_ENV])
    if not (bundled_reader_dir() / MODEL_FILE).is_file():
        return None
    return ClaimReader(bundled_reader_dir()).probability


@lru_cache(maxsize=4)
def claim_reader_at(directory: str) -> Reader:
    """The reader in `directory` (`pipeline.claims.classifiers.load_reader`), loaded once per
    process: `--reader DIR` and GROUNDSTREAM_READER serve it."""
    from pipeline.claims.classifiers import load_reader

    return load_reader(directory)


def check_served_reader() -> None:
    """The start-up refusal the workers apply (`Settings.load_policy`), for a library user:
    a ReaderError when the active policy's grounding model gives a claim reader weight and
    the reader served (GROUNDSTREAM_READER's, else the shipped one) is not the one it was
    fitted with (`pipeline.scores.grounding.served_reader_problem`; its file hashes are
    cached per process)."""
    import os

    from pipeline.claims.reader import MODEL_FILE, bundled_reader_dir
    from pipeline.claims.readers import READER_ENV
    from pipeline.errors import ReaderError
    from pipeline.scores.grounding import served_reader_problem

    policy = default_policy()
    served = os.environ.get(READER_ENV) or None
    if served is None and (bundled_reader_dir() / MODEL_FILE).is_file():
        served = str(bundled_reader_dir())
    problem = served_reader_problem([("its grounding model", policy.grounding)], served)
    if problem is not None:
        raise ReaderError(
            f"{READER_ENV}={os.environ.get(READER_ENV) or '(unset)'}: in policy"
            f" {policy.version}, {problem}; set {READER_ENV} to that reader's directory, or"
            " refit the policy without --reader"
        )


def default_encoder() -> Encoder:
    """The encoder the active policy names (the bundled all-MiniLM-L6-v2 by default)."""
    return load_encoder(default_policy().encoder_model)


def compute_sgi(
    question: str, context: str | Sequence[str], response: str, encoder: Encoder | None = None
) -> SGIResult:
    """SGI of one response as the geometry stage measures it — of the answer's core
    (`pipeline.scores.batch.core_sgi_batch`), the quantity `calibrate` and `fit_thresholds`
    fit the policy's SGI cuts on, so `GroundingSwitch().decide(compute_sgi(...))` applies
    each cut to what it was fitted on. `compute_sgi_batch` is the seed's formula on whatever
    text it is given. `encoder=None` loads the default encoder (once per process)."""
    return core_sgi_batch([(question, context, response)], encoder or default_encoder())[0]


def compute_dgi(
    question: str,
    response: str,
    encoder: Encoder | None = None,
    reference: Vector | None = None,
) -> DGIResult:
    """DGI of one response against μ̂ (the shipped reference direction by default)."""
    mu = default_reference() if reference is None else reference
    return compute_dgi_batch([(question, response)], encoder or default_encoder(), mu)[0]


def score_candidate(
    question: str,
    response: str,
    context: str | Sequence[str] | None = None,
    encoder: Encoder | None = None,
) -> SGIResult | DGIResult | GroundingScore:
    """The score the geometry stage puts on a candidate, under the active policy.

    With a context: SGI, combined with source support into P(grounded) when the policy
    carries a grounding model (the shipped one does). Without: DGI against the policy's
    μ̂, flagged when it has none. Feed the result to `check` or `GroundingSwitch`.
    """
    policy = default_policy()
    check_served_reader()
    enc = encoder or default_encoder()
    if context is None:
        if policy.reference is None:
            return DGIResult(0.0, 0.0, 1, True, NO_REFERENCE)
        dgi = compute_dgi(question, response, enc, default_reference())
        return language_guard(dgi, response, None, policy.languages_for("default"), question)
    return score_batch(
        [(question, context_chunks(context), response)],
        enc,
        None,
        policy.grounding,
        None,
        default_claim_head(),
        default_claim_reader(),
        languages=policy.languages_for("default"),
    )[0]


def check(score: Score | Check, thresholds: Thresholds | None = None) -> Check:
    """`pipeline.check.check` under the active policy's thresholds unless given others."""
    return core_check(score, thresholds or default_policy().thresholds)


class GroundingSwitch(switch.GroundingSwitch):
    """The switch whose unspecified cuts are the active policy's (grounding cuts included),
    as the workers route; the core class falls back to the seed's."""

    __slots__ = ()

    @classmethod
    def base(cls) -> Thresholds:
        return default_policy().thresholds
