"""A library user and the service decide alike on the examples (real encoder, no Kafka).

For every candidate of examples/candidates.jsonl whose switch decision the embedded ladder
made from a geometry result, `pipeline`'s defaults — `score_candidate`, then
`GroundingSwitch()` — give the same action, score and reason as the recorded decision.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import pipeline
from workers.runtime.settings import Settings
from workers.runtime.verify import read_lines, run_lines

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "candidates.jsonl"
GEOMETRIC = ("sgi", "dgi", "grounding")


@pytest.fixture(scope="module")
def service_switch_records() -> dict[str, dict]:
    settings = Settings.from_env({})
    records = run_lines(read_lines(EXAMPLES), settings, pipeline.default_policy(), False).records
    return {
        r["candidate_id"]: r
        for r in records
        if r["stage"] == "switch" and r.get("method") in GEOMETRIC and not r.get("gate")
    }


def candidates() -> dict[str, dict]:
    out = {}
    for line in read_lines(EXAMPLES):
        try:
            value = json.loads(line)
        except ValueError:
            continue  # a malformed example line: dead-lettered, never switched
        if isinstance(value, dict) and "id" in value:
            out[value["id"]] = value
    return out


def test_the_examples_reach_the_switch_in_every_kind(service_switch_records) -> None:
    # Guards against a vacuous pass: several decisions, of both scores and several actions.
    methods = {r["method"] for r in service_switch_records.values()}
    actions = {r["action"] for r in service_switch_records.values()}
    assert len(service_switch_records) >= 8
    assert {"grounding", "dgi"} <= methods
    assert {"accept", "escalate", "fallback"} <= actions


def test_library_defaults_decide_as_the_service(service_switch_records) -> None:
    by_id = candidates()
    switch = pipeline.GroundingSwitch()
    for cid, record in service_switch_records.items():
        c = by_id[cid]
        score = pipeline.score_candidate(c["question"], c["response"], c.get("context"))
        decision = switch.decide(score)
        assert (decision.action.value, decision.method) == (record["action"], record["method"]), cid
        assert decision.score == pytest.approx(record["score"], abs=1e-6), cid
        assert decision.reason == record["reason"], cid
        assert pipeline.check(score).render() == record["evidence"]["check"], cid
