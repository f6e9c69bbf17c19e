"""Per-candidate isolation: a failing or oversize candidate is dead-lettered alone, under
its id; the rest of its batch goes on; retryable errors are retried, never parked; and a
candidate's permanent error goes to the operator's choice (dead-letter or stop)."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from aiokafka.errors import KafkaConnectionError

from pipeline.failures import ErrorAction
from pipeline.policy.document import load_policy
from topics.codec import dumps, loads
from topics.conclusion import read_conclusion
from topics.names import Topic
from workers.interfaces import Emit, Inbound, StageContext
from workers.runtime.isolation import ProcessingStopped, always, oversize, process_isolated
from workers.runtime.loop import StaleBatch


def item(cid: str, offset: int) -> Inbound:
    body = {"id": cid, "session_id": f"s-{cid}", "question": "q", "response": "r"}
    return Inbound(f"s-{cid}".encode(), dumps(body), "t.candidates", 0, offset)


class Picky:
    """Forwards each message; raises on the ones named in `bad`, writes session state."""

    name = "picky"
    source = Topic.CANDIDATES

    def __init__(self, bad: set[str], error: Exception, big: set[str] = frozenset()) -> None:
        self.bad, self.error, self.big, self.calls = bad, error, big, 0

    async def process(self, batch: Sequence[Inbound], ctx: StageContext) -> list[Emit]:
        self.calls += 1
        out = []
        for i in batch:
            cid = loads(i.value)["id"]
            ctx.sessions[i.key] = {"seen": cid}
            if cid in self.bad:
                raise self.error
            value = b"x" * (9 << 20) if cid in self.big else i.value
            out.append(Emit(Topic.SCORED, i.key, value))
        return out

    async def close(self) -> None:
        return None


def ctx() -> StageContext:
    return StageContext(policy=load_policy(None), clock=lambda: 1_700_000_000.0)


def deadlettered(emits: list[Emit]) -> dict[str, str]:
    """candidate id → reason, of the dead letters among `emits` (sent via the writer)."""
    out = {}
    for e in emits:
        if e.topic is Topic.CONCLUDED:
            c = read_conclusion(e.value, e.headers)
            if c.topic == Topic.DEADLETTER.value:
                out[c.candidate_id] = dict(c.headers)["gs-reason"].decode()
    return out


async def test_one_bad_candidate_is_parked_alone_under_its_id() -> None:
    stage, c = Picky({"b"}, ValueError("boom")), ctx()
    batch = [item("a", 0), item("b", 1), item("c", 2)]
    emits = await process_isolated(stage, batch, c)
    assert deadlettered(emits) == {"b": "stage error: ValueError"}
    assert [loads(e.value)["id"] for e in emits if e.topic is Topic.SCORED] == ["a", "c"]
    # The failed attempt's state writes were rolled back; the good ones were kept.
    assert set(c.sessions) == {b"s-a", b"s-c"}


async def test_a_good_batch_is_processed_once() -> None:
    stage = Picky(set(), ValueError())
    emits = await process_isolated(stage, [item("a", 0), item("b", 1)], ctx())
    assert stage.calls == 1
    assert len(emits) == 2


@pytest.mark.parametrize("error", [KafkaConnectionError(), MemoryError(), StaleBatch("reassigned")])
@pytest.mark.parametrize("choice", list(ErrorAction))
async def test_retryable_errors_are_raised_for_a_retry_not_parked(
    error: Exception, choice: ErrorAction
) -> None:
    """Whatever the operator chose for permanent errors: a retryable one is never theirs."""
    asked: list[Exception] = []

    def handler(stage: str, item: Inbound, exc: Exception) -> ErrorAction:
        asked.append(exc)
        return choice

    with pytest.raises(type(error)):
        await process_isolated(
            Picky({"b"}, error), [item("a", 0), item("b", 1)], ctx(), on_error=handler
        )
    assert asked == []


class TestOnProcessingError:
    """The operator's choice for a candidate that fails alone with a permanent error."""

    async def test_deadletter_is_the_default_and_the_setting_s_first_choice(self) -> None:
        batch = [item("a", 0), item("b", 1), item("c", 2)]
        told = await process_isolated(
            Picky({"b"}, KeyError("k")), batch, ctx(), on_error=always(ErrorAction.DEADLETTER)
        )
        default = await process_isolated(Picky({"b"}, KeyError("k")), batch, ctx())
        assert deadlettered(told) == deadlettered(default) == {"b": "stage error: KeyError"}
        for emits in (told, default):
            assert [loads(e.value)["id"] for e in emits if e.topic is Topic.SCORED] == ["a", "c"]

    async def test_stop_raises_naming_the_message_and_puts_the_table_back(self) -> None:
        c = ctx()
        c.sessions[b"before"] = {"kept": True}
        batch = [item("a", 0), item("b", 1), item("c", 2)]
        with pytest.raises(ProcessingStopped) as info:
            await process_isolated(
                Picky({"b"}, KeyError("k")), batch, c, on_error=always(ErrorAction.STOP)
            )
        message = str(info.value)
        assert "stage picky stopped on t.candidates/0/1 (KeyError: 'k')" in message
        assert "GROUNDSTREAM_ON_PROCESSING_ERROR" in message and "\n" not in message
        assert isinstance(info.value.__cause__, KeyError)
        # "a" was written again, alone, before "b" stopped the batch: nothing of it stays.
        assert dict(c.sessions) == {b"before": {"kept": True}}

    async def test_a_callback_chooses_per_error_and_is_told_the_stage_and_message(self) -> None:
        class Choosy(Picky):
            async def process(self, batch: Sequence[Inbound], ctx: StageContext) -> list[Emit]:
                if any(loads(i.value)["id"] == "c" for i in batch):
                    raise LookupError("c")
                return await super().process(batch, ctx)

        seen: list[tuple[str, int, str]] = []

        def handler(stage: str, inbound: Inbound, exc: Exception) -> ErrorAction:
            seen.append((stage, inbound.offset, type(exc).__name__))
            return ErrorAction.STOP if isinstance(exc, LookupError) else ErrorAction.DEADLETTER

        batch = [item("a", 0), item("b", 1), item("c", 2)]
        with pytest.raises(ProcessingStopped):
            await process_isolated(Choosy({"b"}, ValueError("v")), batch, ctx(), on_error=handler)
        assert seen == [("picky", 1, "ValueError"), ("picky", 2, "LookupError")]

    async def test_an_oversize_output_is_not_a_processing_error(self) -> None:
        stage = Picky(set(), ValueError(), big={"b"})
        emits = await process_isolated(
            stage, [item("a", 0), item("b", 1)], ctx(), on_error=always(ErrorAction.STOP)
        )
        assert list(deadlettered(emits)) == ["b"]


async def test_an_output_over_the_broker_limit_parks_its_candidate_with_the_reason() -> None:
    stage = Picky(set(), ValueError(), big={"b"})
    emits = await process_isolated(stage, [item("a", 0), item("b", 1)], ctx())
    reasons = deadlettered(emits)
    assert list(reasons) == ["b"]
    assert reasons["b"].startswith("output too large: ")
    assert not oversize(emits)
