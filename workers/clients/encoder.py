"""The worker's sentence encoder: loaded once per process, shared by the stages that embed."""

from __future__ import annotations

import threading

from pipeline.encoding.encoder import load_encoder
from pipeline.scores.geometric import Encoder
from workers.interfaces import StageContext

_LOADING = threading.Lock()


def stage_encoder(ctx: StageContext) -> Encoder:
    """The worker's encoder, loaded on first use with the context's backend
    (GROUNDSTREAM_ENCODER_BACKEND) and embedding cache (GROUNDSTREAM_ENCODER_CACHE_ROWS),
    kept for the process. A stage may ask from several
    threads at once (the consistency stage decides a batch's envelopes concurrently, each
    in a thread): one loads, the others wait for it."""
    if "encoder" not in ctx.services:
        with _LOADING:
            if "encoder" not in ctx.services:
                ctx.services["encoder"] = load_encoder(
                    ctx.policy.encoder_model, ctx.encoder_backend, ctx.encoder_cache_rows
                )
    return ctx.services["encoder"]
