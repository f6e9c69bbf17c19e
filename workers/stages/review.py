"""Review adapter: a person's winning claim → its decision record and the envelope sent on
(rules on accept, escalations.reject on reject). The rule is `pipeline.stages.review`; the
Kafka I/O of the queue (listing, claims, the transaction) is `workers.runtime.review`."""

from __future__ import annotations

import time

from pipeline.stages import review
from pipeline.stages.review import Claim
from topics.schema import Envelope
from workers.interfaces import Emit, StageContext
from workers.stages.kit import conclude

REVIEW_STAGE = "review"


def review_emits(ctx: StageContext, env: Envelope, claim: Claim) -> list[Emit]:
    """The winning claim's decision record and routing, as one set of emits."""
    return conclude(ctx, REVIEW_STAGE, env, review.decide(claim), time.perf_counter())
