"""The worker's sentence encoder: loaded once per process, shared by the stages that embed."""

from __future__ import annotations

from pipeline.encoder import load_encoder
from pipeline.scores import Encoder
from workers.stages.kit import StageContext


def stage_encoder(ctx: StageContext, backend: str = "torch") -> Encoder:
    """The worker's encoder, loaded on first use and kept for the process; `backend`
    (GROUNDSTREAM_ENCODER_BACKEND, passed by the runner's early load) counts only then."""
    if "encoder" not in ctx.services:
        ctx.services["encoder"] = load_encoder(ctx.policy.encoder_model, backend)
    return ctx.services["encoder"]
