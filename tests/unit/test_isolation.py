"""Per-candidate isolation: a failing or oversize candidate is dead-lettered alone, under
its id; the rest of its batch goes on; transient errors are retried, never parked."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from aiokafka.errors import KafkaConnectionError

from pipeline.policy import load_policy
from topics.codec import dumps, loads
from topics.conclusion import read_conclusion
from topics.names import Topic
from workers.interfaces import Emit, Inbound, StageContext
from workers.runtime.isolation import oversize, process_isolated


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


@pytest.mark.parametrize("error", [KafkaConnectionError(), MemoryError()])
async def test_transient_errors_are_raised_for_a_retry_not_parked(error: Exception) -> None:
    with pytest.raises(type(error)):
        await process_isolated(Picky({"b"}, error), [item("a", 0), item("b", 1)], ctx())


async def test_an_output_over_the_broker_limit_parks_its_candidate_with_the_reason() -> None:
    stage = Picky(set(), ValueError(), big={"b"})
    emits = await process_isolated(stage, [item("a", 0), item("b", 1)], ctx())
    reasons = deadlettered(emits)
    assert list(reasons) == ["b"]
    assert reasons["b"].startswith("output too large: ")
    assert not oversize(emits)
