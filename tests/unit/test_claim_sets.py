"""The shared claim sets read as the stage will score them, split so no source leaks."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from pipeline.fit.claim_sets import evidence_for, load_claim_sets, table_context


def _write(path: Path, lines: list[dict]) -> None:
    with gzip.open(path, "wt", encoding="utf-8") as handle:
        for line in lines:
            handle.write(json.dumps(line) + "\n")


def _nli(premise: str, hypothesis: str, label: str, split: str) -> dict:
    return {"premise": premise, "hypothesis": hypothesis, "label": label, "split": split}


def test_labels_are_binary_and_test_split_is_held_out(tmp_path: Path) -> None:
    _write(
        tmp_path / "esnli_devtest.jsonl.gz",
        [
            _nli("A dog runs in a park.", "An animal is outside.", "entailment", "dev"),
            _nli("A dog runs in a park.", "A cat sleeps.", "contradiction", "dev"),
            _nli("Two men play chess.", "Two men play a game.", "entailment", "test"),
            _nli("Two men play chess.", "They are brothers.", "neutral", "test"),
        ],
    )
    pairs = load_claim_sets(tmp_path, ["esnli"])
    assert [(p.label, p.held_out) for p in pairs] == [(1, False), (0, False), (1, True), (0, True)]
    assert pairs[0].evidence == "A dog runs in a park."


def test_a_training_pair_whose_source_is_held_out_is_dropped(tmp_path: Path) -> None:
    _write(
        tmp_path / "esnli_devtest.jsonl.gz",
        [
            _nli("Two men play chess.", "Two men sit.", "entailment", "dev"),
            _nli("A dog runs.", "A dog moves.", "entailment", "dev"),
            _nli("Two men play chess.", "Two men play a game.", "entailment", "test"),
        ],
    )
    pairs = load_claim_sets(tmp_path, ["esnli"])
    assert [(p.claim, p.held_out) for p in pairs] == [
        ("A dog moves.", False),
        ("Two men play a game.", True),
    ]


def test_faithdial_generic_replies_are_left_out_and_unknown_labels_refused(tmp_path: Path) -> None:
    _write(
        tmp_path / "faithdial_audit.jsonl.gz",
        [
            {**_nli("Paris is in France.", "Paris is French.", "entailment", "all")},
            {**_nli("Paris is in France.", "Nice to hear!", "generic", "all")},
        ],
    )
    assert [p.claim for p in load_claim_sets(tmp_path, ["faithdial"])] == ["Paris is French."]
    _write(tmp_path / "faithdial_audit.jsonl.gz", [_nli("a", "b", "maybe", "all")])
    with pytest.raises(ValueError, match=r"faithdial_audit.jsonl.gz:1: unknown label 'maybe'"):
        load_claim_sets(tmp_path, ["faithdial"])


def test_a_table_is_read_row_by_row_and_the_claims_rows_are_its_evidence(tmp_path: Path) -> None:
    table = {
        "table_id": "t1",
        "header": ["year", "venue", "rank"],
        "rows": [[str(1990 + i), f"city{i}", str(i)] for i in range(12)],
    }
    _write(tmp_path / "tabfact_tables.jsonl.gz", [table])
    _write(
        tmp_path / "tabfact_statements.jsonl.gz",
        [
            {
                "table_id": "t1",
                "hypothesis": "in 1997 the venue was city7",
                "label": "entailment",
                "split": "train",
                "caption": "results",
            }
        ],
    )
    (pair,) = load_claim_sets(tmp_path, ["tabfact"])
    assert "row 8: year = 1997; venue = city7; rank = 7" in pair.evidence
    assert "city3" not in pair.evidence  # only the best rows, not the whole table
    assert json.loads(table_context(table, "cap"))["caption"] == "cap"


def test_evidence_is_the_claims_best_windows_in_context_order() -> None:
    context = "Alpha is red. Beta is blue. Gamma is green. Delta is black. Omega is white."
    evidence = evidence_for("Omega is white and Beta is blue", context, k=2)
    assert evidence == "Beta is blue. Omega is white."
    assert evidence_for("anything", "") == ""


def test_unknown_set_names_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown claim set"):
        load_claim_sets(tmp_path, ["nope"])
