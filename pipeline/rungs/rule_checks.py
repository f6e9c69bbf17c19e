"""Deterministic policy rules (the last rung): the last check on every path to ``state``.

Place in the ladder
    Whatever accepted a candidate — the geometric switch, consistency, the judge or a
    person — the candidate passes through :func:`evaluate_rules` before it is written to
    ``state``. ``pass`` lets it through; ``review`` sends it to ``escalations.review``
    (a person decides); ``reject`` sends it to ``escalations.reject``. Each hit names the
    rule and, where there is one, the offending span of the response.

Rules
    :data:`RULES` is an explicit tuple of named pure functions
    ``(RuleInput, RulesConfig) -> list[RuleHit]``; adding a rule is one function and one
    entry. ``source_support`` (numbers, names and content words of the response that the
    context does not contain; see :mod:`pipeline.claims.support`), ``deny_list`` (operator
    regexes, matched case-insensitively), ``pii`` (e-mail addresses, phone numbers,
    Luhn-valid payment card numbers), ``max_length`` and ``required_fields`` (metadata
    keys that must be present and non-empty). A hit is ``review`` unless its rule is listed
    in ``RulesConfig.reject_rules``.

Hard facts and opinions (:mod:`pipeline.bounds.authority`)
    ``source_support`` makes two kinds of hit. Numbers and names absent from every
    source are hard facts and block whoever accepted, unless :func:`pipeline.claims.facts.
    is_artefact` finds them no claim (a list enumerator, a clock time on the other clock,
    a list item's first word). Those and low content-word coverage are only an
    opinion on support, of the support models' rank: it holds back an accept by geometry
    or consistency (its peers; on the switch's auto-accept path disagreeing peers fail
    closed to review), but under an accept by the judge or a person it is recorded as a
    finding (``RulesVerdict.findings``), not enforced. A caller that does not say who
    accepted gets the strict reading: every hit blocks.

Failure posture
    Configuration is validated when it is built: an unknown key, a wrong type, an
    out-of-range value, an invalid regex or an unknown rule name raises
    :class:`~pipeline.errors.PolicyError` naming ``rules.<key>``, so a worker refuses to
    start rather than run with a policy it misread. Evaluation fails closed: a rule that
    raises (a defect, never an expected path) becomes a hit of that rule saying so, so the
    candidate goes to review (or reject) and is never passed silently. ``source_support``
    is skipped when there is no source (``context is None``); whether a route may reach
    ``state`` without a source is the routing layer's decision, not this stage's.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType

from pipeline.bounds.authority import SUPPORT_RANK, Authority, opinion_may_hold
from pipeline.bounds.validation import config_from_table, finite
from pipeline.claims.facts import is_artefact
from pipeline.claims.support import Span, measure_support
from pipeline.encoding.chunks import context_chunks
from pipeline.errors import PolicyError, ScoringError
from pipeline.guards.admission import WorkCaps, admit

__all__ = [
    "PII_KINDS",
    "RULES",
    "RULE_NAMES",
    "Rule",
    "RuleHit",
    "RuleInput",
    "RulesAction",
    "RulesConfig",
    "RulesVerdict",
    "Severity",
    "evaluate_rules",
    "luhn_valid",
]


class Severity(StrEnum):
    """What a single hit asks for."""

    REVIEW = "review"
    REJECT = "reject"


class RulesAction(StrEnum):
    """Outcome of the rules: ``pass`` to state, or escalate to review / reject."""

    PASS = "pass"
    REVIEW = "review"
    REJECT = "reject"


PII_KINDS: frozenset[str] = frozenset({"email", "phone", "payment_card"})
"""PII detectors the ``pii`` rule knows."""

_LISTED_UNSUPPORTED = 10
"""How many unsupported words the coverage message lists before saying "and N more"."""


@dataclass(frozen=True, slots=True)
class RuleHit:
    """One violation: the rule, a plain-language message, the span (if any), severity.
    `opinion_rank` is set when the hit is an opinion on support rather than a hard fact:
    an authority above that rank overrules it (:mod:`pipeline.bounds.authority`)."""

    rule: str
    message: str
    span: Span | None
    severity: Severity
    opinion_rank: int | None = None

    def to_dict(self) -> dict[str, object]:
        """JSON-ready form; the span as ``{"text", "start", "end"}`` or ``None``."""
        span = (
            None
            if self.span is None
            else {"text": self.span.text, "start": self.span.start, "end": self.span.end}
        )
        return {
            "rule": self.rule,
            "message": self.message,
            "span": span,
            "severity": self.severity.value,
        }


@dataclass(frozen=True, slots=True)
class RuleInput:
    """What the rules see: the question, the source chunks (``None`` = no source), the
    response and the candidate's metadata (copied into a read-only mapping)."""

    question: str
    context: tuple[str, ...] | None
    response: str
    metadata: Mapping[str, object] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in ("question", "response"):
            if not isinstance(getattr(self, name), str):
                raise ScoringError(f"{name} must be a string")
        if self.context is not None:
            object.__setattr__(self, "context", context_chunks(self.context))
        if not isinstance(self.metadata, Mapping):
            raise ScoringError("metadata must be a mapping")
        object.__setattr__(self, "metadata", MappingProxyType(dict(self.metadata)))


# ----------------------------------------------------------------------------- config


def _str_tuple(key: str, value: object) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, Iterable):
        raise PolicyError(f"rules.{key}", value, "a list of strings")
    items = tuple(value)
    if not all(isinstance(v, str) and v for v in items):
        raise PolicyError(f"rules.{key}", value, "a list of non-empty strings")
    return items


@dataclass(frozen=True, slots=True)
class RulesConfig:
    """Settings of the rules, validated on construction (:class:`PolicyError` names the
    field as ``rules.<key>``). Build from a policy section with :meth:`from_mapping`."""

    min_content_coverage: float = 0.5
    """Share of the response's content words the context must contain (``source_support``)."""
    flag_unsupported_numbers: bool = True
    """Flag numbers of the response that no source contains (`source_support`)."""
    flag_unsupported_names: bool = True
    """Flag names of the response that no source contains (`source_support`)."""
    deny_patterns: tuple[str, ...] = ()
    """Regexes, matched case-insensitively against the response."""
    pii: frozenset[str] = PII_KINDS
    """PII kinds flagged in the response: email, phone, payment_card (Luhn-checked)."""
    max_response_chars: int = 20000
    """A response longer than this many characters is flagged."""
    required_fields: tuple[str, ...] = ()
    """Metadata keys that must be present and non-empty."""
    reject_rules: frozenset[str] = frozenset()
    """Rules whose hits are ``reject`` instead of ``review``."""
    compiled_patterns: tuple[re.Pattern[str], ...] = field(
        init=False, repr=False, compare=False, default=()
    )

    def __post_init__(self) -> None:
        cov = finite(self.min_content_coverage, "rules.min_content_coverage", "a number in [0, 1]")
        if not 0.0 <= cov <= 1.0:
            raise PolicyError("rules.min_content_coverage", cov, "a number in [0, 1]")
        for key in ("flag_unsupported_numbers", "flag_unsupported_names"):
            if not isinstance(getattr(self, key), bool):
                raise PolicyError(f"rules.{key}", getattr(self, key), "true or false")
        n = self.max_response_chars
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise PolicyError("rules.max_response_chars", n, "an integer >= 1")
        object.__setattr__(self, "deny_patterns", _str_tuple("deny_patterns", self.deny_patterns))
        object.__setattr__(
            self, "required_fields", _str_tuple("required_fields", self.required_fields)
        )
        for key, allowed in (("pii", PII_KINDS), ("reject_rules", RULE_NAMES)):
            names = frozenset(_str_tuple(key, getattr(self, key)))
            if not names <= allowed:
                raise PolicyError(
                    f"rules.{key}", sorted(names - allowed), f"a subset of {sorted(allowed)}"
                )
            object.__setattr__(self, key, names)
        compiled = []
        for pattern in self.deny_patterns:
            try:
                compiled.append(re.compile(pattern, re.IGNORECASE))
            except re.error as exc:
                raise PolicyError(
                    "rules.deny_patterns", pattern, f"a valid regular expression ({exc})"
                ) from None
        object.__setattr__(self, "compiled_patterns", tuple(compiled))

    @classmethod
    def from_mapping(cls, data: Mapping[str, object]) -> RulesConfig:
        """Build from a policy's ``rules`` section; unknown keys are refused by name."""
        return config_from_table(cls, "rules", data)  # __post_init__ checks every value


# ------------------------------------------------------------------------------ rules


def _hit(
    config: RulesConfig,
    rule: str,
    message: str,
    span: Span | None = None,
    opinion_rank: int | None = None,
) -> RuleHit:
    severity = Severity.REJECT if rule in config.reject_rules else Severity.REVIEW
    return RuleHit(rule, message, span, severity, opinion_rank)


def _source_support(inp: RuleInput, config: RulesConfig) -> list[RuleHit]:
    """Numbers and names of the response that no source contains (hard facts), and too
    few of its content words in the source (an opinion on support, marked as such)."""
    if inp.context is None:
        return []
    report = measure_support(inp.response, inp.context, inp.question)
    hits: list[RuleHit] = []
    flagged = (
        *(("number", s) for s in report.unsupported_numbers if config.flag_unsupported_numbers),
        *(("name", s) for s in report.unsupported_names if config.flag_unsupported_names),
    )
    for kind, span in flagged:
        artefact = is_artefact(span, kind, inp.response, inp.context, inp.question)
        hits.append(
            _hit(
                config,
                "source_support",
                f"{kind} {span.text!r} is not in the source",
                span,
                opinion_rank=SUPPORT_RANK if artefact else None,
            )
        )
    if report.content_coverage < config.min_content_coverage:
        words = [s.text for s in report.unsupported_words + report.unsupported_numbers]
        listed = ", ".join(repr(w) for w in words[:_LISTED_UNSUPPORTED])
        more = len(words) - _LISTED_UNSUPPORTED
        hits.append(
            _hit(
                config,
                "source_support",
                f"source covers {report.content_coverage:.2f} of the response's content words "
                f"(minimum {config.min_content_coverage:.2f}); unsupported: {listed}"
                + (f" and {more} more" if more > 0 else ""),
                opinion_rank=SUPPORT_RANK,
            )
        )
    return hits


def _deny_list(inp: RuleInput, config: RulesConfig) -> list[RuleHit]:
    hits: list[RuleHit] = []
    for pattern in config.compiled_patterns:
        for m in pattern.finditer(inp.response):
            if m.end() > m.start():
                span = Span(m.group(0), m.start(), m.end())
                hits.append(
                    _hit(config, "deny_list", f"matches denied pattern {pattern.pattern!r}", span)
                )
    return hits


def luhn_valid(digits: str) -> bool:
    """Luhn checksum of a string of digits (payment card numbers); False if not all digits."""
    if not digits or not digits.isascii() or not digits.isdigit():
        return False
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = ord(ch) - 48
        if i % 2 == 1:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return total % 10 == 0


_EMAIL_RE = re.compile(
    r"(?<![\w.+-])[A-Za-z0-9][A-Za-z0-9._%+-]{0,63}@[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
    r"(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*\.[A-Za-z]{2,63}(?![\w-])"
)
_DIGIT_RUN_RE = re.compile(r"(?<![\w.,+])[0-9]+(?:[ -][0-9]+)*(?![\w]|[.,][0-9])")
_PHONE_RES = (
    # international: +CC then groups, optional (area) group
    re.compile(
        r"(?<![\w+])\+[0-9]{1,3}(?:[ .-]?\([0-9]{1,4}\))?[ .-]?[0-9]{1,14}(?:[ .-][0-9]{1,14}){0,5}"
        r"(?![\w]|[.,-][0-9])"
    ),
    # North American: (555) 123-4567, 555-123-4567, 555.123.4567
    re.compile(
        r"(?<![\w(.,-])(?:\([0-9]{3}\)[ .-]?|[0-9]{3}[ .-])[0-9]{3}[ .-][0-9]{4}"
        r"(?![\w]|[.,-][0-9])"
    ),
    # national with a trunk 0: 020 7946 0958, 030-12345678, 0612345678
    re.compile(
        r"(?<![\w.,-])0(?:[0-9]{1,4}(?:[ -][0-9]{2,8}){1,3}|[0-9]{8,14})(?![\w]|[.,-][0-9])"
    ),
)
_PHONE_DIGITS = (9, 15)
"""A phone number has 9 to 15 digits (E.164 allows at most 15)."""
_CARD_DIGITS = (13, 19)


def _card_shaped(text: str, window: list[tuple[int, int]]) -> bool:
    """One group, or groups of 3+ digits (the first of 4) split by one repeated separator."""
    if len(window) == 1:
        return True
    seps = {text[window[k][1] : window[k + 1][0]] for k in range(len(window) - 1)}
    first_a, first_b = window[0]
    return len(seps) == 1 and first_b - first_a == 4 and all(b - a >= 3 for a, b in window)


def _card_spans(text: str) -> list[tuple[int, int]]:
    """Spans of 13-19 digit numbers, contiguous or in groups of 3+ digits split by one
    consistent space or dash (first group of 4), that pass the Luhn check."""
    spans: list[tuple[int, int]] = []
    for run in _DIGIT_RUN_RE.finditer(text):
        groups = [
            (m.start() + run.start(), m.end() + run.start())
            for m in re.finditer(r"[0-9]+", run.group(0))
        ]
        i = 0
        while i < len(groups):
            found = None
            digits = ""
            for j in range(i, len(groups)):  # windows grow until they hold too many digits
                if j > i and groups[i][1] - groups[i][0] != 4:
                    break  # a grouped card number starts with a group of four
                a, b = groups[j]
                digits += text[a:b]
                if len(digits) > _CARD_DIGITS[1]:
                    break
                if (
                    len(digits) >= _CARD_DIGITS[0]
                    and _card_shaped(text, groups[i : j + 1])
                    and luhn_valid(digits)
                ):
                    found = j  # keep the longest valid window
            if found is None:
                i += 1
            else:
                spans.append((groups[i][0], groups[found][1]))
                i = found + 1
    return spans


def _pii(inp: RuleInput, config: RulesConfig) -> list[RuleHit]:
    text = inp.response
    found: list[tuple[int, int, str]] = []
    if "email" in config.pii:
        found += [(m.start(), m.end(), "an e-mail address") for m in _EMAIL_RE.finditer(text)]
    cards = _card_spans(text) if "payment_card" in config.pii else []
    found += [(a, b, "a payment card number") for a, b in cards]
    if "phone" in config.pii:
        taken = [(a, b) for a, b, _ in found]
        for pattern in _PHONE_RES:
            for m in pattern.finditer(text):
                n_digits = sum(c.isdigit() for c in m.group(0))
                overlaps = any(m.start() < b and a < m.end() for a, b in taken)
                if _PHONE_DIGITS[0] <= n_digits <= _PHONE_DIGITS[1] and not overlaps:
                    found.append((m.start(), m.end(), "a phone number"))
                    taken.append((m.start(), m.end()))
    found.sort()
    return [
        _hit(config, "pii", f"response contains {kind}", Span(text[a:b], a, b))
        for a, b, kind in found
    ]


def _max_length(inp: RuleInput, config: RulesConfig) -> list[RuleHit]:
    n = len(inp.response)
    if n <= config.max_response_chars:
        return []
    return [
        _hit(
            config,
            "max_length",
            f"response is {n} characters, over the limit of {config.max_response_chars}",
        )
    ]


def _is_empty(value: object) -> bool:
    if value is None:
        return True
    if isinstance(value, str):
        return not value.strip()
    if isinstance(value, Mapping | list | tuple | set | frozenset):
        return len(value) == 0
    return False


def _required_fields(inp: RuleInput, config: RulesConfig) -> list[RuleHit]:
    hits: list[RuleHit] = []
    for key in config.required_fields:
        if key not in inp.metadata:
            hits.append(_hit(config, "required_fields", f"metadata field {key!r} is missing"))
        elif _is_empty(inp.metadata[key]):
            hits.append(_hit(config, "required_fields", f"metadata field {key!r} is empty"))
    return hits


@dataclass(frozen=True, slots=True)
class Rule:
    """A named pure check."""

    name: str
    check: Callable[[RuleInput, RulesConfig], list[RuleHit]]


RULES: tuple[Rule, ...] = (
    Rule("source_support", _source_support),
    Rule("deny_list", _deny_list),
    Rule("pii", _pii),
    Rule("max_length", _max_length),
    Rule("required_fields", _required_fields),
)
"""Every rule the rules stage runs, in order. Add a rule: one function, one entry."""

RULE_NAMES: frozenset[str] = frozenset(rule.name for rule in RULES)


# ----------------------------------------------------------------------------- verdict


@dataclass(frozen=True, slots=True)
class RulesVerdict:
    """All hits of one evaluation and the action they add up to; `findings` are opinions
    a higher authority's accept overruled (recorded, not enforced)."""

    hits: tuple[RuleHit, ...]
    action: RulesAction
    findings: tuple[RuleHit, ...] = ()

    def to_dict(self) -> dict[str, object]:
        """JSON-ready form: ``{"action": ..., "hits": [...]}``, plus ``"findings"`` when
        there are any."""
        out: dict[str, object] = {
            "action": self.action.value,
            "hits": [hit.to_dict() for hit in self.hits],
        }
        if self.findings:
            out["findings"] = [hit.to_dict() for hit in self.findings]
        return out


def evaluate_rules(
    inp: RuleInput,
    config: RulesConfig,
    accepter: Authority | None = None,
    caps: WorkCaps | None = None,
) -> RulesVerdict:
    """Run every rule; reject if any hit is reject-severity, else review if any hit, else
    pass. An opinion's hit is a finding instead when `accepter` outranks it
    (:func:`pipeline.bounds.authority.opinion_may_hold`). A rule that raises becomes a hit of that
    rule (fail closed), opinion or not. With `caps`, a candidate over them is not measured
    for source support (its cost grows with answer × source): that rule's hit then says
    it was not checked, a hard hit, so only a person's accept can pass it."""
    hits: list[RuleHit] = []
    findings: list[RuleHit] = []
    unchecked = _over_caps(inp, caps)
    for rule in RULES:
        if unchecked and rule.name == "source_support":
            hits.append(_hit(config, rule.name, f"source support not checked: {unchecked}"))
            continue
        try:
            found = rule.check(inp, config)
        except Exception as exc:  # fail closed: a broken rule never passes silently
            hits.append(_hit(config, rule.name, f"rule failed ({type(exc).__name__}: {exc})"))
            continue
        for hit in found:
            overruled = hit.opinion_rank is not None and not opinion_may_hold(
                hit.opinion_rank, accepter
            )
            (findings if overruled else hits).append(hit)
    if any(h.severity is Severity.REJECT for h in hits):
        action = RulesAction.REJECT
    elif hits:
        action = RulesAction.REVIEW
    else:
        action = RulesAction.PASS
    return RulesVerdict(tuple(hits), action, tuple(findings))


def _over_caps(inp: RuleInput, caps: WorkCaps | None) -> str:
    """Why source support would cost more than `caps` allow ("" when it would not)."""
    if caps is None or inp.context is None:
        return ""
    return admit(inp.question, inp.context, inp.response, caps, count_claims=False).reason
