"""Who may overrule whom on the ladder: the one place that orders the authorities.

The order
    A person outranks the judge; the judge outranks every model that reads support
    (geometry's P(grounded) or SGI/DGI at the switch, claim support, consistency's
    committed samples). These are *opinions on support*: each estimates whether the
    response follows from its source, and a higher authority's accept settles that
    question. Lexical coverage (the share of the response's content words the context
    contains, :mod:`pipeline.claims.support`) is such an opinion too, the crudest one, and ranks
    with the support models.

Rules are not in the order
    The rules stage holds *hard facts* no model judges: PII, deny-lists, required fields,
    length limits, and numbers or names that no source contains. Those block whoever
    accepted (a person's accept overrides a review-severity hit the person has seen, never
    a reject-severity one: that is the rules stage's own posture). A rule that is only an
    opinion on support (``Rule.opinion`` in :mod:`pipeline.rungs.rule_checks`) may hold back
    an accept only from an authority it is not outranked by (:func:`opinion_may_hold`); under a
    higher authority's accept it is recorded as a finding, not enforced.

The switch's auto-accept path
    There the acceptor is geometry, the lowest authority, and lexical coverage is its peer:
    two opinions of the same rank that disagree settle nothing, so the candidate fails
    closed (review) rather than letting either one decide. A judge's yes or a person's
    accept, which outrank both, is not held back by coverage.

Which authority accepted
    Every stage that accepts sends the envelope straight to rules, so the acceptor is the
    stage of the envelope's last trail entry (`Envelope.after` appends one per stage),
    or the person whose verdict the envelope carries. :func:`accepted_by` reads it; the
    rules stage records it in its decision's evidence.

Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from enum import StrEnum
from types import MappingProxyType

__all__ = [
    "STAGE_AUTHORITY",
    "SUPPORT_RANK",
    "Authority",
    "accepted_by",
    "opinion_may_hold",
]


class Authority(StrEnum):
    """Who may accept a candidate, lowest first; compare with :attr:`rank`."""

    GEOMETRY = "geometry"
    CLAIM_SUPPORT = "claim_support"
    CONSISTENCY = "consistency"
    JUDGE = "judge"
    PERSON = "person"

    @property
    def rank(self) -> int:
        """Higher overrules lower; equal ranks do not overrule each other."""
        return _RANK[self]

    def outranks(self, other: Authority) -> bool:
        return self.rank > other.rank


SUPPORT_RANK = 1
"""The rank of every opinion on support: the support models and lexical coverage."""

_RANK: Mapping[Authority, int] = MappingProxyType(
    {
        Authority.GEOMETRY: SUPPORT_RANK,
        Authority.CLAIM_SUPPORT: SUPPORT_RANK,
        Authority.CONSISTENCY: SUPPORT_RANK,
        Authority.JUDGE: SUPPORT_RANK + 1,
        Authority.PERSON: SUPPORT_RANK + 2,
    }
)

STAGE_AUTHORITY: Mapping[str, Authority] = MappingProxyType(
    {
        "switch": Authority.GEOMETRY,
        "claims": Authority.CLAIM_SUPPORT,
        "consistency": Authority.CONSISTENCY,
        "judge": Authority.JUDGE,
        "review": Authority.PERSON,
    }
)
"""The authority a stage speaks with when it sends a candidate on to rules."""


def accepted_by(trail: Sequence[Mapping[str, object]], person_accepted: bool) -> Authority | None:
    """The authority whose accept brought a candidate to rules: a person when the envelope
    carries a person's accept, else the stage of the last trail entry. None when that is
    no accepting stage (a caller outside the ladder): opinions then hold, fail closed."""
    if person_accepted:
        return Authority.PERSON
    if not trail:
        return None
    return STAGE_AUTHORITY.get(str(trail[-1].get("stage", "")))


def opinion_may_hold(opinion_rank: int, accepter: Authority | None) -> bool:
    """Whether an opinion of `opinion_rank` may hold back an accept by `accepter`: only
    when no higher authority accepted (unknown acceptor: it may, fail closed)."""
    return accepter is None or accepter.rank <= opinion_rank
