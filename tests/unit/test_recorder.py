"""The audit recorder stage: per-session chains numbered in log order, the public
projection alongside, an unreadable message chained as its digest; its output verifies."""

from __future__ import annotations

from pipeline.policy.document import parse_policy
from pipeline.trail.audit import CandidateMessage, Finding, Located, verify
from tests.unit.test_audit import trail
from topics.codec import dumps, loads
from topics.names import Topic
from workers.interfaces import Inbound, StageContext
from workers.stages.recorder import RecorderStage

T0 = 1_700_000_000.0


def inbound(records: list[dict], key: bytes) -> list[Inbound]:
    return [Inbound(key, dumps(r), "t.decisions", 0, n) for n, r in enumerate(records)]


async def record(batches: list[list[Inbound]], key: bytes | None = None):
    stage, ctx = RecorderStage(key), StageContext(policy=parse_policy({}))
    emits = []
    for batch in batches:
        emits += await stage.process(batch, ctx)
    return emits, ctx.sessions


def audit_entries(emits) -> list[Located]:
    return [
        Located(loads(e.value), f"audit@{n}")
        for n, e in enumerate(x for x in emits if x.topic is Topic.AUDIT)
    ]


async def test_chains_are_numbered_per_session_across_batches():
    a, b = inbound(trail("a", T0), b"s1"), inbound(trail("b", T0), b"s2")
    emits, heads = await record([[a[0], b[0], a[1]], [b[1], a[2], b[2]]])
    entries = [e.entry for e in audit_entries(emits)]
    assert [(e["chain"], e["seq"]) for e in entries] == [
        ("s1", 1), ("s2", 1), ("s1", 2), ("s2", 2), ("s1", 3), ("s2", 3)
    ]  # fmt: skip
    assert heads[b"s1"] == {"seq": 3, "hash": entries[4]["hash"]}
    messages = [CandidateMessage((cid,), "c", T0) for cid in ("a", "b")]
    assert verify(audit_entries(emits), messages, None, grace=0.0).intact


async def test_keyed_chains_verify_with_the_key_only():
    emits, _ = await record([inbound(trail("a", T0), b"s1")], key=b"k")
    messages = [CandidateMessage(("a",), "c", T0)]
    assert verify(audit_entries(emits), messages, b"k", grace=0.0).intact
    assert not verify(audit_entries(emits), messages, b"other", grace=0.0).intact


async def test_each_record_gets_its_public_projection():
    emits, _ = await record([inbound(trail("a", T0), b"s1")])
    public = [loads(e.value) for e in emits if e.topic is Topic.DECISIONS_PUBLIC]
    assert [p["stage"] for p in public] == ["geometry", "switch", "outcome"]
    assert all("hash" not in p and "reason" not in p for p in public)


async def test_an_unreadable_message_is_chained_and_named():
    batch = [*inbound(trail("a", T0), b"s1"), Inbound(b"s1", b"\x00garbage", "t.decisions", 0, 9)]
    emits, _ = await record([batch])
    entries = audit_entries(emits)
    assert entries[-1].entry["record"]["unreadable"] is True
    report = verify(entries, [], None, grace=0.0)
    assert [p.kind for p in report.problems] == [Finding.ALTERED]
    assert "#4" in report.problems[0].what


async def test_it_sends_only_to_its_declared_outputs():
    """`outputs` is what its principal may write (workers.runtime.acls): it must cover
    every topic the stage sends to, an unreadable message's included."""
    batch = [*inbound(trail("a", T0), b"s1"), Inbound(b"s2", b"\xff", "t.decisions", 0, 9)]
    emits, _ = await record([batch])
    assert {e.topic for e in emits} == set(RecorderStage.outputs)
