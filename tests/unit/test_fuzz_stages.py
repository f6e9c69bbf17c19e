"""Property-based fuzzing of every stage's input, in process: whatever arrives on a stage's
source topic, alone or in a batch, the stage never raises; each malformed message is
dead-lettered with a reason, and no good one is (issue 9, item 3). The same corpus runs
through the real broker in tests/faults/test_fuzz_stages.py."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeline.policy.document import load_policy
from tests.fixtures.fakes import HashEncoder
from tests.fixtures.fuzz import INPUTS, is_good, message, with_id
from topics.conclusion import read_conclusion
from topics.names import Topic
from workers.interfaces import Emit, Inbound, Stage, StageContext
from workers.runtime.ladder import build_ladder
from workers.runtime.settings import Settings

# The terminal writer reads only what the stages write (signed, each with its own key).
STAGES: dict[Topic, Stage] = {
    stage.source: stage for stage in build_ladder(Settings()) if stage.source is not Topic.CONCLUDED
}
FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))


def context() -> StageContext:
    ctx = StageContext(policy=load_policy(None), clock=lambda: 1_700_000_000.0)
    ctx.services["encoder"] = HashEncoder()
    return ctx


def dead_letters(emits: list[Emit]) -> list[str]:
    """The reasons of the dead letters among `emits` (on their way to the writer)."""
    ends = [read_conclusion(e.value, e.headers) for e in emits if e.topic is Topic.CONCLUDED]
    return [
        dict(c.headers)["gs-reason"].decode() for c in ends if c.topic == Topic.DEADLETTER.value
    ]


async def process(topic: Topic, values: list[bytes]) -> list[Emit]:
    batch = [
        Inbound(b"fz-s", with_id(v, f"fz-{i}"), f"t.{topic.value}", 0, i)
        for i, v in enumerate(values)
    ]
    return await STAGES[topic].process(batch, context())


def test_every_input_topic_has_its_stage():
    assert set(STAGES) == set(INPUTS)


@FUZZ
@given(message())
async def test_one_message_is_dead_lettered_exactly_when_malformed(msg):
    topic, raw = msg
    reasons = dead_letters(await process(topic, [raw]))
    if is_good(topic, with_id(raw, "fz-0")):
        assert reasons == []
    else:
        assert len(reasons) == 1 and reasons[0]


@FUZZ
@given(st.sampled_from(INPUTS).flatmap(lambda t: st.lists(message((t,)), min_size=2, max_size=8)))
async def test_a_batch_dead_letters_its_malformed_messages_only(msgs):
    topic = msgs[0][0]
    values = [raw for _, raw in msgs]
    bad = sum(not is_good(topic, with_id(v, f"fz-{i}")) for i, v in enumerate(values))
    assert len(dead_letters(await process(topic, values))) == bad
