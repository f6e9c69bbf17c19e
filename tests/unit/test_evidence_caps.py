"""Evidence caps: a record's size no longer follows its answer's size."""

from __future__ import annotations

import orjson

from pipeline.trail.evidence import MAX_BYTES, MAX_CHARS, MAX_ITEMS, TRUNCATED, cap_evidence
from pipeline.trail.records import make_record


def record(evidence: dict) -> dict:
    return make_record(
        candidate_id="c1",
        session_id="s1",
        turn=1,
        stage="rules",
        action="escalate",
        write_to_state=False,
        reason="r",
        policy_version="p",
        decided_at=0.0,
        mode="evaluate",
        route="default",
        prev_hash="",
        evidence=evidence,
    )


def test_small_evidence_is_left_exactly_as_it_was() -> None:
    evidence = {"rules": {"hits": [{"rule": "pii", "span": "x"}]}, "human_override": False}
    assert cap_evidence(evidence) == evidence
    assert TRUNCATED not in record(evidence)["evidence"]


def test_one_hit_per_number_of_a_huge_answer_is_capped_and_says_so() -> None:
    hits = [{"rule": "unsupported_number", "span": str(n)} for n in range(20_000)]
    rec = record({"rules": {"hits": hits, "action": "review"}})
    kept = rec["evidence"]["rules"]["hits"]
    assert len(kept) == MAX_ITEMS
    assert kept[0] == hits[0]
    assert rec["evidence"][TRUNCATED] == [f"rules.hits: {MAX_ITEMS} of 20000 items"]
    assert rec["evidence"]["rules"]["action"] == "review"
    assert len(orjson.dumps(rec)) < 2 * MAX_BYTES


def test_long_strings_are_cut() -> None:
    capped = cap_evidence({"note": "n" * (MAX_CHARS * 3)})
    assert len(capped["note"]) == MAX_CHARS
    assert capped[TRUNCATED] == [f"note: {MAX_CHARS} of {MAX_CHARS * 3} characters"]


def test_still_too_big_drops_the_largest_entries_whole() -> None:
    wide = {f"k{i}": "v" * (MAX_CHARS - 1) for i in range(MAX_ITEMS)}
    capped = cap_evidence({"wide": wide, "a": {"b": wide}, "small": 1})
    assert capped["small"] == 1
    assert len(orjson.dumps(capped)) <= MAX_BYTES + 4096  # the note itself is small
    assert any("dropped" in cut for cut in capped[TRUNCATED])
