"""`bench claims`: the geometry stage's scoring with claim support vs without, same answers.

Claim support runs inside the geometry stage (docs/quality.md, "Calibration and measured quality"):
each answer's claims and the context's statements are encoded and every claim is scored
against its candidate windows by the claim head, and read by the claim reader (ONNX) when
the policy's model weighs it. This bench measures what that costs on
RAGTruth answers (or synthetic RAG candidates when `../shared/data` is absent): the same
candidates scored in batches of 64 by `pipeline.scores.batch.score_batch` under the shipped
policy, once with the claim head and once without, each side in a fresh process (its own
encoder cache) so the two cannot help each other. Kafka is left out on purpose: both sides
would pay the same transport, and the question is the scoring's rate and memory. The
figure is the rate with claims over the rate without (goal >= 1/3), with each side's peak
resident memory (goal for the claim side: <= 1 GiB, `report.CLAIMS_MEMORY_GOAL`).
"""

from __future__ import annotations

import resource
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from multiprocessing import get_context

from pipeline.encoding.chunks import context_chunks
from workers.bench.data import RAGTRUTH_DEV, ragtruth, unique_candidates
from workers.bench.report import CLAIMS_MEMORY_GOAL, Result

GOAL = 1 / 3
BATCH = 64


@dataclass(frozen=True)
class Options:
    n: int = 300
    warmup: int = 16
    backend: str = "torch"
    """The encoder backend of both sides (GROUNDSTREAM_ENCODER_BACKEND: torch or onnx)."""


def _candidates(n: int) -> tuple[list[dict], str]:
    if RAGTRUTH_DEV.is_file():
        return list(ragtruth(n)), "ragtruth_dev.jsonl"
    return unique_candidates(n, "claims"), "synthetic"


def _side(with_claims: bool, n: int, warmup: int, backend: str) -> tuple[float, int]:
    """(answers per second, peak RSS bytes) of one side, in this (fresh) process."""
    from pipeline.encoding.encoder import load_encoder
    from pipeline.guards.domain import task_of
    from pipeline.policy.defaults import default_claim_head, default_claim_reader, default_policy
    from pipeline.scores.batch import score_batch

    policy = default_policy()
    encoder = load_encoder(policy.encoder_model, backend)
    head = default_claim_head() if with_claims else None
    reader = default_claim_reader() if with_claims else None
    candidates, _ = _candidates(n + warmup)

    def score(batch: list[dict]) -> None:
        items = [(c["question"], context_chunks(c.get("context")), c["response"]) for c in batch]
        tasks = [task_of(c.get("metadata")) for c in batch]
        score_batch(items, encoder, None, policy.grounding, tasks, head, reader)

    score(candidates[:warmup])  # loads the model; its texts are not scored again below
    timed = candidates[warmup:]
    started = time.perf_counter()
    for k in range(0, len(timed), BATCH):
        score(timed[k : k + BATCH])
    seconds = time.perf_counter() - started
    return len(timed) / seconds, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def run(opts: Options) -> Result:
    _, source = _candidates(1)
    out: dict[bool, tuple[float, int]] = {}
    for with_claims in (False, True):
        with ProcessPoolExecutor(1, mp_context=get_context("spawn")) as pool:
            out[with_claims] = pool.submit(
                _side, with_claims, opts.n, opts.warmup, opts.backend
            ).result()
        label = "with" if with_claims else "without"
        print(f"{label} claim support: {out[with_claims][0]:.1f} answers/s", flush=True)
    (plain, plain_peak), (claims, claims_peak) = out[False], out[True]
    return Result(
        "claims",
        claims / plain,
        GOAL,
        "x",
        rates={"without claims/s": plain, "with claims/s": claims},
        notes={
            "n": opts.n,
            "data": source,
            "batch": BATCH,
            "backend": opts.backend,
            "claim side under 1 GiB": claims_peak <= CLAIMS_MEMORY_GOAL,
        },
        peaks={"geometry scoring": plain_peak, "geometry scoring + claims": claims_peak},
    )
