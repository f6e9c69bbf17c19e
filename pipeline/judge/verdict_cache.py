"""The verdict cache: a judge's clear verdict on an (answer, evidence) is not asked twice.

Agents resubmit and RAG pipelines retry. When the judge would be asked exactly what it was
asked before — the same question, evidence chunks (as the route counts them) and response,
of the same judge model, with the same prompt and number of alternatives — the earlier
readout answers instead, and the record says so (`cache: hit`, with the time and the
candidate of the original verdict). A hit costs no call and no budget.

The key (`cache_key`) is a SHA-256 over exactly those inputs. The question is one of them:
the judge reads it (without a context it is all the judge has to go on), so the same
answer to another question is another verdict. `PROMPT_VERSION` names the prompt: it
carries a digest of the judge's system prompt, so a change of that wording misses every
older entry by itself; bump the number when the user message's wording changes.

What is kept is the readout (the first token's logprobs, not the verdict), so the route's
bars still decide it as they would a fresh reply. Only clear verdicts are kept: a readout
that scored and fell on the yes or no side of the bars it was read under. A failure, a
malformed reply or an unsure readout is asked again next time (`cacheable`).

Entries live `ttl` seconds (the route's `judge_cache_ttl_seconds`; 0 turns the cache off)
and at most `MAX_ENTRIES` per partition (`evictions`: expired first, then the oldest).
Where they live, and what that guarantees across workers, is the table's business
(`workers.stages.judge_ledger`, docs/explanation/delivery.md). Pure: time comes in as `now`.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pipeline.errors import PolicyError
from pipeline.judge.question import (
    JUDGE_SYSTEM_PROMPT,
    JudgeConfig,
    JudgeReadout,
    JudgeStatus,
    JudgeVerdict,
    decide_judge,
)

PROMPT_VERSION = "judge-prompt-1:" + hashlib.sha256(JUDGE_SYSTEM_PROMPT.encode()).hexdigest()[:12]
"""The judge prompt a cached readout answered: bump the number when `build_judge_messages`
words its question differently (the system prompt's digest follows by itself)."""

DEFAULT_TTL_S = 3600.0
"""How long a verdict answers again unless the route says otherwise: an hour."""
MAX_TTL_S = 30 * 24 * 3600.0
"""The longest a route may keep one: 30 days (the judge model or its evidence moves on)."""
MAX_ENTRIES = 20_000
"""Entries kept per partition; past it the oldest go first (memory and restore time)."""
SWEEP_EVERY_S = 60.0
"""How often the table is swept of expired entries (one pass over it)."""


def check_ttl(value: object, field: str) -> float:
    """A route's `judge_cache_ttl_seconds`: 0 (off) up to `MAX_TTL_S`."""
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or not 0 <= value <= MAX_TTL_S
    ):
        raise PolicyError(field, value, f"seconds in [0, {MAX_TTL_S:.0f}] (0: no cache)")
    return float(value)


def cache_key(
    question: str,
    evidence: Sequence[str] | str | None,
    response: str,
    model: str,
    top_logprobs: int,
    prompt_version: str = PROMPT_VERSION,
) -> str:
    """The hex SHA-256 of what the judge would be asked (see the module docstring)."""
    chunks: list[str] | None
    if evidence is None:
        chunks = None
    elif isinstance(evidence, str):
        chunks = [evidence]
    else:
        chunks = list(evidence)
    canonical = json.dumps(
        ["verdict-cache-1", prompt_version, model, top_logprobs, question, chunks, response],
        ensure_ascii=True,
        separators=(",", ":"),
    )
    return hashlib.sha256(canonical.encode("ascii")).hexdigest()


def cacheable(readout: JudgeReadout | None, config: JudgeConfig) -> bool:
    """Only a clear verdict is kept: a scored readout that decides yes or no."""
    if readout is None or readout.status is not JudgeStatus.OK:
        return False
    return decide_judge(readout, config).verdict is not JudgeVerdict.UNSURE


@dataclass(frozen=True, slots=True)
class CachedVerdict:
    """A readout as the table keeps it: when it was read, and for which candidate."""

    readout: Mapping[str, Any]
    at: float
    candidate_id: str

    def to_dict(self) -> dict[str, Any]:
        return {"readout": dict(self.readout), "at": self.at, "for": self.candidate_id}

    @classmethod
    def from_dict(cls, data: object) -> CachedVerdict | None:
        """The entry, or None when it is not one (it is then a miss, never a verdict)."""
        if not isinstance(data, Mapping):
            return None
        readout, at = data.get("readout"), data.get("at")
        if (
            not isinstance(readout, Mapping)
            or isinstance(at, bool)
            or not isinstance(at, int | float)
            or not math.isfinite(at)
            or readout_from_dict(readout) is None
        ):
            return None
        return cls(readout, float(at), str(data.get("for", "")))

    def fresh(self, now: float, ttl: float) -> bool:
        """Whether it still answers at `now` under `ttl` (0: never)."""
        return ttl > 0 and now - self.at < ttl


def readout_from_dict(data: Mapping[str, Any]) -> JudgeReadout | None:
    """A readout back from `JudgeReadout.to_dict`; None when it is not a readout."""
    try:
        usage = data.get("usage")
        return JudgeReadout(
            status=JudgeStatus(data["status"]),
            score=None if data.get("score") is None else float(data["score"]),
            p_yes=float(data.get("p_yes") or 0.0),
            p_no=float(data.get("p_no") or 0.0),
            top_tokens=tuple((str(t), float(lp)) for t, lp in data.get("top_tokens") or ()),
            model=data.get("model") if isinstance(data.get("model"), str) else None,
            usage=(
                {str(k): int(v) for k, v in usage.items()} if isinstance(usage, Mapping) else None
            ),
            detail=str(data.get("detail", "")),
            readout=str(data.get("readout", "logprobs")),
        )
    except (KeyError, TypeError, ValueError):
        return None


def evictions(
    entries: Iterable[tuple[bytes, float]], now: float, ttl: float, limit: int = MAX_ENTRIES
) -> list[bytes]:
    """Keys to delete from one partition's entries (key, time read): every one older than
    `ttl`, then the oldest of the rest beyond `limit`."""
    kept: list[tuple[float, bytes]] = []
    gone: list[bytes] = []
    for key, at in entries:
        if now - at >= ttl:
            gone.append(key)
        else:
            kept.append((at, key))
    if len(kept) > limit:
        kept.sort()
        gone += [key for _, key in kept[: len(kept) - limit]]
    return gone
