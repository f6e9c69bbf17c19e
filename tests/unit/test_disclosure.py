"""The disclosure boundary: no field of a decision record leaks raw text, interpretations,
spans or hashes into its `decisions.public` projection."""

from __future__ import annotations

import numpy as np
import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.policy.document import parse_policy
from pipeline.rungs.rule_checks import RuleInput, RulesConfig, evaluate_rules
from pipeline.rungs.self_consistency import decide_consistency
from pipeline.trail.disclosure import PUBLIC_EVIDENCE, public_record
from pipeline.trail.records import make_record
from tests.fixtures.fakes import FakeEncoder
from tests.fixtures.ladder_scenario import (
    CONTEXT,
    QUESTION,
    R_ACCEPT,
    R_MIDDLE,
    R_NAMED,
    R_SAMPLED,
    SAMPLES,
    STANDARD,
    VECTORS,
    cand,
)
from workers.interfaces import StageContext
from workers.runtime.embedded import run_embedded
from workers.runtime.ladder import build_ladder
from workers.runtime.settings import Settings

SECRETS = [f"Secret{i}Quux" for i in range(40)]


def secret(i: int) -> str:
    return f"text with {SECRETS[i]} in it"


def leaks(projection: dict) -> list[str]:
    text = orjson.dumps(projection).decode()
    return [s for s in SECRETS if s in text]


def full_record(stage: str = "consistency") -> dict:
    """A record with every field and every kind of evidence a stage writes, each text
    field holding its own secret."""
    samples = [secret(0), secret(1), secret(2)]
    decision = decide_consistency(
        np.array([0.9, 0.9, 0.2]),
        np.array([[1.0, 0.1, 0.1], [0.1, 1.0, 0.1], [0.1, 0.1, 1.0]]),
        samples,
    )
    rules = evaluate_rules(
        RuleInput("q?", ("kept for 90 days",), f"kept for 45 days {SECRETS[3]}"), RulesConfig()
    )
    evidence = {
        **decision.to_dict(),
        "sample_source": "sampler",
        "samples": samples,
        "geometry": {
            "method": "sgi",
            "value": 1.4,
            "flagged": True,
            "flag_reason": secret(4),
        },
        "encoder": f"/models/{SECRETS[5]}",
        "readout": {
            "status": "ok",
            "score": 0.93,
            "top_tokens": [[SECRETS[6], -0.1]],
            "model": SECRETS[7],
            "detail": secret(8),
        },
        "calls": [{"kind": "ok", "error": secret(9), "status": 200}],
        "model": SECRETS[10],
        "rules": rules.to_dict(),
        "note": secret(11),
        "reviewer": SECRETS[12],
        "claims": [{"text": secret(13), "span": [0, 4], "support": 0.2}],
        "spans": [{"text": secret(14), "start": 0, "end": 9}],
        "excluded_chunks": [{"text": secret(15), "reason": "equals_response"}],
        "pii": [{"kind": "email", "text": SECRETS[16]}],
        "truncated": [secret(17)],
        "attempted_reason": secret(18),
    }
    assert decision.competing and decision.interpretations  # texts are in there
    return make_record(
        candidate_id="c-1",
        session_id="s-1",
        turn=2,
        stage=stage,
        action="requires_clarification",
        write_to_state=False,
        reason=f"because {SECRETS[19]} said so",
        policy_version="p-1",
        decided_at=1_700_000_000.0,
        mode="evaluate",
        route="default",
        prev_hash="ab" * 32,
        score=0.5,
        method="consistency",
        level="partly",
        gate="judge_unsure",
        breaker={"sampler": "closed", SECRETS[20]: "open"},
        kill_switch=True,
        timings={"geometry": 1.5, SECRETS[21]: 2.0},
        trace_id="0af7651916cd43dd8448eb211c80319c",
        thresholds={"sgi_review": 0.95},
        evidence=evidence,
    )


class TestNothingLeaks:
    def test_every_field_populated_leaks_nothing(self):
        record = full_record()
        assert len(leaks(record)) >= 20  # the record itself holds them all
        public = public_record(record)
        assert leaks(public) == []
        assert "hash" not in public and "prev_hash" not in public
        assert record["hash"] not in orjson.dumps(public).decode()
        assert "reason" not in public

    def test_what_crosses_is_what_a_consumer_needs(self):
        public = public_record(full_record())
        assert public["candidate_id"] == "c-1" and public["session_id"] == "s-1"
        assert public["action"] == "requires_clarification"
        assert public["reason_code"] == "judge_unsure"
        assert public["evidence"]["consistency_outcome"] == "requires_clarification"
        assert public["evidence"]["sgi_or_dgi"] == 1.4
        assert public["evidence"]["judge_score"] == 0.93
        assert public["evidence"]["rules_hit"] == ["source_support"]
        assert public["breaker"] == {"sampler": "closed"}
        assert public["timings"] == {"geometry": 1.5}
        assert public["kill_switch"] is True

    def test_clarification_says_how_many_meanings_compete_not_which(self):
        record = full_record()
        competing = len(record["evidence"]["competing"])
        assert competing >= 2
        assert public_record(record)["clarification"] == {"needed": True, "alternatives": competing}

    @settings(max_examples=300, deadline=None)
    @given(
        evidence=st.recursive(
            st.sampled_from(SECRETS) | st.integers(-(2**63), 2**63 - 1) | st.booleans() | st.none(),
            lambda inner: (
                st.lists(inner, max_size=4)
                | st.dictionaries(
                    st.sampled_from(
                        [p.split(".")[0] for p, _ in PUBLIC_EVIDENCE.values()]
                        + ["value", "status", "score", "hits", "rule", "text", *SECRETS[:3]]
                    ),
                    inner,
                    max_size=5,
                )
            ),
            max_leaves=30,
        ),
        top=st.dictionaries(
            st.sampled_from(["reason", "stage", "action", "gate", "level", "topic", "breaker"]),
            st.sampled_from(SECRETS) | st.dictionaries(st.sampled_from(SECRETS), st.text()),
        ),
    )
    def test_no_shape_of_evidence_or_field_leaks(self, evidence, top):
        # Secrets are capitalised, as raw text is: no allow-listed field accepts them.
        record = {**full_record(), **top, "evidence": {"x": evidence, **_as_dict(evidence)}}
        assert leaks(public_record(record)) == []


def _as_dict(value: object) -> dict:
    return value if isinstance(value, dict) else {}


async def test_the_ladders_own_records_leak_nothing():
    ctx = StageContext(policy=parse_policy({"policy": {"version": "t"}}))
    ctx.services["encoder"] = FakeEncoder(VECTORS)
    result = await run_embedded([*STANDARD, cand("named", R_NAMED)], build_ladder(Settings()), ctx)
    texts = [QUESTION, CONTEXT, R_ACCEPT, R_MIDDLE, R_SAMPLED, *SAMPLES, "Zorblax"]
    for record in result.records:
        dumped = orjson.dumps(public_record(record)).decode()
        assert not [t for t in texts if t in dumped], (record["candidate_id"], record["stage"])
