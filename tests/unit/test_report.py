"""workers.eval.report: figures from hand-built decision records, and the written report."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from workers.eval.report import OUTCOME_TOPICS, summarize, write_report

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def run_records(
    cid: str,
    *,
    method: str,
    score: float | None,
    switch: str,
    topic: str,
    probability: float | None = None,
) -> list[dict[str, Any]]:
    """The records one candidate leaves behind: geometry, switch, outcome."""
    geometry: dict[str, Any] = {
        "candidate_id": cid,
        "stage": "geometry",
        "action": "scored",
        "write_to_state": False,
        "score": score,
        "method": method,
    }
    if probability is not None:
        geometry["evidence"] = {
            "grounding_probability": probability,
            "weakest_claim": {"claim": "c", "window": "w", "score": probability / 2},
        }
    return [
        geometry,
        {
            "candidate_id": cid,
            "stage": "switch",
            "action": switch,
            "write_to_state": switch == "accept",
            "score": score,
        },
        {
            "candidate_id": cid,
            "stage": "outcome",
            "action": "accept" if topic == "state" else "escalate",
            "write_to_state": topic == "state",
            "topic": topic,
            "score": None,
        },
    ]


# (id, grounded, method, score, switch action, outcome topic, length, probability)
CASES = [
    ("g1", True, "sgi", 1.5, "accept", "state", 10, 0.9),
    ("g2", True, "sgi", 1.0, "escalate", "state", 20, 0.6),
    ("g3", True, "sgi", 0.8, "fallback", "escalations.fallback", 30, 0.3),
    ("g4", True, "dgi", 0.7, "accept", "state", 15, 0.8),
    ("u1", False, "sgi", 1.3, "accept", "state", 100, 0.7),
    ("u2", False, "sgi", 0.5, "fallback", "escalations.fallback", 110, 0.1),
    ("u3", False, "dgi", 0.2, "escalate", "escalations.review", 120, 0.2),
]


def build(
    with_probability: bool = True,
) -> tuple[list[dict[str, Any]], dict[str, bool], dict[str, int]]:
    records: list[dict[str, Any]] = []
    for cid, _, method, score, switch, topic, _, prob in CASES:
        records += run_records(
            cid,
            method=method,
            score=score,
            switch=switch,
            topic=topic,
            probability=prob if with_probability else None,
        )
    labels = {c[0]: c[1] for c in CASES}
    lengths = {c[0]: c[6] for c in CASES}
    return records, labels, lengths


class TestSummarize:
    def test_counts(self) -> None:
        records, labels, lengths = build()
        m = summarize(records, labels, lengths, elapsed_seconds=2.0)
        assert (m["n"], m["n_grounded"], m["n_ungrounded"]) == (7, 4, 3)
        assert m["outcomes"]["grounded"]["state"] == 3
        assert m["outcomes"]["grounded"]["escalations.fallback"] == 1
        assert m["outcomes"]["ungrounded"] == {
            "state": 1,
            "escalations.fallback": 1,
            "escalations.regenerate": 0,
            "escalations.reject": 0,
            "escalations.review": 1,
            "deadletter": 0,
        }
        assert m["switch_actions"]["grounded"] == {"accept": 2, "escalate": 1, "fallback": 1}
        assert m["switch_actions"]["ungrounded"] == {"accept": 1, "escalate": 1, "fallback": 1}

    def test_state_shares(self) -> None:
        records, labels, lengths = build()
        m = summarize(records, labels, lengths, elapsed_seconds=2.0)
        assert m["grounded_to_state"] == pytest.approx(3 / 4)
        assert m["ungrounded_to_state"] == pytest.approx(1 / 3)
        assert m["state_ungrounded_share"] == pytest.approx(1 / 4)
        assert m["escalation_rate"] == pytest.approx(3 / 7)
        assert m["throughput_per_second"] == pytest.approx(3.5)

    def test_state_figures_per_task_kind(self) -> None:
        records, labels, lengths = build()
        # QA holds every answer that reached state (g1, g2, g4 right; u1 wrong), Summary
        # the rest: the figures must follow the kind, not the whole file.
        tasks = {c[0]: ("QA" if c[5] == "state" else "Summary") for c in CASES}
        m = summarize(records, labels, lengths, elapsed_seconds=2.0, tasks=tasks)
        qa, summary = m["by_task"]["QA"], m["by_task"]["Summary"]
        assert (qa["n"], summary["n"]) == (4, 3)
        assert qa["grounded_to_state"] == 1.0 and summary["grounded_to_state"] == 0.0
        assert qa["state_ungrounded_share"] == pytest.approx(1 / 4)
        assert summary["state_ungrounded_share"] is None  # nothing of it reached state
        assert summarize(records, labels, lengths, elapsed_seconds=2.0)["by_task"] == {}

    def test_weakest_claim_support_is_scored_like_the_others(self) -> None:
        records, labels, lengths = build()
        m = summarize(records, labels, lengths, elapsed_seconds=1.0)
        # Half the probability in every fixture: the same ranking, so the same AUROC.
        assert m["n_claim_support"] == 7
        assert m["auroc_claim_support"] == m["auroc_grounding_probability"]
        assert summarize(*build(with_probability=False), 1.0)["n_claim_support"] == 0

    def test_aurocs_from_geometry_records(self) -> None:
        records, labels, lengths = build()
        m = summarize(records, labels, lengths, elapsed_seconds=1.0)
        # The core's SGI: grounded {1.5, 1.0, 0.8} vs ungrounded {1.3, 0.5}: 4 of 6 pairs.
        assert m["auroc_core_sgi"] == pytest.approx(4 / 6)
        assert m["auroc_dgi"] == 1.0
        assert (m["n_core_sgi"], m["n_dgi"]) == (5, 2)
        assert (m["n_sgi"], m["auroc_sgi"]) == (0, None)  # no whole-response SGI given
        # grounding probability: grounded {.9,.6,.3,.8} vs {.7,.1,.2}: 10 of 12 pairs.
        assert m["auroc_grounding_probability"] == pytest.approx(10 / 12)
        assert m["ece_grounding_probability"] is not None

    def test_auroc_sgi_is_the_whole_response_sgi_not_the_stage_core_sgi(self) -> None:
        """Issue 22: eval's `auroc_sgi` (0.683) was the SGI of the answer's core the stage
        records, not the whole response's (0.812 on the same records)."""
        records, labels, lengths = build()
        # Whole-response SGI ranks every grounded answer above every ungrounded one here,
        # the core's does not: the two figures must not be confused.
        sgi = {
            cid: (2.0 if grounded else 0.5) + i / 100 for i, (cid, grounded, *_) in enumerate(CASES)
        }
        m = summarize(records, labels, lengths, elapsed_seconds=1.0, sgi=sgi)
        assert (m["n_sgi"], m["auroc_sgi"]) == (7, 1.0)
        assert m["auroc_core_sgi"] == pytest.approx(4 / 6)

    def test_length_matched_auroc_is_none_without_a_mixed_length_bin(self) -> None:
        records, labels, lengths = build()
        m = summarize(records, labels, lengths, elapsed_seconds=1.0)
        # DGI: one grounded (length 15) and one ungrounded (120) never share a bin.
        assert m["length_matched_auroc_dgi"] is None

    def test_one_class_method_gives_none(self) -> None:
        records = run_records("a", method="dgi", score=0.7, switch="accept", topic="state")
        records += run_records("b", method="sgi", score=1.4, switch="accept", topic="state")
        records += run_records("c", method="sgi", score=0.4, switch="fallback", topic="deadletter")
        m = summarize(records, {"a": True, "b": True, "c": False}, {}, elapsed_seconds=1.0)
        assert m["auroc_dgi"] is None
        assert m["auroc_core_sgi"] == 1.0
        assert m["auroc_grounding_probability"] is None
        assert m["length_matched_auroc_core_sgi"] is None  # no lengths given

    def test_no_state_gives_none_share(self) -> None:
        records = run_records("a", method="sgi", score=0.1, switch="fallback", topic="deadletter")
        m = summarize(records, {"a": False}, {"a": 3}, elapsed_seconds=0.0)
        assert m["state_ungrounded_share"] is None
        assert m["grounded_to_state"] is None
        assert m["escalation_rate"] == 1.0
        assert m["throughput_per_second"] is None

    def test_unlabelled_and_unfinished_are_counted_not_scored(self) -> None:
        records, labels, lengths = build()
        records += run_records("stranger", method="sgi", score=9.0, switch="accept", topic="state")
        records.append({"candidate_id": "late", "stage": "geometry", "score": 1.0, "method": "sgi"})
        labels = {**labels, "late": True, "never": False}
        m = summarize(records, labels, lengths, elapsed_seconds=1.0)
        assert m["n"] == 7
        assert m["n_unlabelled"] == 1
        assert m["n_without_outcome"] == 2
        assert m["n_records"] == len(records)


class TestLengthMatchedState:
    """Short bin (length 10): 3 grounded (2 in state), 1 ungrounded (0 in state).
    Long bin (length 100): 1 grounded (1 in state), 3 ungrounded (1 in state).
    """

    def build(self) -> tuple[list[dict[str, Any]], dict[str, bool], dict[str, int]]:
        spec = [
            ("s-g1", True, "state", 10),
            ("s-g2", True, "state", 10),
            ("s-g3", True, "escalations.review", 10),
            ("s-u1", False, "escalations.fallback", 10),
            ("l-g1", True, "state", 100),
            ("l-u1", False, "state", 100),
            ("l-u2", False, "escalations.fallback", 100),
            ("l-u3", False, "escalations.reject", 100),
        ]
        records: list[dict[str, Any]] = []
        for cid, _, topic, _ in spec:
            records += run_records(cid, method="sgi", score=1.0, switch="escalate", topic=topic)
        return records, {s[0]: s[1] for s in spec}, {s[0]: s[3] for s in spec}

    def test_standardised_rates(self) -> None:
        m = summarize(*self.build(), elapsed_seconds=1.0)
        assert m["grounded_to_state"] == pytest.approx(3 / 4)
        assert m["state_ungrounded_share"] == pytest.approx(1 / 4)
        # Each bin holds half the answers: a_g = (2/3 + 1)/2, a_u = (0 + 1/3)/2.
        assert m["grounded_to_state_length_matched"] == pytest.approx(5 / 6)
        assert m["ungrounded_to_state_length_matched"] == pytest.approx(1 / 6)
        assert m["state_ungrounded_share_length_matched"] == pytest.approx(1 / 6)
        assert m["escalation_rate_length_matched"] == pytest.approx(1 / 2)
        assert m["length_matched_coverage"] == 1.0

    def test_unknown_lengths_are_left_out(self) -> None:
        records, labels, lengths = self.build()
        del lengths["l-u3"]
        m = summarize(records, labels, lengths, elapsed_seconds=1.0)
        # Bins now hold 4 and 3 answers: a_u = 4/7 * 0 + 3/7 * 1/2.
        assert m["ungrounded_to_state_length_matched"] == pytest.approx(3 / 14)
        assert m["length_matched_coverage"] == pytest.approx(7 / 8)

    def test_no_lengths_gives_none(self) -> None:
        records, labels, _ = self.build()
        m = summarize(records, labels, {}, elapsed_seconds=1.0)
        assert m["state_ungrounded_share_length_matched"] is None


class TestWriteReport:
    @pytest.mark.parametrize("with_probability", [True, False])
    def test_writes_metrics_and_plots(self, tmp_path: Path, with_probability: bool) -> None:
        records, labels, lengths = build(with_probability)
        metrics = summarize(records, labels, lengths, elapsed_seconds=1.0)
        out = tmp_path / "report" / "nested"
        paths = write_report(metrics, records, labels, out)
        names = sorted(p.name for p in paths)
        assert names == [
            "actions.png",
            "metrics.json",
            "reliability.png",
            "roc.png",
            "score_hist.png",
        ]
        for path in paths:
            assert path.parent == out
            assert path.stat().st_size > 0
            if path.suffix == ".png":
                assert path.read_bytes()[:8] == PNG_MAGIC
        # One histogram panel per score: SGI, DGI, and P(grounded) and the weakest claim's
        # support where there is a model.
        png = (out / "score_hist.png").read_bytes()
        width, height = int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")
        panels = round(width / height * 4.5 / 6)
        assert panels == (4 if with_probability else 2)
        written = json.loads((out / "metrics.json").read_text())
        assert written["n"] == 7
        assert written["outcomes"]["grounded"]["state"] == 3

    def test_empty_run_still_writes_every_file(self, tmp_path: Path) -> None:
        metrics = summarize([], {}, {}, elapsed_seconds=1.0)
        paths = write_report(metrics, [], {}, tmp_path)
        assert len(paths) == 5
        assert all(p.stat().st_size > 0 for p in paths)

    def test_degenerate_sgi_sentinel_is_drawn(self, tmp_path: Path) -> None:
        records, labels, lengths = build(False)
        records += run_records("d", method="sgi", score=10.0, switch="accept", topic="state")
        labels = {**labels, "d": True}
        paths = write_report(summarize(records, labels, lengths, 1.0), records, labels, tmp_path)
        assert all(p.exists() for p in paths)


def test_outcome_topics_cover_the_ladder() -> None:
    assert "state" in OUTCOME_TOPICS
    assert "deadletter" in OUTCOME_TOPICS


def test_whole_response_sgi_is_the_seeds_sgi_of_the_whole_response() -> None:
    from pipeline.claims.units import answer_core
    from pipeline.scores.geometric import compute_sgi_batch
    from tests.fixtures.fakes import HashEncoder
    from workers.eval.evaluation import whole_response_sgi

    question = "What is the capital of Australia?"
    context = ["Canberra is the capital city of Australia."]
    answer = "The capital of Australia is Canberra."
    candidates = [
        {"id": "a", "question": question, "context": context, "response": answer},
        {"id": "no-context", "question": question, "response": answer},
        {"id": "blank", "question": question, "context": context, "response": " "},
    ]
    encoder = HashEncoder()
    found = whole_response_sgi(candidates, encoder)
    (whole,) = compute_sgi_batch([(question, context, answer)], encoder)
    (core,) = compute_sgi_batch([(question, context, answer_core(answer, question))], encoder)
    assert found == {"a": whole.value}  # the unscorable are left out, not raised on
    assert whole.value != core.value  # so the stage's score is a different figure
    # ... and the library's: `pipeline.compute_sgi` reads the core, as the stage (issue 33).
    from pipeline import compute_sgi

    assert compute_sgi(question, context, answer, encoder).value == core.value
