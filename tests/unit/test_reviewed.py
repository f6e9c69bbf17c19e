"""Learning from reviewers: a person's verdicts on `decisions` as labels for the cuts.
(tests/integration/test_reviewed_kafka.py reads them from the real broker.)"""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from pipeline.errors import ScoringError
from pipeline.fit.claims_data import reviewed_examples
from pipeline.records import make_record
from pipeline.scores.grounding import FEATURES, GroundingModel
from pipeline.thresholds import Thresholds
from tests.fixtures.fakes import HashEncoder
from workers.eval.reviewed import (
    MIN_LABELS_FOR_CUTS,
    human_verdicts,
    labelled_candidates,
    labelled_examples,
    parse_since,
    refit,
)

LABELLED = Path(__file__).resolve().parents[1] / "fixtures" / "labelled.jsonl"
CANDIDATES = {c["id"]: c for c in map(orjson.loads, LABELLED.read_bytes().splitlines())}


def verdict(cid: str, action: str, at: float, stage: str = "review", **extra: object) -> dict:
    fields: dict = {
        "session_id": "s",
        "turn": 1,
        "write_to_state": False,
        "reason": "r",
        "policy_version": "p",
        "decided_at": at,
        "mode": "evaluate",
        "route": "default",
        "prev_hash": "",
        "method": "human",
    } | extra
    return make_record(candidate_id=cid, stage=stage, action=action, **fields)


class TestVerdicts:
    def test_only_a_persons_verdicts_since_the_time_on_the_route(self) -> None:
        records = [
            verdict("a", "accept", 100.0),
            verdict("b", "reject", 50.0),  # before --since
            verdict("c", "accept", 100.0, route="qa"),
            verdict("d", "accept", 100.0, method="judge"),  # not a person
            verdict("e", "accept", 100.0, stage="switch"),  # not a review
            verdict("f", "escalate", 100.0),
        ]
        found = human_verdicts(records, since=60.0, route="default")
        assert set(found) == {"a"} and found["a"].grounded is True
        assert set(human_verdicts(records, since=None, route=None)) == {"a", "b", "c"}

    def test_the_latest_verdict_on_a_candidate_wins(self) -> None:
        records = [verdict("a", "accept", 100.0), verdict("a", "reject", 200.0)]
        assert human_verdicts(records)["a"].grounded is False

    def test_since_reads_iso_or_epoch(self) -> None:
        assert parse_since("1000") == 1000.0
        assert parse_since("1970-01-01T00:16:40") == 1000.0
        with pytest.raises(ValueError, match="--since"):
            parse_since("yesterday")

    def test_candidates_are_joined_by_id(self) -> None:
        ids = ["lab-0-right", "lab-0-bad", "gone"]
        found = human_verdicts(
            [verdict(i, "accept" if "right" in i else "reject", 1.0) for i in ids]
        )
        examples, skipped = labelled_examples(found, CANDIDATES)
        assert [e.grounded for e in examples] == [False, True]  # sorted by id
        assert skipped == {"candidate_not_found": 1, "no_context": 0}
        assert examples[1].response == CANDIDATES["lab-0-right"]["response"]


class TestExport:
    """`review export`: the verdicts as a labelled file that `train --reviewed` reads."""

    def found(self) -> dict:
        # A person accepts the right answer and rejects the wrong one; one id was never sent.
        ids = ["lab-0-right", "lab-0-bad", "gone"]
        return human_verdicts(
            [verdict(i, "accept" if "right" in i else "reject", 7.0, route="qa") for i in ids]
        )

    def test_each_verdict_labels_its_candidate(self) -> None:
        records, missing = labelled_candidates(self.found(), CANDIDATES)
        assert missing == 1
        by_id = {r["id"]: r for r in records}
        assert by_id["lab-0-right"]["metadata"]["label"] == "right"
        assert by_id["lab-0-bad"]["metadata"]["label"] == "hallucinated"
        for cid, r in by_id.items():
            assert r["response"] == CANDIDATES[cid]["response"]
            assert r["context"] == CANDIDATES[cid]["context"]
            assert (r["metadata"]["reviewed_at"], r["metadata"]["route"]) == (7.0, "qa")

    def test_train_reads_the_export_as_claim_examples(self, tmp_path: Path) -> None:
        records, _ = labelled_candidates(self.found(), CANDIDATES)
        path = tmp_path / "reviewed.jsonl"
        path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records))
        examples = {e.label: e for e in reviewed_examples(path)}
        assert set(examples) == {0, 1} and all(e.source == "reviewed" for e in examples.values())
        accepted, rejected = examples[1], examples[0]
        assert set(accepted.claim_labels) == {1}
        # A rejected answer's claims are unsupported only when it makes one claim.
        expected = {0} if len(rejected.claims) == 1 else {-1}
        assert set(rejected.claim_labels) == expected
        assert rejected.context == (CANDIDATES["lab-0-bad"]["context"],)


def coverage_model() -> GroundingModel:
    """P(grounded) rises with the share of the answer's words the source holds."""
    coefficients = [8.0 if f == "content_coverage" else 0.0 for f in FEATURES]
    return GroundingModel(FEATURES, tuple(coefficients), -4.0)


def reviewed(n: int) -> list:
    found = human_verdicts(
        [verdict(cid, "accept" if cid.endswith("right") else "reject", 1.0) for cid in CANDIDATES][
            :n
        ]
    )
    return labelled_examples(found, CANDIDATES)[0]


def test_refit_moves_the_cuts_to_the_reviewers_labels() -> None:
    # The policy's accept cut is so strict that no accepted verdict is auto-accepted.
    strict = Thresholds(grounding_accept=0.9999, grounding_review=0.5)
    result = refit(
        reviewed(20),
        strict,
        coverage_model(),
        route="qa",
        max_accept_error=0.1,
        encoder=HashEncoder(dim=16),
    )
    assert result.n == 20 and result.n_accepted == 10
    assert not result.model_refitted  # 20 verdicts: cuts only
    assert result.before == (0.0, 0.0)
    rate, error = result.after
    assert rate > 0.5 and error <= 0.1  # the refitted cut passes right answers within bound
    accept, review = result.cuts_after
    assert review <= accept < 0.9999
    assert result.sections == {  # too few verdicts for a cut per regime: one pair for both
        "thresholds": {
            "grounding_accept": accept,
            "grounding_review": review,
            "grounding_accept_long": accept,
            "grounding_review_long": review,
        }
    }
    text = result.render()
    assert "route qa: 20 verdicts (10 accept, 10 reject); refitted cuts only" in text
    assert "accept cut 0.9999 -> " in text and "before: 0.0% of accepted verdicts" in text


def test_too_few_verdicts_refit_nothing() -> None:
    with pytest.raises(ScoringError, match=f"at least {MIN_LABELS_FOR_CUTS}"):
        refit(
            reviewed(4),
            Thresholds(),
            coverage_model(),
            route=None,
            max_accept_error=0.1,
            encoder=HashEncoder(dim=16),
        )
