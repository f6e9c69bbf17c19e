"""`groundstream judge probe` and `groundstream sampler probe`: can this endpoint serve?

The judge probe asks the configured judge (or `--url/--model`): is it reachable, which
model, are logprobs offered, is the thinking switch honoured, how long a call takes, and
how the readout fares on a dozen built-in (question, context, answer) pairs, half
supported and half not. Its last line is exactly `usable (logprobs)`, `usable (votes)` or
`not usable: <why>`, and the exit status matches (0 usable, 1 not). The sampler probe
asks for two samples in one request the same way. Run one before pointing a ladder at a
new endpoint (docs/how-to/choose-judge.md).
"""

from __future__ import annotations

import asyncio
import statistics
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import click

from pipeline.errors import EXIT_REFUSED
from workers.cli.base import load_settings

PAIRS: tuple[tuple[str, str, str, bool], ...] = (
    ("What is the capital of France?", "Paris is the capital of France.", "Paris.", True),
    ("What is the capital of France?", "Paris is the capital of France.", "Lyon.", False),
    ("How many legs does a spider have?", "Spiders have eight legs.", "Eight.", True),
    ("How many legs does a spider have?", "Spiders have eight legs.", "Six.", False),
    ("When did the museum open?", "The museum opened in 1912.", "In 1912.", True),
    ("When did the museum open?", "The museum opened in 1912.", "In 1987.", False),
    ("What colour is the door?", "The front door is painted red.", "Red.", True),
    ("What colour is the door?", "The front door is painted red.", "Blue.", False),
    ("Who wrote the report?", "The report was written by Ana Lima.", "Ana Lima.", True),
    ("Who wrote the report?", "The report was written by Ana Lima.", "Tom Berg.", False),
    ("What does the pump need?", "The pump needs 12 volts.", "12 volts.", True),
    ("What does the pump need?", "The pump needs 12 volts.", "230 volts.", False),
)
"""(question, context, answer, supported): plain facts any usable judge gets right."""

PROBE_TIMEOUT_S = 30.0


@dataclass
class Report:
    lines: list[str] = field(default_factory=list)
    verdict: str = ""

    def say(self, line: str) -> None:
        self.lines.append(line)

    @property
    def usable(self) -> bool:
        return self.verdict.startswith("usable")


def _endpoint_options(kind: str) -> Any:
    def wrap(f: Any) -> Any:
        f = click.option(
            "--timeout",
            type=float,
            default=PROBE_TIMEOUT_S,
            show_default=True,
            help="Seconds one call may take.",
        )(f)
        f = click.option(
            "--model", default=None, help=f"Model id (else GROUNDSTREAM_{kind.upper()}_MODEL)."
        )(f)
        return click.option(
            "--url",
            default=None,
            help=f"Base URL ending in /v1 (else GROUNDSTREAM_{kind.upper()}_URL).",
        )(f)

    return wrap


def _finish(report: Report) -> None:
    for line in report.lines:
        click.echo(line)
    click.echo(report.verdict)
    sys.exit(0 if report.usable else EXIT_REFUSED)


def _target(kind: str, url: str | None, model: str | None) -> tuple[str, str, str]:
    settings = load_settings()
    found_url = url or getattr(settings, f"{kind}_url")
    found_model = model or ("" if url else getattr(settings, f"{kind}_model"))
    return found_url.rstrip("/"), found_model, getattr(settings, f"{kind}_api_key")


def _reach(report: Report, kind: str, url: str, model: str, api_key: str) -> str | None:
    """Reachable and the model, said in the report; the model to use, or None (the
    verdict is then set)."""
    from workers.clients.discovery import models_at

    if not url:
        report.verdict = f"not usable: no {kind} URL (GROUNDSTREAM_{kind.upper()}_URL or --url)"
        return None
    try:
        listed = models_at(url, api_key)
    except (OSError, ValueError) as exc:
        why = str(getattr(exc, "reason", "") or exc) or type(exc).__name__
        report.say(f"reachable: no ({url}/models: {why})")
        report.verdict = f"not usable: cannot reach {url} ({why})"
        return None
    report.say(f"reachable: yes ({url}/models lists {len(listed)}: {', '.join(listed[:5])})")
    if not model:
        if len(listed) != 1:
            report.verdict = (
                f"not usable: no model set and {url} serves {len(listed)};"
                f" give --model or GROUNDSTREAM_{kind.upper()}_MODEL"
            )
            return None
        model = listed[0]
        report.say(f"model: {model} (the one it serves)")
    else:
        report.say(f"model: {model}" + ("" if model in listed else " (not in its /models list)"))
    return model


def _latency(report: Report, calls: Sequence[Any]) -> None:
    times = [c.duration_ms for c in calls if c.tokens is not None]
    if times:
        report.say(
            f"latency: median {statistics.median(times):.0f} ms, max {max(times):.0f} ms"
            f" over {len(times)} calls"
        )


async def probe_judge(url: str, model: str, api_key: str, timeout: float) -> Report:
    from pipeline.judge.question import JudgeConfig, JudgeStatus, JudgeVerdict, decide_judge
    from workers.clients.llm import THINKING_SWITCH_REJECTED, CallKind, ChatEndpoint

    report = Report()
    found = await asyncio.to_thread(_reach, report, "judge", url, model, api_key)
    if found is None:
        return report
    logprobs = JudgeConfig(readout="logprobs", timeout_seconds=timeout)
    all_calls: list[Any] = []
    async with ChatEndpoint(url, found, api_key=api_key or None) as endpoint:
        question, context, answer, _ = PAIRS[0]
        readout, calls = await endpoint.judge(question, [context], answer, logprobs)
        all_calls += calls
        first = calls[0]
        switch_refused = first.kind is CallKind.HTTP_ERROR and first.status in (
            THINKING_SWITCH_REJECTED
        )
        final = calls[-1]
        if final.kind not in (CallKind.OK, CallKind.MALFORMED, CallKind.HTTP_ERROR):
            report.say(f"first call: {final.kind.value} ({final.error})")
            report.verdict = f"not usable: the first call ended {final.kind.value} ({final.error})"
            return report
        offered = readout is not None and readout.status is not JudgeStatus.NO_LOGPROBS
        if final.kind is CallKind.HTTP_ERROR:
            offered = False
        report.say(
            "logprobs: offered"
            if offered
            else f"logprobs: not offered ({final.error or (readout and readout.detail)})"
        )
        if switch_refused and len(calls) > 1:
            report.say("thinking off: refused (400/422 to the switch; retried without it)")
        elif first.kind is CallKind.OK:
            report.say("thinking off: honoured (the switch was accepted)")
        else:
            report.say(f"thinking off: not known (the first call: {first.error})")
        mode = "logprobs" if offered else "votes"
        config = JudgeConfig(readout=mode, timeout_seconds=timeout)
        right = wrong = unsure = scored = 0
        statuses: dict[str, int] = {}
        for question, context, answer, supported in PAIRS:
            readout, calls = await endpoint.judge(question, [context], answer, config)
            all_calls += calls
            if readout is None:
                statuses[calls[-1].kind.value] = statuses.get(calls[-1].kind.value, 0) + 1
                unsure += 1
                continue
            statuses[readout.status.value] = statuses.get(readout.status.value, 0) + 1
            scored += readout.status is JudgeStatus.OK
            verdict = decide_judge(readout, config).verdict
            if verdict is JudgeVerdict.UNSURE:
                unsure += 1
            elif (verdict is JudgeVerdict.YES) == supported:
                right += 1
            else:
                wrong += 1
    _latency(report, all_calls)
    n = len(PAIRS)
    seen = ", ".join(f"{k} {v}" for k, v in sorted(statuses.items()))
    report.say(
        f"readout ({mode}) on {n} built-in pairs: {right} right, {wrong} wrong, {unsure} unsure"
        f" ({seen})"
    )
    if scored < n // 2:
        report.verdict = f"not usable: only {scored} of {n} {mode} readouts scored ({seen})"
    elif wrong >= right:
        report.verdict = f"not usable: {right} right and {wrong} wrong of {n} built-in pairs"
    else:
        report.verdict = f"usable ({mode})"
    return report


async def probe_sampler(url: str, model: str, api_key: str, timeout: float) -> Report:
    from workers.clients.llm import ChatEndpoint

    report = Report()
    found = await asyncio.to_thread(_reach, report, "sampler", url, model, api_key)
    if found is None:
        return report
    question, context, _, _ = PAIRS[0]
    async with ChatEndpoint(url, found, api_key=api_key or None) as endpoint:
        result = await endpoint.sample(
            question, [context], 2, 1.0, 16, timeout=timeout, token_budget=4096
        )
    _latency(report, result.calls)
    honours = any(c.body and len(c.body.get("choices") or ()) >= 2 for c in result.calls if c.ok)
    report.say(f"n: {'honoured' if honours else 'ignored (one sample per call)'}")
    texts = [s for s in result.samples if s.strip()]
    report.say(f"samples: {len(texts)} of 2 with text")
    if result.failure is not None:
        error = result.calls[-1].error if result.calls else ""
        report.verdict = f"not usable: sampling ended {result.failure.value} ({error})"
    elif len(texts) < 2:
        report.verdict = f"not usable: {len(texts)} of 2 samples came back with text"
    else:
        report.verdict = "usable"
    return report


@click.group()
def judge() -> None:
    """The judge endpoint."""


@judge.command("probe")
@_endpoint_options("judge")
def judge_probe(url: str | None, model: str | None, timeout: float) -> None:
    """Can this endpoint serve as the judge? Last line: usable (logprobs), usable (votes)
    or not usable: why; exit 0 when usable, 1 when not."""
    _finish(asyncio.run(probe_judge(*_target("judge", url, model), timeout)))


@click.group()
def sampler() -> None:
    """The consistency stage's sampler endpoint."""


@sampler.command("probe")
@_endpoint_options("sampler")
def sampler_probe(url: str | None, model: str | None, timeout: float) -> None:
    """Can this endpoint serve as the consistency sampler? Last line: usable or not
    usable: why; exit 0 when usable, 1 when not."""
    _finish(asyncio.run(probe_sampler(*_target("sampler", url, model), timeout)))
