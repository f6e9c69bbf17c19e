"""`groundstream replay`: a range of `candidates` re-decided in the embedded ladder, and
compared with what `decisions` recorded.

How a replay decides as the recording did, and only the policy may change that:

* **The same stages.** The ladder of `build_ladder`, run by the embedded bus: the code
  the Kafka workers run.
* **Recorded answers.** The judge and sampler answer from the recording
  (`workers.clients.recorded`); `live=True` asks the real endpoints again. So do the
  judge's verdict cache and budgets (`RecordedBook`): a recorded cache hit is a hit again,
  a recorded spent budget is spent again — facts of the recorded day, like the judge's
  reply; what an answer over budget then gets is the replay policy's `over_budget`.
* **Recorded time.** No decision may read the replay's clock: each stage of a candidate
  runs with the clock at the time the recording says that stage decided (a stage the
  recording never reached gets the candidate's last recorded time), so a deadline that
  had expired at the judge expires there again, and one that had not does not.
* **Recorded controls.** The kill switch each stage saw is the one its record names.
* **Recorded order.** Candidates are replayed one at a time in partition order, so a
  session's latch moves as it did (a session lives on one partition). One at a time is
  also what lets the clock and the answers be the candidate's own; the price is one
  encoder call per candidate.

A candidate keeps its identity: it enters the bus with its topic, partition and offset,
so even a dead letter without an id is named as it was recorded.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import IO, Any

from aiokafka import ConsumerRecord

from pipeline.encoding.encoder import encoder_id as pipeline_encoder_id
from pipeline.judge.budget import Admission
from pipeline.judge.question import JudgeReadout
from pipeline.judge.verdict_cache import CachedVerdict
from pipeline.policy.document import Policy
from pipeline.trail.replay import (
    Change,
    Position,
    RecordedTrail,
    ReplaySummary,
    check_encoder,
    compare,
    message_ids,
    record_time,
    recorded_encoders,
    summarize,
    trails,
)
from topics.codec import dumps, loads
from topics.names import Topic
from workers.clients.recorded import Answers, RecordedPool
from workers.interfaces import Emit, Inbound, Stage, StageContext
from workers.runtime.embedded import EmbeddedBus
from workers.runtime.ladder import build_ladder
from workers.runtime.ranges import read_range
from workers.runtime.settings import Settings
from workers.runtime.verify import make_context
from workers.stages.judge_ledger import Booking, Call

RECORDED_ENDPOINTS = {"judge": "judge", "consistency": "sampler"}
"""Stages that call an endpoint, and the endpoint's kind in their records' `breaker`."""


def encoder_id(policy: Policy, backend: str = "torch") -> str:
    """The encoder a policy embeds with on `backend`, as geometry records name it (no
    model loaded)."""
    return pipeline_encoder_id(policy.encoder_model, backend)


@dataclass
class ReplayClock:
    """The time the stage running now decided at, as recorded."""

    now: float = 0.0

    def __call__(self) -> float:
        return self.now


class RecordedTime:
    """A stage run at its recorded time and under its recorded kill switch."""

    def __init__(self, inner: Stage, answers: Answers, clock: ReplayClock) -> None:
        self.inner, self.answers, self.clock = inner, answers, clock
        self.name, self.source = inner.name, inner.source

    async def process(self, batch: Sequence[Inbound], ctx: StageContext) -> list[Emit]:
        trail = self.answers.trail
        record = None if trail is None else trail.record(self.name)
        if trail is not None:
            self.clock.now = trail.time_of(self.name) or trail.last_time() or self.clock.now
        if record is not None:
            ctx.control.kill_switch = bool(record.get("kill_switch"))
        return await self.inner.process(batch, ctx)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)  # `observe` (the session latch), `close`


@dataclass
class ReplayRun:
    """A finished replay: one change per candidate, the replayed records, the summary."""

    changes: list[Change] = field(default_factory=list)
    records: list[dict[str, Any]] = field(default_factory=list)

    @property
    def summary(self) -> ReplaySummary:
        return summarize(self.changes)


def recorded_ids(message: ConsumerRecord) -> tuple[str, ...]:
    return message_ids(message.value, message.topic, message.partition, message.offset)


class RecordedBook:
    """The judge's verdict cache and budgets as the recording says they answered (see the
    module docstring); nothing is written. A record from before either existed says
    neither: a miss, within budget, and the recorded reply answers as it did."""

    def __init__(self, answers: Answers, stage: str) -> None:
        self.answers, self.stage = answers, stage

    def _evidence(self) -> Mapping[str, Any]:
        return self.answers.evidence(self.stage) or {}

    def lookup(self, partition: int, key: str, now: float, ttl: float) -> CachedVerdict | None:
        evidence = self._evidence()
        if evidence.get("cache") != "hit":
            return None
        try:
            at = record_time({"decided_at": evidence.get("cached_at")})
        except (TypeError, ValueError):
            at = now
        entry = {"readout": evidence.get("readout"), "at": at, "for": evidence.get("cached_for")}
        return CachedVerdict.from_dict(entry)

    def remember(
        self, partition: int, key: str, readout: JudgeReadout, now: float, candidate_id: str
    ) -> None:
        return None

    def admit(self, call: Call) -> tuple[Admission, Booking | None, dict[str, Any]]:
        now = call.now
        budget = self._evidence().get("budget")
        if not isinstance(budget, Mapping) or budget.get("state") != "over":
            return Admission(True, now), None, {}
        record = None if self.answers.trail is None else self.answers.trail.record(self.stage)
        reason = str((record or {}).get("reason", "")).removeprefix("judge not asked: ")
        left = {k: v for k, v in budget.items() if k not in ("state", "partition", "partitions")}
        return Admission(False, now, reason or "a judge budget was spent"), None, left

    def settle(self, booking: Booking, calls: int, tokens: int, now: float) -> dict[str, Any]:
        return {}


def ladder_for_replay(
    settings: Settings, answers: Answers, clock: ReplayClock, *, live: bool
) -> list[Stage]:
    stages = build_ladder(settings)
    if not live:
        for stage in stages:
            kind = RECORDED_ENDPOINTS.get(stage.name)
            if kind is not None:
                model = getattr(stage, "pool").model  # noqa: B009 (stages without a pool have no row)
                stage.pool = RecordedPool(answers, stage.name, kind, model)  # type: ignore[attr-defined]
            gate = getattr(stage, "gate", None)
            if gate is not None:  # the judge's cache and budgets answer from the recording
                gate.recorded = RecordedBook(answers, stage.name)
    return [RecordedTime(s, answers, clock) for s in stages]  # type: ignore[misc]


async def replay_messages(
    messages: Sequence[ConsumerRecord],
    recorded: Mapping[str, RecordedTrail],
    settings: Settings,
    policy: Policy,
    *,
    live: bool = False,
    services: Mapping[str, Any] | None = None,
    on_candidate: Callable[[], None] | None = None,
) -> ReplayRun:
    """Re-decide each candidate message and compare it with its recorded trail."""
    answers, clock = Answers(), ReplayClock()
    stages = ladder_for_replay(settings, answers, clock, live=live)
    ctx = make_context(settings, policy)
    ctx.clock = clock
    ctx.services.update(services or {})
    run = ReplayRun()
    try:
        for message in messages:
            ids = recorded_ids(message)
            answers.trail = next((recorded[i] for i in ids if i in recorded), None)
            clock.now = message.timestamp / 1000.0  # until a stage's recorded time applies
            bus = EmbeddedBus(stages, ctx, batch_size=1)
            bus.queues[Topic.CANDIDATES].append(
                Inbound(
                    message.key,
                    message.value,
                    message.topic,
                    message.partition,
                    message.offset,
                    tuple(message.headers or ()),
                    timestamp=message.timestamp / 1000.0,  # its entry, as geometry read it
                )
            )
            result = await bus.drain()
            named = list(trails(result.records))
            replayed_id = named[0] if len(named) == 1 else ids[0]
            run.records.extend(result.records)
            run.changes.append(compare(recorded.get(replayed_id), result.records, replayed_id))
            if on_candidate is not None:
                on_candidate()
    finally:
        answers.trail = None
        for stage in stages:
            await stage.close()
    return run


async def read_recording(
    settings: Settings, start: Position | None, end: Position | None
) -> tuple[list[ConsumerRecord], list[dict[str, Any]]]:
    """The candidates in the range, and every decision record on `decisions`."""
    candidates = await read_range(settings, settings.topic(Topic.CANDIDATES), start, end)
    decisions = await read_range(settings, settings.topic(Topic.DECISIONS))
    records = []
    for message in decisions:
        try:
            record = loads(message.value) if message.value else None
        except ValueError:
            continue
        if isinstance(record, dict):
            records.append(record)
    return candidates, records


def replay(
    settings: Settings,
    policy: Policy,
    start: Position | None,
    end: Position | None,
    *,
    live: bool = False,
    allow_encoder_change: bool = False,
    progress: bool = False,
) -> ReplayRun:
    """The whole replay: read, refuse an encoder change, re-decide, compare."""
    messages, records = asyncio.run(read_recording(settings, start, end))
    check_encoder(
        recorded_encoders(records),
        encoder_id(policy, settings.encoder_backend),
        allow_change=allow_encoder_change,
    )
    recorded = trails(records)
    if not progress:
        return asyncio.run(replay_messages(messages, recorded, settings, policy, live=live))
    from rich.progress import Progress

    with Progress(transient=True) as bar:
        task = bar.add_task("replay", total=len(messages))
        return asyncio.run(
            replay_messages(
                messages,
                recorded,
                settings,
                policy,
                live=live,
                on_candidate=lambda: bar.advance(task),
            )
        )


def write_changes(run: ReplayRun, out: IO[bytes]) -> None:
    """One JSON line per candidate: recorded and replayed outcome, and what changed."""
    for change in run.changes:
        out.write(dumps(change.to_dict()) + b"\n")


def render_summary(run: ReplayRun, out: IO[str] | None = None) -> None:
    """The summary table (and the changed candidates, up to 50) on the terminal."""
    from rich.console import Console
    from rich.table import Table

    console = Console(file=out, stderr=out is None)
    summary = run.summary
    table = Table(title="replay")
    table.add_column("outcome")
    table.add_column("candidates", justify="right")
    table.add_row("replayed", str(summary.total))
    table.add_row("unchanged", str(summary.total - summary.changed - summary.near_cut))
    table.add_row("changed", str(summary.changed))
    if summary.near_cut:
        table.add_row("within ε of a cut (not a change)", str(summary.near_cut))
    if summary.unrecorded:
        table.add_row("no recorded outcome", str(summary.unrecorded))
    for transition, n in summary.transitions.items():
        table.add_row(f"  {transition}", str(n))
    console.print(table)
    changed = [c for c in run.changes if c.changed or c.near_cut_change]
    if changed:
        detail = Table(title="changed decisions")
        for name in ("candidate", "recorded", "replayed", "stages", "reason"):
            detail.add_column(name)
        for c in changed[:50]:
            near = f" (within ε of {', '.join(c.near_cut)})" if c.near_cut else ""
            detail.add_row(
                c.candidate_id,
                c.recorded,
                c.replayed,
                ", ".join(c.stages),
                c.replayed_reason + near,
            )
        console.print(detail)
