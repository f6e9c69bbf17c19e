"""workers.eval.datasets: format detection and conversion of labelled files into candidates.

Fixtures are small hand-written files in each supported layout (no shared data).
"""

from __future__ import annotations

import csv
import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from workers.eval.datasets import (
    DatasetFormat,
    LabelledCandidate,
    detect_format,
    file_sha256,
    load_labelled,
)

QA_RECORDS = [
    {
        "knowledge": "The Lighthouse Review was founded in Bristol in 1902.",
        "question": "Where was the Lighthouse Review founded?",
        "right_answer": "Bristol",
        "hallucinated_answer": "It was founded in Cardiff in 1950.",
    },
    {
        "knowledge": "Mount Pell rises 2,310 metres above the valley floor.",
        "question": "How high is Mount Pell?",
        "right_answer": "2,310 metres",
        "hallucinated_answer": "Mount Pell is about 4,000 metres high.",
    },
    {
        "knowledge": "The ferry leaves at seven and returns at noon.",
        "question": "When does the ferry return?",
        "right_answer": "At noon",
        "hallucinated_answer": "The ferry returns at midnight.",
    },
]

GENERAL_RECORDS = [
    {
        "ID": "7",
        "user_query": "Name three primary colours.",
        "chatgpt_response": "Red, blue and yellow.",
        "hallucination": "no",
        "hallucination_spans": [],
    },
    {
        "ID": "8",
        "user_query": "Who wrote the novel Quiet Harbour?",
        "chatgpt_response": "It was written by Ada Marsh in 1822.",
        "hallucination": "yes",
        "hallucination_spans": ["Ada Marsh in 1822"],
    },
]

CANDIDATE_RECORDS = [
    {
        "id": "rt-1-model-a",
        "session_id": "rt-1-model-a",
        "turn": 1,
        "initiator": "user",
        "question": "How long should the bread rest?",
        "context": "Let the dough rest for forty minutes before baking.",
        "response": "Rest it for forty minutes.",
        "metadata": {"label": "right", "source": "ragtruth", "group_id": "rt-1"},
    },
    {
        "id": "rt-1-model-b",
        "question": "How long should the bread rest?",
        "context": ["Let the dough rest", "for forty minutes before baking."],
        "response": "Rest it overnight in the fridge.",
        "metadata": {"label": "hallucinated", "source": "ragtruth", "group_id": "rt-1"},
    },
]

PAIR_ROWS = [
    {
        "id": "3",
        "domain": "science",
        "question": "What is the boiling point of water at sea level?",
        "grounded_response": "About 100 degrees Celsius at standard pressure.",
        "fabricated_response": "Exactly 85 degrees, as set by the 1990 treaty.",
    },
    {
        "id": "4",
        "domain": "finance",
        "question": "What does APR stand for?",
        "grounded_response": "Annual percentage rate.",
        "fabricated_response": "Adjusted payment ratio, a tax on savings.",
    },
]


def write_jsonl(path: Path, records: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def write_csv(path: Path, rows: list[dict[str, str]]) -> Path:
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]), quoting=csv.QUOTE_ALL)
        writer.writeheader()
        writer.writerows(rows)
    return path


def ids(items: list[LabelledCandidate]) -> list[str]:
    return [item.id for item in items]


def assert_candidate_shape(item: LabelledCandidate) -> None:
    c = item.candidate
    for key in ("id", "session_id", "turn", "initiator", "question", "response", "metadata"):
        assert key in c, key
    assert isinstance(c["turn"], int)
    assert c["initiator"] == "user"
    assert c["metadata"]["label"] == ("right" if item.grounded else "hallucinated")
    assert c["metadata"]["dataset"]
    assert c["metadata"]["group_id"]


class TestHaluEvalQA:
    def test_two_candidates_per_record_with_context(self, tmp_path: Path) -> None:
        items = load_labelled(write_jsonl(tmp_path / "qa.jsonl", QA_RECORDS))
        assert len(items) == 6
        assert [i.grounded for i in items] == [True, False] * 3
        assert ids(items)[:2] == ["halueval-qa-0-right", "halueval-qa-0-hallucinated"]
        first = items[0].candidate
        assert first["context"] == QA_RECORDS[0]["knowledge"]
        assert first["response"] == "Bristol"
        assert items[1].candidate["response"] == QA_RECORDS[0]["hallucinated_answer"]
        assert first["metadata"]["dataset"] == "halueval_qa"
        assert (
            items[0].candidate["metadata"]["group_id"] == items[1].candidate["metadata"]["group_id"]
        )
        for item in items:
            assert_candidate_shape(item)
            assert item.candidate["session_id"] == item.id

    def test_limit_counts_source_records(self, tmp_path: Path) -> None:
        items = load_labelled(write_jsonl(tmp_path / "qa.jsonl", QA_RECORDS), limit=2)
        assert len(items) == 4
        assert load_labelled(tmp_path / "qa.jsonl", limit=0) == []

    def test_json_array_is_read_too(self, tmp_path: Path) -> None:
        path = tmp_path / "qa.json"
        path.write_text(json.dumps(QA_RECORDS), encoding="utf-8")
        assert ids(load_labelled(path)) == ids(
            load_labelled(write_jsonl(tmp_path / "q.jsonl", QA_RECORDS))
        )


class TestHaluEvalGeneral:
    def test_one_candidate_without_context(self, tmp_path: Path) -> None:
        items = load_labelled(write_jsonl(tmp_path / "general.jsonl", GENERAL_RECORDS))
        assert ids(items) == ["halueval-general-7", "halueval-general-8"]
        assert [i.grounded for i in items] == [True, False]
        for item in items:
            assert "context" not in item.candidate
            assert_candidate_shape(item)
        assert items[1].candidate["question"] == "Who wrote the novel Quiet Harbour?"
        assert items[1].candidate["metadata"]["dataset"] == "halueval_general"

    def test_unknown_verdict_raises(self, tmp_path: Path) -> None:
        bad = [dict(GENERAL_RECORDS[0], hallucination="maybe")]
        with pytest.raises(ValueError, match=r"record 0.*'yes' or 'no'"):
            load_labelled(write_jsonl(tmp_path / "general.jsonl", bad))


class TestCandidateJsonl:
    def test_records_kept_with_defaults_filled(self, tmp_path: Path) -> None:
        items = load_labelled(write_jsonl(tmp_path / "rt.jsonl", CANDIDATE_RECORDS))
        assert ids(items) == ["rt-1-model-a", "rt-1-model-b"]
        assert [i.grounded for i in items] == [True, False]
        assert items[0].candidate["context"] == CANDIDATE_RECORDS[0]["context"]
        assert items[1].candidate["context"] == [
            "Let the dough rest",
            "for forty minutes before baking.",
        ]
        assert items[1].candidate["session_id"] == "rt-1-model-b"
        assert items[1].candidate["turn"] == 1
        assert items[0].candidate["metadata"]["dataset"] == "ragtruth"
        assert items[0].candidate["metadata"]["group_id"] == "rt-1"
        for item in items:
            assert_candidate_shape(item)

    def test_source_record_is_not_mutated(self, tmp_path: Path) -> None:
        record = json.loads(json.dumps(CANDIDATE_RECORDS[1]))
        write_jsonl(tmp_path / "rt.jsonl", [record])
        items = load_labelled(tmp_path / "rt.jsonl")
        items[0].candidate["metadata"]["extra"] = 1
        assert "extra" not in load_labelled(tmp_path / "rt.jsonl")[0].candidate["metadata"]

    def test_unknown_label_raises(self, tmp_path: Path) -> None:
        bad = [dict(CANDIDATE_RECORDS[0], metadata={"label": "partly"})]
        with pytest.raises(ValueError, match=r"metadata\.label"):
            load_labelled(write_jsonl(tmp_path / "rt.jsonl", bad))

    def test_duplicate_ids_raise(self, tmp_path: Path) -> None:
        dup = [CANDIDATE_RECORDS[0], CANDIDATE_RECORDS[0]]
        with pytest.raises(ValueError, match="duplicate candidate id 'rt-1-model-a'"):
            load_labelled(write_jsonl(tmp_path / "rt.jsonl", dup))


class TestReferencePairs:
    def test_two_candidates_per_row_without_context(self, tmp_path: Path) -> None:
        items = load_labelled(write_csv(tmp_path / "pairs.csv", PAIR_ROWS))
        assert ids(items) == [
            "groundlens-ref-3-grounded",
            "groundlens-ref-3-fabricated",
            "groundlens-ref-4-grounded",
            "groundlens-ref-4-fabricated",
        ]
        assert [i.grounded for i in items] == [True, False, True, False]
        assert items[0].candidate["response"] == PAIR_ROWS[0]["grounded_response"]
        assert items[0].candidate["metadata"]["domain"] == "science"
        for item in items:
            assert "context" not in item.candidate
            assert_candidate_shape(item)

    def test_limit(self, tmp_path: Path) -> None:
        assert len(load_labelled(write_csv(tmp_path / "pairs.csv", PAIR_ROWS), limit=1)) == 2


class TestDetection:
    @pytest.mark.parametrize(
        ("record", "fmt"),
        [
            (QA_RECORDS[0], DatasetFormat.HALUEVAL_QA),
            (GENERAL_RECORDS[0], DatasetFormat.HALUEVAL_GENERAL),
            (CANDIDATE_RECORDS[0], DatasetFormat.CANDIDATES),
            (PAIR_ROWS[0], DatasetFormat.REFERENCE_PAIRS),
        ],
    )
    def test_by_first_record_keys(self, record: dict[str, Any], fmt: DatasetFormat) -> None:
        assert detect_format(record) is fmt

    def test_unknown_format_names_the_keys(self, tmp_path: Path) -> None:
        path = write_jsonl(tmp_path / "odd.jsonl", [{"prompt": "p", "answer": "a"}])
        with pytest.raises(ValueError, match=r"keys \['answer', 'prompt'\]"):
            load_labelled(path)

    def test_unknown_csv_header_names_the_keys(self, tmp_path: Path) -> None:
        path = write_csv(tmp_path / "odd.csv", [{"a": "1", "b": "2"}])
        with pytest.raises(ValueError, match=r"\['a', 'b'\]"):
            load_labelled(path)

    def test_forced_format_skips_detection(self, tmp_path: Path) -> None:
        path = write_jsonl(tmp_path / "qa.jsonl", QA_RECORDS[:1])
        with pytest.raises(ValueError, match="record 0: missing field 'hallucination'"):
            load_labelled(path, fmt=DatasetFormat.HALUEVAL_GENERAL)

    def test_invalid_json_line_is_located(self, tmp_path: Path) -> None:
        path = tmp_path / "broken.jsonl"
        path.write_text(json.dumps(QA_RECORDS[0]) + "\n{not json\n", encoding="utf-8")
        with pytest.raises(ValueError, match=":2: invalid JSON"):
            load_labelled(path)

    def test_negative_limit_raises(self, tmp_path: Path) -> None:
        with pytest.raises(ValueError, match="limit"):
            load_labelled(write_jsonl(tmp_path / "qa.jsonl", QA_RECORDS), limit=-1)


class TestHelpers:
    def test_ids_are_unique_and_stable_across_formats(self, tmp_path: Path) -> None:
        files = [
            write_jsonl(tmp_path / "qa.jsonl", QA_RECORDS),
            write_jsonl(tmp_path / "general.jsonl", GENERAL_RECORDS),
            write_jsonl(tmp_path / "rt.jsonl", CANDIDATE_RECORDS),
            write_csv(tmp_path / "pairs.csv", PAIR_ROWS),
        ]
        first = [i for f in files for i in ids(load_labelled(f))]
        again = [i for f in files for i in ids(load_labelled(f))]
        assert first == again
        assert len(set(first)) == len(first) == 6 + 2 + 2 + 4

    def test_file_sha256(self, tmp_path: Path) -> None:
        path = tmp_path / "blob.bin"
        path.write_bytes(b"groundstream" * 100_000)
        assert file_sha256(path) == hashlib.sha256(b"groundstream" * 100_000).hexdigest()
