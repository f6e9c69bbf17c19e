"""The disclosure boundary: the `decisions.public` projection of a decision record.

Consumers outside the trust boundary (a customer's dashboard, a partner's agent, a
metrics pipeline run by someone else) get this projection, never the record. Seed 004:
the interpretations a grounding decision found are an internal semantic result; what
crosses the boundary is a sanitized clarification — that there are competing meanings,
and how many — not the meanings.

The projection is an allow-list, not a deny-list: a field reaches the public record only
if it is named here, and only with a value of the kind named here — a finite number, a
boolean, or an identifier-shaped word the code itself writes (a stage, an action, an
enum value). So a field a stage adds tomorrow, a span of the response, a sample, a
reviewer's note, a judge's top tokens, the free-text `reason` (which may quote the answer)
and the record's hashes (a commitment a guesser could test short answers against) stay
inside until someone decides they may leave. The ids a producer chose (candidate, session,
route, policy version) do cross: a consumer needs them to correlate, and they are ids the
producer made public by sending them.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from typing import Any

PUBLIC_SCHEMA_VERSION = 1

_WORD = re.compile(r"^[a-z][a-z0-9_.\-]{0,63}$")
"""What an enum value, a stage, an action or a topic looks like; no text does."""
_ISO = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,6})?([+-]\d{2}:\d{2}|Z)?$")
_HEX = re.compile(r"^[0-9a-f]{1,64}$")

IDS = ("candidate_id", "session_id", "route", "policy_version")
"""Producer- or policy-chosen ids: passed as strings, bounded in length."""
WORDS = ("stage", "action", "decided_action", "served_action", "topic", "mode", "level")
WORDS_TOO = ("method", "gate")
NUMBERS = ("score", "turn", "schema_version")
FLAGS = ("write_to_state", "kill_switch")
MAX_ID_CHARS = 256


def word(value: Any) -> str | None:
    """`value` if it is identifier-shaped (an enum value, a stage, an action), else None."""
    return value if isinstance(value, str) and _WORD.match(value) else None


def _number(value: Any) -> float | int | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return value if math.isfinite(value) else None


def _flag(value: Any) -> bool | None:
    return value if isinstance(value, bool) else None


def _count(value: Any) -> int | None:
    return len(value) if isinstance(value, list | tuple) else None


def _words(value: Any) -> list[str] | None:
    """A list of identifier-shaped words (rule names), each kept only if it is one."""
    if not isinstance(value, list | tuple):
        return None
    return sorted({w for w in map(word, value) if w is not None})


def _at(data: Any, path: str) -> Any:
    for part in path.split("."):
        if not isinstance(data, Mapping):
            return None
        data = data.get(part)
    return data


def _rule_names(evidence: Mapping[str, Any]) -> list[str] | None:
    hits = _at(evidence, "rules.hits")
    if not isinstance(hits, list):
        return None
    return _words([h.get("rule") for h in hits if isinstance(h, Mapping)])


PUBLIC_EVIDENCE: dict[str, tuple[str, Callable[[Any], Any]]] = {
    # public name: (path in the stage's evidence, what its value must be)
    "sgi_or_dgi": ("geometry.value", _number),
    "geometry_method": ("geometry.method", word),
    "geometry_flagged": ("geometry.flagged", _flag),
    "grounding_probability": ("grounding_probability", _number),
    "consistency_outcome": ("outcome", word),
    "consistency_passes": ("passes", _flag),
    "consistency_score": ("consistency_score", _number),
    "consistency_level": ("level", word),
    "response_agrees": ("response_agrees", _flag),
    "agreement": ("agreement", _number),
    "usable_samples": ("usable_samples", _number),
    "total_samples": ("total_samples", _number),
    "budget_limit": ("budget_limit", word),
    "sample_source": ("sample_source", word),
    "interpretations": ("interpretations", _count),
    "judge_status": ("readout.status", word),
    "judge_score": ("readout.score", _number),
    "rules_action": ("rules.action", word),
    "human_override": ("human_override", _flag),
}
"""Every evidence value that may cross the boundary; anything else stays inside."""


def _public_evidence(evidence: Any) -> dict[str, Any]:
    if not isinstance(evidence, Mapping):
        return {}
    out = {}
    for name, (path, kind) in PUBLIC_EVIDENCE.items():
        value = kind(_at(evidence, path))
        if value is not None:
            out[name] = value
    rules = _rule_names(evidence)
    if rules:
        out["rules_hit"] = rules
    return out


def _clarification(evidence: Any) -> dict[str, Any] | None:
    """Seed 004's sanitized clarification: that meanings compete, and how many."""
    if not isinstance(evidence, Mapping) or evidence.get("outcome") != "requires_clarification":
        return None
    competing = _count(evidence.get("competing")) or 0
    return {"needed": True, "alternatives": competing}


def _mapping(value: Any, kind: Callable[[Any], Any]) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        return {}
    out = {}
    for key, item in value.items():
        name, kept = word(key), kind(item)
        if name is not None and kept is not None:
            out[name] = kept
    return out


def public_record(record: Mapping[str, Any]) -> dict[str, Any]:
    """The projection of one decision record for untrusted consumers (module docstring)."""
    out: dict[str, Any] = {"public_schema_version": PUBLIC_SCHEMA_VERSION}
    for name in IDS:
        value = record.get(name)
        out[name] = value[:MAX_ID_CHARS] if isinstance(value, str) else None
    for name in (*WORDS, *WORDS_TOO):
        out[name] = word(record.get(name))
    for name in NUMBERS:
        out[name] = _number(record.get(name))
    for name in FLAGS:
        out[name] = bool(_flag(record.get(name)))
    decided_at = record.get("decided_at")
    out["decided_at"] = (
        decided_at if isinstance(decided_at, str) and _ISO.match(decided_at) else None
    )
    trace = record.get("trace_id")
    out["trace_id"] = trace if isinstance(trace, str) and _HEX.match(trace) else None
    out["reason_code"] = out["gate"] or f"{out['stage'] or 'unknown'}.{out['action'] or 'unknown'}"
    out["breaker"] = _mapping(record.get("breaker"), word)
    out["thresholds"] = _mapping(record.get("thresholds"), _number)
    out["timings"] = _mapping(record.get("timings"), _number)
    evidence = record.get("evidence")
    out["evidence"] = _public_evidence(evidence)
    clarification = _clarification(evidence)
    if clarification is not None:
        out["clarification"] = clarification
    return out
