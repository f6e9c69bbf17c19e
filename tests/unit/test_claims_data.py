"""Examples for the claim-support model (pipeline.fit.claims_data), on our own fixtures."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeline.fit.claims_data import (
    REPHRASE_STYLES,
    ClaimExample,
    begin_examples,
    halueval_examples,
    json_examples,
    ragtruth_examples,
    rephrase,
    rephrase_as_assistant,
    reviewed_examples,
    synthetic_examples,
)

PROSE = (
    "The Harwick ferry was launched in 1962 by Orla Fenn. "
    "It carries 240 passengers between Harwick and Skellon Bay. "
    "The crossing takes 40 minutes in calm weather."
)
CAFE = json.dumps(
    {"name": "Gull Cafe", "city": "Skellon", "stars": 4.5, "hours": {"Monday": "9:0-17:0"}}
)


RIGHT = {"label": "right"}


def write_jsonl(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def candidate(label: str, response: str, spans: list[str], task: str = "QA") -> dict:
    meta = {"label": label, "task": task, "group_id": "g1", "spans": spans}
    return {"id": "c1", "question": "q", "context": PROSE, "response": response, "metadata": meta}


class TestRagtruth:
    def test_claims_overlapping_a_span_are_unsupported(self, tmp_path: Path) -> None:
        response = "The ferry was launched in 1962. It carries 300 passengers."
        path = write_jsonl(tmp_path / "r.jsonl", [candidate("hallucinated", response, ["300"])])
        (ex,) = ragtruth_examples(path)
        assert ex.claim_labels == (1, 0)
        assert (ex.label, ex.group, ex.kind) == (0, "g1", "QA")

    def test_right_answers_are_supported_throughout(self, tmp_path: Path) -> None:
        path = write_jsonl(tmp_path / "r.jsonl", [candidate("right", "It carries 240 people.", [])])
        assert ragtruth_examples(path)[0].claim_labels == (1,)

    def test_unlocated_spans_leave_claims_unlabelled(self, tmp_path: Path) -> None:
        record = candidate("hallucinated", "It carries 240 people.", ["nowhere in the text"])
        assert ragtruth_examples(write_jsonl(tmp_path / "r.jsonl", [record]))[0].claim_labels == (
            -1,
        )

    def test_unknown_label_raises(self, tmp_path: Path) -> None:
        path = write_jsonl(tmp_path / "r.jsonl", [candidate("maybe", "It sails.", [])])
        with pytest.raises(ValueError, match="unknown label"):
            ragtruth_examples(path)


class TestBegin:
    def test_labels_follow_the_reply(self, tmp_path: Path) -> None:
        records = [
            {
                "context": PROSE,
                "response": "The ferry is from 1962.",
                "metadata": {"label": "right"},
            },
            {
                "context": PROSE,
                "response": "It has a bar. It was built in Oslo.",
                "metadata": {"label": "hallucinated"},
            },
        ]
        right, wrong = begin_examples(write_jsonl(tmp_path / "b.jsonl", records))
        assert right.claim_labels == (1,)
        assert wrong.claim_labels == (-1, -1) and wrong.label == 0


def prose_example() -> ClaimExample:
    return ClaimExample("ragtruth", "g1", "QA", (PROSE,), ("x",), (1,), 1)


class TestSynthetic:
    def test_each_sentence_gives_a_positive_and_a_changed_negative(self) -> None:
        out = synthetic_examples([prose_example()], per_context=3, seed=1)
        positives = [e for e in out if e.label == 1]
        negatives = [e for e in out if e.label == 0]
        assert len(positives) == 3 and len(negatives) == 3
        sentences = set(PROSE.replace(". ", ".\n").splitlines())
        assert all(e.claims[0] not in sentences for e in negatives)
        assert {e.group for e in out} == {"g1"}

    def test_deterministic_under_a_seed(self) -> None:
        assert synthetic_examples([prose_example()], seed=3) == synthetic_examples(
            [prose_example()], seed=3
        )

    def test_a_context_is_used_once(self) -> None:
        once = synthetic_examples([prose_example()], seed=0)
        assert synthetic_examples([prose_example(), prose_example()], seed=0) == once


class TestJson:
    def test_fields_and_their_negatives(self) -> None:
        ex = ClaimExample("ragtruth", "g2", "Data2txt", (CAFE,), ("x",), (1,), 1)
        out = json_examples([ex], per_context=4, seed=0)
        positives = {e.claims[0] for e in out if e.label == 1}
        assert "The name is Gull Cafe." in positives
        assert "The hours Monday is 9:0-17:0." in positives
        assert any(e.label == 0 for e in out)
        assert not positives & {e.claims[0] for e in out if e.label == 0}


class TestRephrase:
    @pytest.mark.parametrize(
        ("style", "expected"),
        [
            ("given", "Orla Fenn"),
            ("based_on", "Based on the passage, the answer is Orla Fenn."),
            ("is_the_answer", "Orla Fenn is the answer."),
            ("its", "It's Orla Fenn."),
        ],
    )
    def test_short_answers_become_sentences(self, style: str, expected: str) -> None:
        assert rephrase("Orla Fenn", style) == expected

    def test_a_sentence_gets_the_lead_in_only(self) -> None:
        got = rephrase("The ferry was launched by Orla Fenn.", "its")
        assert got == "Based on the passage, the ferry was launched by Orla Fenn."

    def test_assistant_phrasing_is_chosen_by_id_and_spares_sentences(self) -> None:
        wrapped = {rephrase_as_assistant("Orla Fenn", f"id-{n}") for n in range(40)}
        assert wrapped == {rephrase("Orla Fenn", s) for s in REPHRASE_STYLES[1:]}
        assert rephrase_as_assistant("Orla Fenn", "id-7") == rephrase_as_assistant(
            "Orla Fenn", "id-7"
        )
        sentence = "The ferry was launched by Orla Fenn."
        assert rephrase_as_assistant(sentence, "id-7") == sentence

    def test_unknown_style_raises(self) -> None:
        with pytest.raises(ValueError, match="unknown style"):
            rephrase("Orla Fenn", "shout")

    def test_halueval_gives_every_style_for_both_answers(self, tmp_path: Path) -> None:
        record = {
            "knowledge": PROSE,
            "question": "Who launched the ferry?",
            "right_answer": "Orla Fenn",
            "hallucinated_answer": "It was launched by Ivo Marsh in 1970.",
        }
        out = halueval_examples(write_jsonl(tmp_path / "h.jsonl", [record]))
        assert sorted({e.kind for e in out}) == sorted(REPHRASE_STYLES)
        assert sum(e.label for e in out) == len(REPHRASE_STYLES)


def test_reviewed_answers_label_only_what_a_verdict_tells(tmp_path: Path) -> None:
    def record(response: str, label: str, context: object = PROSE) -> dict:
        return {"id": response[:8], "question": "q", "context": context, "response": response,
                "metadata": {"label": label}}  # fmt: skip

    rows = [
        record("The ferry was launched in 1962. It carries 240 passengers.", "right"),
        record("The ferry was launched in 1971.", "hallucinated"),
        record("The ferry was launched in 1962. It carries 900 passengers.", "hallucinated"),
        record("The ferry has no context here.", "right", context=None),
    ]
    path = tmp_path / "reviewed.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    got = reviewed_examples(path)
    assert [e.claim_labels for e in got] == [(1, 1), (0,), (-1, -1)]  # no context: left out
    assert [e.label for e in got] == [1, 0, 0]
    assert len({e.group for e in got}) == 1  # one source: one group, so one CV fold
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(record("x.", "maybe")) + "\n")
    with pytest.raises(ValueError, match="unknown label"):
        reviewed_examples(bad)


def test_a_training_run_takes_the_reviewed_answers_too(tmp_path: Path) -> None:
    from workers.eval.train import TrainConfig, training_examples

    rag = write_jsonl(tmp_path / "r.jsonl", [candidate("right", "It carries 240 people.", [])])
    begin = write_jsonl(
        tmp_path / "b.jsonl",
        [{"context": PROSE, "response": "The ferry is from 1962.", "metadata": RIGHT}],
    )
    reviewed = write_jsonl(
        tmp_path / "v.jsonl",
        [
            {
                "id": "v1",
                "question": "q",
                "context": PROSE,
                "response": "It sails to Oslo.",
                "metadata": {"label": "hallucinated"},
            }
        ],
    )
    config = TrainConfig(rag, begin, None, tmp_path / "out")
    without = training_examples(config)
    with_reviewed = training_examples(TrainConfig(rag, begin, None, tmp_path, reviewed=(reviewed,)))
    added = [e for e in with_reviewed if e.source == "reviewed"]
    assert len(with_reviewed) == len(without) + 1 and len(added) == 1
    assert added[0].claim_labels == (0,) and added[0].claims == ("It sails to Oslo.",)
