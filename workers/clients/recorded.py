"""Endpoints that answer from a recording: what replay puts where the judge and sampler were.

A replay recomputes every decision, but the judge's and the sampler's answers are facts of
the recorded day, not functions of the policy: asked again, a model answers differently
and a replay could never reproduce its recording. So replay swaps each stage's
`EndpointPool` for a `RecordedPool` that answers with what the candidate's recorded
decision says the endpoint answered — the judge's readout (its logprobs, so a stricter
judge bar still re-decides), the sampler's samples, the calls and breaker states — and the
stage decides on them under the replay's policy as it did live.

A stage the recording never reached for this candidate (a stricter policy sends it further
up the ladder) has no recorded answer: the pool answers as an endpoint that failed in
transport would, so the stage fails closed and the record names why (`replay: no recorded
answer`). `groundstream replay --live` keeps the real endpoints instead.

The pool answers for one candidate at a time: replay sets `answers.trail` before it runs a
candidate.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pipeline.judge.question import JudgeConfig, JudgeReadout, JudgeStatus
from pipeline.policy.breaker import BreakerStatus
from pipeline.policy.routing import RouteConfig
from pipeline.rungs.self_consistency import BudgetLimit
from pipeline.trail.replay import RecordedTrail
from workers.clients.llm import CallKind, CallResult, SampleResult

NO_RECORD = "replay: no recorded answer"


@dataclass
class Answers:
    """The recorded trail of the candidate being replayed (None between candidates)."""

    trail: RecordedTrail | None = None

    def evidence(self, stage: str) -> Mapping[str, Any] | None:
        record = None if self.trail is None else self.trail.record(stage)
        evidence = None if record is None else record.get("evidence")
        return evidence if isinstance(evidence, Mapping) else None

    def breaker(self, stage: str, kind: str) -> BreakerStatus:
        record = None if self.trail is None else self.trail.record(stage)
        status = (record or {}).get("breaker", {}).get(kind, BreakerStatus.CLOSED.value)
        try:
            return BreakerStatus(status)
        except ValueError:
            return BreakerStatus.CLOSED


@dataclass(frozen=True, slots=True)
class _Breaker:
    status: BreakerStatus


def _calls(evidence: Mapping[str, Any] | None) -> list[CallResult]:
    calls = []
    for call in (evidence or {}).get("calls") or ():
        try:
            kind = CallKind(call.get("kind"))
        except (ValueError, AttributeError):
            continue
        calls.append(
            CallResult(
                kind,
                call.get("status"),
                None,
                float(call.get("duration_ms") or 0.0),
                str(call.get("breaker", "")),
                str(call.get("error", "")),
            )
        )
    return calls


def _missing() -> CallResult:
    return CallResult(CallKind.TRANSPORT, None, None, 0.0, BreakerStatus.CLOSED.value, NO_RECORD)


def _readout(data: Any) -> JudgeReadout | None:
    if not isinstance(data, Mapping):
        return None
    usage = data.get("usage")
    return JudgeReadout(
        status=JudgeStatus(data["status"]),
        score=data.get("score"),
        p_yes=float(data.get("p_yes") or 0.0),
        p_no=float(data.get("p_no") or 0.0),
        top_tokens=tuple((str(t), float(lp)) for t, lp in data.get("top_tokens") or ()),
        model=data.get("model"),
        usage=dict(usage) if isinstance(usage, Mapping) else None,
        detail=str(data.get("detail", "")),
        readout=str(data.get("readout", "logprobs")),
        votes=tuple(str(v) for v in data.get("votes") or ()),
    )


class RecordedEndpoint:
    """One stage's endpoint, answering from `answers` (see the module docstring)."""

    def __init__(self, answers: Answers, stage: str, kind: str) -> None:
        self.answers, self.stage, self.kind = answers, stage, kind

    @property
    def breaker_state(self) -> _Breaker:
        return _Breaker(self.answers.breaker(self.stage, self.kind))

    async def judge(
        self,
        question: str,
        context: Sequence[str] | str | None,
        response: str,
        config: JudgeConfig | None = None,
        *,
        timeout: float | None = None,
        patience: float | None = None,
    ) -> tuple[JudgeReadout | None, list[CallResult]]:
        evidence = self.answers.evidence(self.stage)
        calls = _calls(evidence) or [_missing()]
        readout = _readout((evidence or {}).get("readout"))
        if readout is None and calls[-1].kind is CallKind.MALFORMED:
            readout = JudgeReadout(JudgeStatus.MALFORMED, detail=calls[-1].error)
        return readout, calls

    async def sample(
        self,
        question: str,
        context: Sequence[str] | str | None,
        n: int,
        temperature: float,
        max_tokens: int,
        *,
        timeout: float,
        token_budget: int,
        patience: float | None = None,
    ) -> SampleResult:
        evidence = self.answers.evidence(self.stage) or {}
        samples = evidence.get("samples")
        calls = tuple(_calls(evidence))
        if evidence.get("sample_source") != "sampler" or not isinstance(samples, list):
            failure = calls[-1].kind if calls and not calls[-1].ok else CallKind.TRANSPORT
            return SampleResult((), 0, BudgetLimit.NONE, calls or (_missing(),), n, failure)
        try:
            limit = BudgetLimit(evidence.get("budget_limit", BudgetLimit.NONE.value))
        except ValueError:
            limit = BudgetLimit.NONE
        failure = None if not calls or calls[-1].ok else calls[-1].kind
        return SampleResult(
            tuple(str(s) for s in samples),
            int(evidence.get("tokens_used") or 0),
            limit,
            calls,
            len(samples) if failure is None else n,
            failure,
        )


class RecordedPool:
    """Stands in for a stage's `EndpointPool` during a replay."""

    def __init__(self, answers: Answers, stage: str, kind: str, model: str = "") -> None:
        self.answers, self.stage, self.kind, self.model = answers, stage, kind, model
        self._endpoint = RecordedEndpoint(answers, stage, kind)

    @property
    def configured(self) -> bool:
        """As configured as it was: a recording made without the endpoint stays without it."""
        evidence = self.answers.evidence(self.stage)
        if evidence is None:
            return True  # never reached: answer "no recorded answer", failing closed
        # A judge the cache or a spent budget answered for made no call, but was there.
        asked = ("readout", "samples", "cache", "budget")
        return bool(evidence.get("calls")) or any(k in evidence for k in asked)

    def for_route(self, route: RouteConfig) -> RecordedEndpoint:
        return self._endpoint

    def breakers(self) -> dict[str, BreakerStatus]:
        return {}

    async def close(self) -> None:
        return None
