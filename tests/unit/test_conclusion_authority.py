"""Who may conclude where (`pipeline.bounds.conclusions`): the table is the routing
table's, and the real stages, each signing with its own key, never conclude beyond it.

The ladder runs embedded (fake encoder, tests/fixtures/ladder_scenario.py) with every
stage wrapped to sign its emits as its Kafka worker does, and the writer holding every
stage's public key: every candidate still gets its usual outcome, and no conclusion the
stages write is refused by the writer.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from pipeline.bounds.conclusions import MAY_CONCLUDE, SIGNERS, TERMINAL_TOPICS, may_conclude
from pipeline.policy.document import parse_policy
from pipeline.policy.routing import Mode
from pipeline.stages.review import Claim
from tests.fixtures.fakes import FakeEncoder
from tests.fixtures.ladder_scenario import MALFORMED, R_ACCEPT, R_NAMED, STANDARD, VECTORS, cand
from topics.conclusion import read_conclusion
from topics.names import TERMINAL, Topic
from topics.schema import Envelope, candidate_from_dict
from topics.security.keys import Signer, TrustedKeys, generate
from workers.interfaces import Emit, Inbound, Stage, StageContext
from workers.runtime.embedded import run_embedded
from workers.runtime.ladder import build_ladder
from workers.runtime.settings import Settings
from workers.stages.kit import signed_emits
from workers.stages.review import review_emits
from workers.stages.routes import KILL_SWITCH, ROUTES, served

PAIRS = generate(SIGNERS)
TRUSTED = TrustedKeys({name: (key.public_key(),) for name, key in PAIRS.items()})


def derived() -> dict[str, frozenset[str]]:
    """The table from the routing table: each stage's terminal rows, as every mode serves
    them, with the kill switch's row; and a dead letter for every stage that reads its
    topic message by message (all but review, the person's tool)."""
    out = {}
    for stage, rows in ROUTES.items():
        ends = {served(mode, t) for t in rows.values() for mode in Mode} & set(TERMINAL)
        ends |= {KILL_SWITCH[t] for t in ends if t in KILL_SWITCH}
        if stage != "review":
            ends.add(Topic.DEADLETTER)
        out[stage] = frozenset(t.value for t in ends)
    return out


def test_the_table_is_the_routing_tables() -> None:
    assert dict(MAY_CONCLUDE) == derived()
    assert {t.value for t in TERMINAL} == TERMINAL_TOPICS
    assert [s for s in MAY_CONCLUDE if may_conclude(s, "state")] == ["rules"]
    assert MAY_CONCLUDE["geometry"] == {"escalations.fallback", "escalations.review", "deadletter"}


class Signing:
    """A stage as its worker runs it: its emits signed with its own key; the conclusions
    it wrote are kept, by signer and terminal topic."""

    def __init__(self, stage: Stage, seen: set[tuple[str, str]]) -> None:
        self.stage, self.seen = stage, seen
        self.name, self.source = stage.name, stage.source
        self.signer = Signer(stage.name, PAIRS[stage.name])

    def __getattr__(self, name: str):  # observe(), ledger: the wrapped stage's
        return getattr(self.stage, name)

    async def process(self, batch: Sequence[Inbound], ctx: StageContext) -> list[Emit]:
        emits = await self.stage.process(batch, ctx)
        for e in emits:
            if e.topic is Topic.CONCLUDED:
                self.seen.add((self.name, read_conclusion(e.value, e.headers).topic))
        return signed_emits(self.signer, emits)

    async def close(self) -> None:
        await self.stage.close()


SCENARIOS = {
    "evaluate": ({}, False),
    "kill switch": ({}, True),
    "shadow": ({"routes": {"default": {"mode": "shadow"}}}, False),
    "off": ({"routes": {"default": {"mode": "off"}}}, False),
}


@pytest.mark.parametrize("scenario", SCENARIOS)
async def test_the_real_stages_signing_as_themselves_conclude_within_the_table(
    scenario: str,
) -> None:
    policy, kill = SCENARIOS[scenario]
    ctx = StageContext(policy=parse_policy({"policy": {"version": "t"}, **policy}))
    ctx.services["encoder"] = FakeEncoder(VECTORS)
    ctx.control.kill_switch = kill
    ctx.trusted = TRUSTED
    seen: set[tuple[str, str]] = set()
    stages = [Signing(s, seen) for s in build_ladder(Settings())]
    named, late = cand("named", R_NAMED), cand("late", R_ACCEPT, deadline=1.0)
    result = await run_embedded([*STANDARD, named, late, *MALFORMED], stages, ctx)
    assert seen and all(may_conclude(s, t) for s, t in seen), seen
    # The writer refused nothing: every candidate has its one outcome from its stage.
    assert not [r for r in result.records if r["stage"] == "terminal"]
    assert len(result.outcomes()) == len(STANDARD) + 2 + len(MALFORMED)
    if scenario == "evaluate":
        assert {("rules", "state"), ("geometry", "deadletter")} <= seen


@pytest.mark.parametrize("verdict", ["accept", "reject"])
@pytest.mark.parametrize("mode", ["evaluate", "shadow"])
def test_a_persons_verdict_concludes_within_reviews_row(verdict: str, mode: str) -> None:
    candidate = candidate_from_dict(
        {"id": "c1", "session_id": "s1", "question": "Q?", "response": "A.", "context": "C."}
    )
    env = Envelope(candidate, route="default", mode=mode, last_hash="parked")
    ctx = StageContext(policy=parse_policy({"policy": {"version": "t"}}))
    emits = review_emits(ctx, env, Claim("k", "c1", "parked", verdict, "alice", "", 1.0))
    ends = [read_conclusion(e.value, e.headers).topic for e in emits if e.topic is Topic.CONCLUDED]
    assert all(may_conclude("review", t) for t in ends)
    assert (verdict == "accept") == (ends == [])  # an accept goes on to rules
