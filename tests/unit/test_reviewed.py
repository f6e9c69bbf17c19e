"""Learning from reviewers: a person's verdicts on `decisions` as labels for the cuts.
(tests/integration/test_reviewed_kafka.py reads them from the real broker.)"""

from __future__ import annotations

import math
import random
from pathlib import Path

import orjson
import pytest

from pipeline.bounds.thresholds import Thresholds
from pipeline.errors import ScoringError
from pipeline.fit.claims_data import reviewed_examples
from pipeline.fit.grounding_model import bound_broken
from pipeline.scores.grounding import FEATURES, GroundingModel
from pipeline.trail.records import make_record
from tests.fixtures.fakes import HashEncoder
from workers.eval.calibration import Example
from workers.eval.reviewed import (
    GROUP,
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


class TestBoundBroken:
    """A refitted model whose cross-validated accepts break the bound accepts nothing."""

    def test_a_bound_broken_beyond_doubt_is_named(self) -> None:
        metrics = {"g.cv_accepted": 12.0, "g.cv_accept_error": 0.5}
        reason = bound_broken(metrics, "g", 0.05)
        assert reason.startswith("cross-validated, 50.0% of its 12 accepts were wrong")
        assert "above the bound 5.0%" in reason

    def test_noise_about_the_bound_is_not_a_broken_bound(self) -> None:
        # calibrate's own HaluEval QA fit: 6.0% of 381 out-of-fold accepts wrong at 5%
        assert bound_broken({"g.cv_accepted": 381.0, "g.cv_accept_error": 0.06}, "g", 0.05) == ""
        assert bound_broken({"g.cv_accepted": 5.0, "g.cv_accept_error": 0.2}, "g", 0.05) == ""
        assert bound_broken({"g.cv_accepted": 0.0, "g.cv_accept_error": 0.0}, "g", 0.05) == ""
        assert bound_broken({}, "g", 0.05) == ""

    def test_labels_the_features_cannot_see_are_not_learnt(self) -> None:
        # 200 verdicts whose labels have nothing to do with the answers: in sample a cut
        # holds the bound, out of fold most of its few accepts are wrong.
        rng = random.Random(0)
        words = [f"w{i}" for i in range(300)]
        examples = []
        for i in range(200):
            source = [*rng.sample(words, 30), str(rng.randint(1, 99)), f"Name{rng.randint(1, 9)}"]
            answer = rng.sample(source, rng.randint(2, 12)) + rng.sample(words, rng.randint(0, 4))
            answer += [str(rng.randint(1, 99))] if rng.random() < 0.3 else []
            answer += [f"Name{rng.randint(1, 9)}"] if rng.random() < 0.3 else []
            examples.append(
                Example(
                    GROUP,
                    f"q{i}?",
                    (" ".join(source) + ".",),
                    " ".join(answer) + ".",
                    rng.random() < 0.5,
                )
            )
        result = refit(
            examples,
            Thresholds(grounding_accept=0.9, grounding_review=0.5),
            coverage_model(),
            route="new",
            max_accept_error=0.05,
            encoder=HashEncoder(dim=16),
        )
        assert result.model_refitted and result.cross_validated is not None
        metrics = result.sections["grounding"]["metrics"]
        assert metrics[f"{GROUP}.accept_rate_grounded"] > 0.0  # in sample it would accept
        assert metrics[f"{GROUP}.accept_error"] <= 0.05
        assert result.cross_validated[1] > 0.05
        assert result.accepts_nothing.startswith("cross-validated, ")
        assert result.cuts_after[0] == math.inf and result.after == (0.0, 0.0)
        cuts = result.sections["thresholds"]
        assert cuts["grounding_accept"] == cuts["grounding_accept_long"] == math.inf
        text = result.render()
        assert "cross-validated: " in text and "the refitted model accepts nothing: " in text
