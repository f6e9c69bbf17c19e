"""The JSON Schemas in docs/reference/schemas/ hold for what groundstream really writes: the
embedded runner (the workers' own stages and terminal writer) runs a scenario that reaches
`state`, two escalations and `deadletter`, and every decision record, outcome record,
terminal message and candidate it sent validates against the committed schema files. The
files are the code's (`topics.contracts`), and `make_record` writes exactly the fields the
record table documents. The last tests show the schemas refuse what is not a record."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from pipeline.trail.records import OUTCOME_STAGE, RECORD_FIELDS, make_record
from tests.fixtures.ladder_scenario import MALFORMED, STANDARD
from tests.unit.test_embedded import make_ctx, run
from tools import docs_reference as ref
from topics.names import TERMINAL, Topic
from topics.schema import parse_envelope
from workers.runtime.embedded import EmbeddedResult

SCHEMAS = Path(__file__).resolve().parents[2] / "docs" / "reference" / "schemas"


def validator(name: str) -> Draft202012Validator:
    schema = json.loads((SCHEMAS / name).read_text(encoding="utf-8"))
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema)


def errors(name: str, instance: Any) -> list[str]:
    return [e.message for e in validator(name).iter_errors(instance)]


@pytest.fixture(scope="module")
def result() -> EmbeddedResult:
    ctx, _ = make_ctx()
    return asyncio.run(run([*STANDARD, *MALFORMED], ctx))


def test_the_committed_schema_files_are_the_codes() -> None:
    def committed(file: str) -> str | None:
        path = SCHEMAS.parent / file
        return path.read_text(encoding="utf-8") if path.is_file() else None

    assert ref.schema_drift(committed) == [], f"regenerate with: {ref.COMMAND}"


def test_make_record_writes_exactly_the_documented_fields() -> None:
    record = make_record(
        candidate_id="c",
        session_id="s",
        turn=0,
        stage=OUTCOME_STAGE,
        action="accept",
        write_to_state=True,
        reason="r",
        policy_version="v",
        decided_at=0.0,
        mode="evaluate",
        route="default",
        prev_hash="",
        topic="state",
        content_hash="0" * 64,
    )
    assert list(record) == list(RECORD_FIELDS)


def test_every_decision_record_validates(result: EmbeddedResult) -> None:
    stages = {r["stage"] for r in result.records}
    assert {"geometry", "switch", "consistency", "judge", "rules", OUTCOME_STAGE} <= stages
    for record in result.records:
        assert not errors("decision.json", record), (
            record["stage"],
            errors("decision.json", record),
        )


def test_every_outcome_record_validates(result: EmbeddedResult) -> None:
    outcomes = [r for r in result.records if r["stage"] == OUTCOME_STAGE]
    assert {r["topic"] for r in outcomes} == {
        "state",
        "escalations.fallback",
        "escalations.review",
        "deadletter",
    }
    for record in outcomes:
        assert not errors("outcome.json", record), errors("outcome.json", record)


def test_every_terminal_message_but_a_dead_letter_is_a_valid_envelope(
    result: EmbeddedResult,
) -> None:
    checked = 0
    for topic in TERMINAL:
        if topic is Topic.DEADLETTER:  # a dead letter is the refused bytes, unchanged
            continue
        for emit in result.outputs[topic]:
            value = json.loads(emit.value)
            assert not errors("envelope.json", value), (topic, errors("envelope.json", value))
            parse_envelope(emit.value)  # and the ladder's own parser reads it
            checked += 1
    assert checked == 4


def test_every_candidate_sent_validates_and_the_malformed_do_not() -> None:
    for candidate in STANDARD:
        assert not errors("candidate.json", candidate), errors("candidate.json", candidate)
    assert errors("candidate.json", {"id": "x"})  # no session, question or response
    assert errors("candidate.json", {"id": 1, "session_id": 2, "question": "q", "response": "r"})


def test_the_schemas_refuse_what_is_not_a_record(result: EmbeddedResult) -> None:
    record = next(r for r in result.records if r["stage"] == "switch")
    assert any(
        "'hash' is a required property" in e
        for e in errors("decision.json", {k: v for k, v in record.items() if k != "hash"})
    )
    assert errors("decision.json", {**record, "write_to_state": "yes"})
    assert errors("outcome.json", record)  # a switch's record is no outcome
    outcome = next(r for r in result.records if r["stage"] == OUTCOME_STAGE)
    assert errors("outcome.json", {**outcome, "topic": "scored"})  # not a terminal topic
