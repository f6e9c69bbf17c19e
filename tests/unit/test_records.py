"""Decision records: hash chain, tamper detection, the sanitized projection."""

from __future__ import annotations

import copy
import itertools

import numpy as np
import orjson
import pytest

from pipeline.rungs.rule_checks import RuleInput, RulesConfig, evaluate_rules
from pipeline.rungs.self_consistency import decide_consistency
from pipeline.trail.records import (
    OUTCOME_STAGE,
    comparable,
    make_record,
    record_hash,
    sanitize,
    verify_chain,
)


def record(stage: str, prev_hash: str = "", cid: str = "c1", **overrides) -> dict:
    fields = {
        "candidate_id": cid,
        "session_id": "s1",
        "turn": 0,
        "stage": stage,
        "action": "scored",
        "write_to_state": False,
        "reason": f"{stage} decided",
        "policy_version": "test",
        "decided_at": 1_700_000_000.0,
        "mode": "evaluate",
        "route": "default",
        "prev_hash": prev_hash,
    }
    fields.update(overrides)
    return make_record(**fields)


def chain(cid: str = "c1", stages=("geometry", "switch", "rules", OUTCOME_STAGE)) -> list[dict]:
    out: list[dict] = []
    for stage in stages:
        out.append(record(stage, out[-1]["hash"] if out else "", cid))
    return out


class TestMakeRecord:
    def test_hash_covers_the_content(self):
        rec = record("geometry")
        assert rec["hash"] == record_hash(rec)
        assert len(rec["hash"]) == 64
        assert rec["prev_hash"] == ""

    def test_records_link_to_the_previous_hash(self):
        recs = chain()
        for prev, rec in itertools.pairwise(recs):
            assert rec["prev_hash"] == prev["hash"]

    def test_hash_is_deterministic(self):
        assert record("geometry")["hash"] == record("geometry")["hash"]
        assert record("geometry")["hash"] != record("geometry", reason="x")["hash"]

    def test_record_is_json(self):
        rec = record("switch", score=1.3, method="sgi", level="ok", thresholds={"x": 1.0})
        assert orjson.loads(orjson.dumps(rec)) == rec

    def test_decided_at_is_iso_utc(self):
        rec = record("geometry", decided_at=0.0)
        assert rec["decided_at"].startswith("1970-01-01T00:00:00.000")
        assert rec["decided_at"].endswith("+00:00")

    def test_decided_and_served_default_to_action(self):
        rec = record("switch", action="accept")
        assert rec["decided_action"] == rec["served_action"] == "accept"

    @pytest.mark.parametrize(
        ("topic", "expected"),
        [
            (None, True),
            ("state", True),
            ("escalations.review", False),
            ("escalations.fallback", False),
            ("deadletter", False),
        ],
    )
    def test_write_to_state_forced_false_off_state(self, topic, expected):
        rec = record(OUTCOME_STAGE, action="accept", write_to_state=True, topic=topic)
        assert rec["write_to_state"] is expected

    def test_write_to_state_false_stays_false(self):
        assert record(OUTCOME_STAGE, write_to_state=False, topic="state")["write_to_state"] is False

    def test_topic_only_present_when_given(self):
        assert "topic" not in record("geometry")
        assert record(OUTCOME_STAGE, topic="state")["topic"] == "state"


class TestVerifyChain:
    def test_intact_chain_has_no_problems(self):
        assert verify_chain(chain()) == []

    def test_interleaved_candidates_chain_independently(self):
        a, b = chain("a"), chain("b")
        interleaved = [x for pair in zip(a, b, strict=True) for x in pair]
        assert verify_chain(interleaved) == []

    def test_edited_record_is_detected(self):
        recs = chain()
        edited = copy.deepcopy(recs)
        edited[1]["reason"] = "nothing to see here"
        problems = verify_chain(edited)
        assert any("c1/switch" in p and "hash" in p for p in problems)

    def test_edited_write_to_state_is_detected(self):
        recs = chain()
        recs[-1]["write_to_state"] = True
        assert verify_chain(recs)

    def test_edited_and_rehashed_record_breaks_the_next_link(self):
        recs = chain()
        recs[1]["action"] = "accept"
        recs[1]["hash"] = record_hash(recs[1])
        problems = verify_chain(recs)
        assert any("c1/rules" in p and "prev_hash" in p for p in problems)

    def test_removed_record_is_detected(self):
        recs = chain()
        del recs[1]
        problems = verify_chain(recs)
        assert any("prev_hash" in p for p in problems)

    def test_removed_first_record_is_detected(self):
        recs = chain()[1:]
        assert verify_chain(recs)

    def test_reordered_records_are_detected(self):
        recs = chain()
        recs[1], recs[2] = recs[2], recs[1]
        assert verify_chain(recs)


class TestSanitize:
    @pytest.mark.parametrize(
        ("scores", "similarity"),
        [
            ([0.9, 0.92], [[1.0, 0.95], [0.95, 1.0]]),  # one meaning: committed
            ([0.9, 0.9], [[1.0, 0.1], [0.1, 1.0]]),  # two meanings: competing
        ],
    )
    def test_consistency_sample_texts_are_dropped(self, scores, similarity):
        # The consistency stage stores decide_consistency's record as its evidence; every
        # interpretation carries the raw sample texts.
        samples = ["restored for ninety days Zorblax", "kept forever Quuxley"]
        decision = decide_consistency(np.array(scores), np.array(similarity), samples)
        evidence = {"sample_source": "candidate", **decision.to_dict()}
        assert "Zorblax" in orjson.dumps(evidence).decode()
        clean = sanitize(record("consistency", evidence=evidence))
        text = orjson.dumps(clean).decode()
        assert "Zorblax" not in text and "Quuxley" not in text
        assert clean["evidence"]["outcome"] == decision.outcome.value
        assert clean["evidence"]["consistency_score"] == decision.consistency_score
        assert clean["evidence"]["sample_source"] == "candidate"

    def test_reviewer_note_is_dropped_and_reviewer_kept(self):
        rec = record("review", evidence={"reviewer": "ana", "note": "the user's Zorblax account"})
        assert sanitize(rec)["evidence"] == {"reviewer": "ana"}

    def test_private_keys_are_dropped_at_any_depth(self):
        evidence = {"calls": [{"top_tokens": ["Zorblax"], "status": "ok"}], "samples": ["x"]}
        clean = sanitize(record("judge", evidence=evidence))
        assert clean["evidence"] == {"calls": [{"status": "ok"}]}

    def test_other_fields_are_kept(self):
        rec = record("switch", score=1.3, evidence={"check": "[OK] SGI=1.300"})
        clean = sanitize(rec)
        assert {k: v for k, v in clean.items() if k != "evidence"} == {
            k: v for k, v in rec.items() if k != "evidence"
        }
        assert clean["evidence"] == {"check": "[OK] SGI=1.300"}

    def test_original_is_not_mutated(self):
        rec = record("consistency", evidence={"samples": ["a"], "outcome": "x"})
        before = copy.deepcopy(rec)
        sanitize(rec)
        assert rec == before

    def test_record_without_evidence(self):
        rec = {k: v for k, v in record("geometry").items() if k != "evidence"}
        assert sanitize(rec)["evidence"] == {}

    def test_rule_hit_spans_of_the_response_are_dropped(self):
        # The rules stage stores its verdict as evidence {"rules": verdict.to_dict()}; the
        # hits carry spans of the raw response, which untrusted consumers must not get.
        response = "deleted files are kept for 45 days by Zorblax"
        verdict = evaluate_rules(
            RuleInput("how long?", ("deleted files are kept for 90 days",), response),
            RulesConfig(),
        )
        assert verdict.hits  # the number and the name are unsupported
        rec = record("rules", evidence={"rules": verdict.to_dict(), "human_override": False})
        text = orjson.dumps(sanitize(rec)).decode()
        assert "Zorblax" not in text
        assert "'45'" not in text and '"45"' not in text


class TestComparable:
    def test_volatile_fields_are_dropped(self):
        rec = record("geometry", timings={"geometry": 1.5}, trace_id="abc")
        kept = comparable(rec)
        for key in ("decided_at", "timings", "trace_id", "hash", "prev_hash"):
            assert key not in kept
        assert kept["reason"] == rec["reason"]
        assert kept["candidate_id"] == "c1"

    def test_two_runs_of_one_input_compare_equal(self):
        a = record("geometry", decided_at=1.0, timings={"geometry": 1.0}, trace_id="t1")
        b = record(
            "geometry", decided_at=2.0, timings={"geometry": 9.0}, trace_id="t2", prev_hash="x"
        )
        assert a != b
        assert comparable(a) == comparable(b)

    def test_a_different_decision_does_not_compare_equal(self):
        assert comparable(record("switch", action="accept")) != comparable(
            record("switch", action="fallback")
        )
