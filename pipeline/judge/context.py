"""What context the judge reads: the whole evidence when it is short, else the passages the
claim head ranked best for the answer's claims (issue 31).

Why it exists
    The judge is the ladder's costly reader, and its cost is its prompt. A long context
    (a retrieved article, a business record as JSON) costs the judge every token of it,
    while what decides "is every claim supported?" is, for each claim, the few sentences
    that back it or fail to. The geometry stage has already found those: the claim head
    ranks each claim's candidate windows (`pipeline.claims.head.assess`), and the envelope
    carries that ranking as window ids (`claim_windows`, `topics.schema.GeometryPayload`),
    so the judge worker reads it without loading a model.

The choice (`judge_context`)
    * Evidence of at most ``max_tokens`` (estimated, `pipeline.encoding.tokens.estimate_tokens`) is
      sent whole, exactly as before: the prompt is byte-identical.
    * Longer evidence is cut to windows, taken by rank round by round — every claim's best
      window, then every claim's second, and so on through the ranking carried — skipping a
      window already taken and one that no longer fits the budget. The taken statements go
      to the prompt in source order, consecutive ones of a chunk as one excerpt.
    * With no ranking on the envelope (the route's model does not read claims, no head was
      shipped), the windows are ranked by the head's cheap ranking without vectors
      (`pipeline.claims.units.rank_windows`: each claim's content words in the window).
    The question and the answer are never cut; the answer is always verbatim.

Failure posture
    Pure: no model, no clock, no I/O. Window ids that do not resolve against the evidence
    (a hand-made envelope) are dropped. When nothing can be chosen — an answer with no
    claims, no window that fits the budget on its own — the whole evidence is sent and the
    record says why: a judge that sees too much costs tokens, one that sees too little
    would say no to supported answers. Nothing here ever decides a verdict.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from pipeline.claims.units import (
    DEFAULT_CANDIDATES,
    ClaimSupport,
    context_statements,
    rank_windows,
    split_claims,
    split_windows,
    statement_joint,
)
from pipeline.encoding.tokens import estimate_tokens
from pipeline.scores.results import DGIResult, GroundingScore, SGIResult

__all__ = [
    "DEFAULT_MAX_CONTEXT_TOKENS",
    "MAX_RANKED_CLAIMS",
    "MAX_RANKED_WINDOWS",
    "MIN_CONTEXT_TOKENS",
    "ContextSelection",
    "JudgeContext",
    "WindowRef",
    "claim_windows",
    "judge_context",
]

DEFAULT_MAX_CONTEXT_TOKENS = 512
"""Evidence longer than this (estimated tokens) is cut to the claims' best windows.

Why 512: the judge answers "does every claim follow from the context?", so what it must
see is every claim's best window, and a setting that cannot hold them all makes it say no
to right answers. On RAGTruth dev (`tools/judge_tokens.py`), the union of every claim's
best window is, at the 90th percentile, 259 tokens for QA answers and 329 for summaries
(653 for data-to-text, whose JSON reviews are single long leaves); 512 keeps every claim's
best window in 87% of the answers it cuts (QA 100%, summaries 98%, data-to-text 76%) and
cuts the judged prompts to 0.75 of their tokens (0.71 by a real subword tokenizer). 384
keeps 75% and 256 only 57% (while reaching 0.60): cheaper, but the judge would miss a
claim's evidence in every other answer it cuts. It is also two retrieval chunks of 256
tokens: a typical RAG context is sent whole, as before. Lower it per policy where the
judge's tokens cost more than its false noes."""

MIN_CONTEXT_TOKENS = 64
"""The smallest setting: less cannot hold one claim's best window next to another's."""

MAX_RANKED_CLAIMS = 1024
"""Most claims whose ranking an envelope may carry (a capped answer has far fewer)."""

MAX_RANKED_WINDOWS = 16
"""Most windows an envelope may carry per claim (geometry carries `DEFAULT_CANDIDATES`)."""

WindowRef = tuple[int, int, int]
"""A window by id: (chunk index, first statement, statements) in the counted evidence."""


class ContextSelection(StrEnum):
    """How the judge's context was chosen."""

    WHOLE = "whole"
    """The evidence as it came: short enough, or nothing could be chosen (see the reason)."""
    CLAIM_HEAD = "claim_head"
    """The windows the claim head ranked best, as geometry carried them."""
    LEXICAL = "lexical"
    """No ranking was carried: the windows sharing most of each claim's content words."""


@dataclass(frozen=True, slots=True)
class JudgeContext:
    """The context the judge's prompt holds, and what the record says about it.

    chunks:         the prompt's context (the evidence itself for `whole`, else the
                    excerpts in source order); None without a context.
    context_tokens: the whole evidence's estimated tokens; sent_tokens: those of `chunks`.
    windows:        the windows taken, in source order (empty for `whole`).
    """

    chunks: tuple[str, ...] | None
    selection: ContextSelection
    context_tokens: int
    sent_tokens: int
    max_tokens: int
    windows: tuple[WindowRef, ...] = ()
    reason: str = ""

    def to_dict(self) -> dict[str, object]:
        """For the decision record: ids and counts, no text (the record names the windows)."""
        return {
            "selection": self.selection.value,
            "context_tokens": self.context_tokens,
            "sent_tokens": self.sent_tokens,
            "max_context_tokens": self.max_tokens,
            "estimated": True,
            "windows": [list(w) for w in self.windows],
            "excerpts": 0 if self.chunks is None else len(self.chunks),
            "reason": self.reason,
        }


def claim_windows(
    score: SGIResult | DGIResult | GroundingScore | None,
) -> tuple[tuple[WindowRef, ...], ...]:
    """Each claim's ranked windows by id, from the claim reading a geometry score holds
    (empty when the claims were not read); within the wire's bounds, so what geometry
    writes every later stage can read (claims past `MAX_RANKED_CLAIMS` are left out)."""
    claim: ClaimSupport | None = score.claim if isinstance(score, GroundingScore) else None
    if claim is None:
        return ()
    return tuple(
        tuple((w.chunk, w.first, w.size) for w in windows[:MAX_RANKED_WINDOWS])
        for windows in claim.ranked[:MAX_RANKED_CLAIMS]
    )


def judge_context(
    chunks: Sequence[str] | None,
    response: str,
    ranked: Sequence[Sequence[WindowRef]],
    max_tokens: int = DEFAULT_MAX_CONTEXT_TOKENS,
) -> JudgeContext:
    """The context the judge reads for `response` (see the module docstring): `chunks` is
    the evidence that counts on the route, `ranked` each claim's windows best first (as
    geometry carried them; empty for none)."""
    if not chunks:
        return JudgeContext(None, ContextSelection.WHOLE, 0, 0, max_tokens)
    evidence = tuple(chunks)
    whole_tokens = sum(estimate_tokens(c) for c in evidence)

    def whole(reason: str) -> JudgeContext:
        return JudgeContext(
            evidence, ContextSelection.WHOLE, whole_tokens, whole_tokens, max_tokens, (), reason
        )

    if whole_tokens <= max_tokens:
        return whole("")
    statements = context_statements(evidence)
    carried = [[r for r in claim if _resolves(r, statements)] for claim in ranked]
    if any(carried):
        selection, refs = ContextSelection.CLAIM_HEAD, carried
    else:
        selection, refs = ContextSelection.LEXICAL, _lexical_ranking(evidence, response)
    taken = _take(refs, statements, max_tokens)
    if not taken:
        why = "no window fits the budget" if any(refs) else "the answer states no claim"
        return whole(f"evidence over {max_tokens} tokens, but {why}: sent whole")
    excerpts = _excerpts(evidence, statements, {s for r in taken for s in _statements_of(r)})
    return JudgeContext(
        excerpts,
        selection,
        whole_tokens,
        sum(estimate_tokens(e) for e in excerpts),
        max_tokens,
        tuple(sorted(taken)),
        f"evidence of {whole_tokens} tokens over {max_tokens}: "
        f"{len(taken)} windows of the answer's claims",
    )


def _resolves(ref: object, statements: tuple[tuple[str, ...], ...]) -> bool:
    if not (isinstance(ref, tuple | list) and len(ref) == 3):
        return False
    chunk, first, size = ref
    return (
        all(isinstance(v, int) and not isinstance(v, bool) for v in ref)
        and 0 <= chunk < len(statements)
        and first >= 0
        and size >= 1
        and first + size <= len(statements[chunk])
    )


def _lexical_ranking(evidence: tuple[str, ...], response: str) -> list[list[WindowRef]]:
    claims = [c.text for c in split_claims(response)]
    windows = split_windows(evidence)
    ranking = rank_windows(claims, [w.text for w in windows], k=DEFAULT_CANDIDATES)
    return [[(windows[j].chunk, windows[j].first, windows[j].size) for j in row] for row in ranking]


def _statements_of(ref: WindowRef) -> list[tuple[int, int]]:
    chunk, first, size = ref
    return [(chunk, i) for i in range(first, first + size)]


def _take(
    ranked: Sequence[Sequence[WindowRef]],
    statements: tuple[tuple[str, ...], ...],
    max_tokens: int,
) -> list[WindowRef]:
    """Windows by rank, round by round over the claims, while they fit `max_tokens`
    (a statement shared with a window already taken costs nothing again)."""
    taken: list[WindowRef] = []
    held: set[tuple[int, int]] = set()
    used = 0
    for rank in range(max((len(r) for r in ranked), default=0)):
        for claim in ranked:
            if rank >= len(claim):
                continue
            ref = tuple(claim[rank])
            new = [s for s in _statements_of(ref) if s not in held]  # type: ignore[arg-type]
            if not new:
                continue
            cost = sum(estimate_tokens(statements[c][i]) + 1 for c, i in new)
            if used + cost > max_tokens:
                continue
            taken.append(ref)  # type: ignore[arg-type]
            held.update(new)
            used += cost
    return taken


def _excerpts(
    evidence: tuple[str, ...],
    statements: tuple[tuple[str, ...], ...],
    held: set[tuple[int, int]],
) -> tuple[str, ...]:
    """The held statements in source order; consecutive ones of a chunk as one excerpt."""
    out: list[str] = []
    run: list[str] = []
    last: tuple[int, int] | None = None
    for chunk, i in sorted(held):
        if run and last is not None and (chunk, i - 1) != last:
            out.append(statement_joint(evidence[last[0]]).join(run))
            run = []
        run.append(statements[chunk][i])
        last = (chunk, i)
    if run and last is not None:
        out.append(statement_joint(evidence[last[0]]).join(run))
    return tuple(out)
