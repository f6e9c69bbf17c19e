"""What the rungs read of a candidate and its envelope, as structural types.

`pipeline/` never imports the wire format (`topics/`); the rungs read these attributes,
which `topics.schema.Candidate` and `Envelope` have, so an adapter passes the decoded
message itself and a library user may pass any object with the same fields. Also the one
rule of what counts as evidence, which every rung that reads the context applies.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from pipeline.guards.provenance import Chunk, ContextEvidence, Source, assess_context
from pipeline.policy.routing import RouteConfig


class CandidateView(Protocol):
    @property
    def id(self) -> str: ...
    @property
    def session_id(self) -> str: ...
    @property
    def turn(self) -> int: ...
    @property
    def initiator(self) -> str: ...
    @property
    def route(self) -> str | None: ...
    @property
    def question(self) -> str: ...
    @property
    def response(self) -> str: ...
    @property
    def metadata(self) -> Mapping[str, Any]: ...
    @property
    def context_chunks(self) -> tuple[str, ...] | None: ...
    @property
    def chunk_sources(self) -> tuple[str, ...]: ...
    @property
    def samples(self) -> tuple[str, ...] | None: ...


class HumanView(Protocol):
    @property
    def accepted(self) -> bool: ...


class EnvelopeView(Protocol):
    @property
    def candidate(self) -> CandidateView: ...
    @property
    def route(self) -> str: ...
    @property
    def deadline(self) -> float | None: ...
    @property
    def trail(self) -> Sequence[Mapping[str, Any]]: ...
    @property
    def human(self) -> HumanView | None: ...


def evidence_context(
    candidate: CandidateView, route: RouteConfig
) -> tuple[tuple[str, ...] | None, ContextEvidence | None]:
    """The context chunks that count as evidence on `route` (None when none do), and the
    assessment for the record (None without a context). Every rung that reads the context
    (geometry, consistency's sampler, judge, rules) reads only these, so a chunk the
    candidate supplied about itself grounds nothing anywhere on the ladder."""
    chunks = candidate.context_chunks
    if chunks is None:
        return None, None
    assessed = assess_context(
        [Chunk(t, Source(s)) for t, s in zip(chunks, candidate.chunk_sources, strict=True)],
        candidate.response,
        route.grounding_sources,
    )
    counted = tuple(chunks[i] for i in assessed.counted)
    return counted or None, assessed
