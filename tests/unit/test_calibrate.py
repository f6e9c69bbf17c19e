"""pipeline.calibrate: fitted cuts on constructed scores, the record, and μ̂."""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Sequence

import numpy as np
import pytest

from pipeline.bounds.thresholds import Thresholds
from pipeline.claims.units import answer_core
from pipeline.errors import PolicyError, ScoringError
from pipeline.fit.calibrate import (
    FitResult,
    fit_reference_direction,
    fit_thresholds,
    fit_thresholds_from_scores,
)
from pipeline.scores.geometric import compute_dgi_batch, compute_sgi_batch, dgi_from_embeddings


def labelled(values: Sequence[float], grounded: bool) -> list[tuple[float, bool]]:
    return [(float(v), grounded) for v in values]


def gap_sgi() -> list[tuple[float, bool]]:
    """Grounded SGI evenly over [1.1, 1.6], ungrounded over [0.6, 1.0]."""
    return labelled(np.linspace(1.1, 1.6, 50), True) + labelled(np.linspace(0.6, 1.0, 50), False)


def gap_dgi() -> list[tuple[float, bool]]:
    """Grounded DGI evenly over [0.6, 0.9], ungrounded over [0.1, 0.4]."""
    return labelled(np.linspace(0.6, 0.9, 40), True) + labelled(np.linspace(0.1, 0.4, 40), False)


def five_percent_sgi() -> list[tuple[float, bool]]:
    """At SGI >= 1.21 exactly 1 of the 20 accepted answers is ungrounded (5%).

    Grounded: 1.00, 1.02, 1.04 and 19 values 1.21, 1.23, ..., 1.57.
    Ungrounded: 1.50 (among the high ones), 1.05 and 1.10, and 20 low values in [0.5, 0.9].
    """
    grounded = [1.00, 1.02, 1.04, *(1.21 + 0.02 * k for k in range(19))]
    ungrounded = [1.50, 1.05, 1.10, *np.linspace(0.5, 0.9, 20)]
    return labelled(grounded, True) + labelled(ungrounded, False)


def accepted_error(data: list[tuple[float, bool]], cut: float) -> float:
    accepted = [g for s, g in data if s >= cut]
    return sum(not g for g in accepted) / len(accepted)


class TestYoudenCuts:
    def test_sgi_review_lies_in_the_gap(self) -> None:
        fit = fit_thresholds_from_scores(gap_sgi(), gap_dgi())
        assert 1.0 < fit.sgi_review < 1.1
        assert fit.metrics["youden_j_sgi"] == 1.0
        assert fit.metrics["auroc_sgi"] == 1.0

    def test_dgi_pass_lies_in_the_gap(self) -> None:
        fit = fit_thresholds_from_scores(gap_sgi(), gap_dgi())
        assert 0.4 < fit.dgi_pass < 0.6
        assert fit.metrics["auroc_dgi"] == 1.0
        assert fit.metrics["accept_rate_grounded_at_dgi_pass"] == 1.0
        assert fit.metrics["accept_rate_ungrounded_at_dgi_pass"] == 0.0

    def test_clean_separation_auto_accepts_every_grounded_answer(self) -> None:
        fit = fit_thresholds_from_scores(gap_sgi(), gap_dgi())
        assert fit.sgi_review <= fit.sgi_strong_pass < 1.1
        assert fit.metrics["accept_error_at_strong_pass"] == 0.0
        assert fit.metrics["accept_rate_grounded_at_strong_pass"] == 1.0
        assert fit.metrics["reject_rate_ungrounded_at_review"] == 1.0


class TestStrongPass:
    def test_lowest_cut_with_exactly_the_tolerated_error(self) -> None:
        data = five_percent_sgi()
        fit = fit_thresholds_from_scores(data, [], max_accept_error=0.05)
        assert fit.sgi_review == pytest.approx(0.95)
        # Between 1.10 (last cut with too many errors) and 1.21 (first good one).
        assert 1.10 < fit.sgi_strong_pass <= 1.21
        assert fit.sgi_strong_pass == pytest.approx(1.155)
        assert accepted_error(data, fit.sgi_strong_pass) == pytest.approx(0.05)
        assert fit.metrics["accept_error_at_strong_pass"] == pytest.approx(0.05)
        assert fit.metrics["accept_rate_grounded_at_strong_pass"] == pytest.approx(19 / 22)
        assert fit.metrics["accept_rate_ungrounded_at_strong_pass"] == pytest.approx(1 / 23)
        assert fit.metrics["sgi_strong_pass_accepts_nothing"] is False

    def test_just_below_the_tolerance_moves_the_cut_above_the_error(self) -> None:
        data = five_percent_sgi()
        fit = fit_thresholds_from_scores(data, [], max_accept_error=0.049)
        assert 1.50 < fit.sgi_strong_pass <= 1.51
        assert accepted_error(data, fit.sgi_strong_pass) == 0.0

    def test_loose_tolerance_lets_strong_pass_meet_review(self) -> None:
        fit = fit_thresholds_from_scores(five_percent_sgi(), [], max_accept_error=0.5)
        assert fit.sgi_strong_pass == fit.sgi_review

    def test_no_qualifying_cut_accepts_nothing(self) -> None:
        data = labelled([1.0, 1.1], True) + labelled([0.5, 2.0], False)
        fit = fit_thresholds_from_scores(data, [])
        assert fit.sgi_strong_pass == math.inf
        assert fit.metrics["sgi_strong_pass_accepts_nothing"] is True
        assert fit.metrics["accept_error_at_strong_pass"] is None
        assert fit.metrics["accept_rate_grounded_at_strong_pass"] == 0.0


class TestDefaultsAndCounts:
    def test_missing_sgi_keeps_its_defaults(self) -> None:
        fit = fit_thresholds_from_scores([], gap_dgi(), defaults=(1.3, 0.9, 0.7))
        assert (fit.sgi_strong_pass, fit.sgi_review) == (1.3, 0.9)
        assert fit.dgi_pass == pytest.approx(0.5)  # fitted, not the default 0.7
        assert fit.metrics["sgi_default_kept"] is True
        assert fit.metrics["dgi_default_kept"] is False
        assert fit.metrics["auroc_sgi"] is None

    def test_missing_dgi_keeps_its_default(self) -> None:
        fit = fit_thresholds_from_scores(gap_sgi(), [])
        assert fit.dgi_pass == 0.525
        assert fit.metrics["dgi_default_kept"] is True
        assert fit.metrics["auroc_dgi"] is None

    def test_counts(self) -> None:
        fit = fit_thresholds_from_scores(gap_sgi(), gap_dgi())
        assert (fit.n, fit.n_sgi, fit.n_dgi) == (180, 100, 80)
        assert fit.metrics["n_sgi_grounded"] == 50
        assert fit.metrics["n_dgi_ungrounded"] == 40


class TestBadInput:
    def test_no_examples_raise(self) -> None:
        with pytest.raises(ScoringError, match="no SGI and no DGI"):
            fit_thresholds_from_scores([], [])

    def test_one_class_sgi_is_named(self) -> None:
        with pytest.raises(ScoringError, match=r"^sgi data is one-class"):
            fit_thresholds_from_scores(labelled([1.0, 1.2], True), gap_dgi())

    def test_one_class_dgi_is_named(self) -> None:
        with pytest.raises(ScoringError, match=r"^dgi data is one-class.*ungrounded"):
            fit_thresholds_from_scores(gap_sgi(), labelled([0.1, 0.2], False))

    def test_non_finite_score_raises(self) -> None:
        with pytest.raises(ScoringError, match="not finite"):
            fit_thresholds_from_scores([(float("nan"), True), (0.5, False)], [])

    def test_non_bool_label_raises(self) -> None:
        with pytest.raises(ScoringError, match="bool"):
            fit_thresholds_from_scores([(1.0, "yes"), (0.5, False)], [])  # type: ignore[list-item]

    @pytest.mark.parametrize("bad", [-0.1, 1.0, 2])
    def test_max_accept_error_out_of_range(self, bad: float) -> None:
        with pytest.raises(PolicyError, match="max_accept_error"):
            fit_thresholds_from_scores(gap_sgi(), [], max_accept_error=bad)


class TestFitResult:
    def test_metrics_read_only(self) -> None:
        fit = fit_thresholds_from_scores(gap_sgi(), gap_dgi())
        with pytest.raises(TypeError):
            fit.metrics["auroc_sgi"] = 0.0  # type: ignore[index]

    def test_metrics_are_copied_on_construction(self) -> None:
        source = {"note": "a"}
        fit = FitResult(1.2, 0.95, 0.525, 1, 1, 0, source)
        source["note"] = "b"
        assert fit.metrics["note"] == "a"

    def test_hashable(self) -> None:
        fit = FitResult(1.2, 0.95, 0.525, 1, 1, 0, {"x": 1})
        assert hash(fit) == hash(FitResult(1.2, 0.95, 0.525, 1, 1, 0, {"x": 2}))

    def test_inverted_cuts_raise(self) -> None:
        with pytest.raises(PolicyError, match="sgi_review"):
            FitResult(0.9, 1.0, 0.5, 1, 1, 0)

    def test_to_dict_is_plain_json(self) -> None:
        fit = fit_thresholds_from_scores(gap_sgi(), gap_dgi())
        data = fit.to_dict()
        assert type(data["metrics"]) is dict
        assert json.loads(json.dumps(data))["n"] == 180

    def test_cuts_feed_the_policy_thresholds(self) -> None:
        fit = fit_thresholds_from_scores(five_percent_sgi(), gap_dgi())
        thresholds = Thresholds(*fit.cuts)
        assert thresholds.sgi_strong_pass == fit.sgi_strong_pass
        assert thresholds.dgi_pass == fit.dgi_pass


class HashEncoder:
    """Deterministic fake encoder: each text maps to a hash-seeded unit vector.

    Texts starting with "ZERO" embed as the zero vector, so geometry flags them.
    """

    dimension = 16

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        rows = []
        for text in texts:
            if text.startswith("ZERO"):
                rows.append(np.zeros(self.dimension))
                continue
            seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")
            v = np.random.default_rng(seed).standard_normal(self.dimension)
            rows.append(v / np.linalg.norm(v))
        return np.asarray(rows)

    def windows(self, text: str) -> list[str]:
        return [text]


def examples() -> list[dict[str, object]]:
    out: list[dict[str, object]] = []
    for i in range(8):
        out.append(
            {
                "question": f"question {i}",
                "context": f"context {i}" if i % 3 else [f"chunk {i}a", f"chunk {i}b"],
                "response": f"answer with context {i}",
                "grounded": i % 2 == 0,
            }
        )
        out.append(
            {"question": f"open question {i}", "response": f"free answer {i}", "grounded": i < 4}
        )
    return out


class TestFitThresholds:
    def test_scores_with_sgi_and_dgi_then_fits(self) -> None:
        encoder = HashEncoder()
        mu = np.eye(HashEncoder.dimension)[0]
        data = examples()
        fit = fit_thresholds(data, encoder=encoder, reference_direction=mu)

        with_ctx = [e for e in data if "context" in e]
        without = [e for e in data if "context" not in e]
        # SGI of the answer's core, the quantity the stage applies the cut to (issue 33).
        sgi = compute_sgi_batch(
            [
                (e["question"], e["context"], answer_core(e["response"], e["question"]))
                for e in with_ctx
            ],
            encoder,
        )
        dgi = compute_dgi_batch([(e["question"], e["response"]) for e in without], encoder, mu)
        expected = fit_thresholds_from_scores(
            [(r.value, e["grounded"]) for r, e in zip(sgi, with_ctx, strict=True)],
            [(r.value, e["grounded"]) for r, e in zip(dgi, without, strict=True)],
        )
        assert fit.cuts == expected.cuts
        assert (fit.n, fit.n_sgi, fit.n_dgi) == (16, 8, 8)
        assert fit.metrics["n_flagged_sgi"] == fit.metrics["n_flagged_dgi"] == 0

    def test_the_switch_applies_each_fitted_sgi_cut_to_the_quantity_it_was_fitted_on(
        self,
    ) -> None:
        """Issue 33 (one SGI): the library's `compute_sgi` is the geometry stage's SGI (of
        the answer's core), and the switch under the fitted cuts decides every training
        answer as the fit counted it in-sample. Whole-response SGI would not."""
        import pipeline
        from pipeline.rungs.grounding_switch import GroundingSwitch, SwitchAction
        from pipeline.scores.batch import measure_batch

        encoder = HashEncoder()
        data: list[dict[str, object]] = []
        for i in range(12):
            question = f"Which river feeds reservoir {i}?"
            for grounded, source in ((True, f"the river Calder{i}"), (False, f"glacier Ice{i}")):
                data.append(
                    {
                        "question": question,
                        "context": f"Reservoir {i} is fed by the river Calder{i}.",
                        "response": f"Reservoir {i} is fed by {source}, all year round.",
                        "grounded": grounded,
                    }
                )
        fit = fit_thresholds(data, encoder=encoder)
        switch = GroundingSwitch(fit.sgi_strong_pass, fit.sgi_review)
        stage = measure_batch(
            [(e["question"], (e["context"],), e["response"]) for e in data], encoder
        )
        library, whole = [], []
        for e, measured in zip(data, stage, strict=True):
            assert answer_core(e["response"], e["question"]) != e["response"]
            score = pipeline.compute_sgi(e["question"], e["context"], e["response"], encoder)
            assert score == measured.sgi  # the library's SGI is the stage's
            library.append(switch.decide(score).action)
            (seed,) = compute_sgi_batch([(e["question"], e["context"], e["response"])], encoder)
            whole.append(switch.decide(seed).action)

        def rates(actions: list[SwitchAction], action: SwitchAction, grounded: bool) -> float:
            picked = [a for a, e in zip(actions, data, strict=True) if e["grounded"] is grounded]
            return sum(a is action for a in picked) / len(picked)

        def in_sample(actions: list[SwitchAction]) -> list[float]:
            return [
                rates(actions, action, grounded)
                for action in (SwitchAction.ACCEPT, SwitchAction.FALLBACK)
                for grounded in (True, False)
            ]

        recorded = [
            fit.metrics[f"{kind}_rate_{label}_at_{cut}"]
            for kind, cut in (("accept", "strong_pass"), ("reject", "review"))
            for label in ("grounded", "ungrounded")
        ]
        assert in_sample(library) == pytest.approx(recorded, abs=1e-12)
        assert in_sample(whole) != pytest.approx(recorded, abs=1e-12)

    def test_flagged_results_are_left_out_and_counted(self) -> None:
        data = [
            *examples(),
            {"question": "q", "context": "c", "response": "ZERO", "grounded": True},
        ]
        fit = fit_thresholds(data, encoder=HashEncoder(), reference_direction=np.ones(16))
        assert fit.n_sgi == 8
        assert fit.metrics["n_flagged_sgi"] == 1

    def test_reference_not_loaded_without_dgi_examples(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        import pipeline.policy.defaults

        def fail() -> np.ndarray:
            raise AssertionError("default reference should not be loaded")

        monkeypatch.setattr(pipeline.policy.defaults, "default_reference", fail)
        data = [e for e in examples() if "context" in e]
        fit = fit_thresholds(data, encoder=HashEncoder())
        assert fit.metrics["dgi_default_kept"] is True

    def test_malformed_example_is_named(self) -> None:
        data = [*examples(), {"question": "q", "response": "", "grounded": True}]
        with pytest.raises(ScoringError, match="example 16: response"):
            fit_thresholds(data, encoder=HashEncoder(), reference_direction=np.ones(16))

    def test_label_must_be_bool(self) -> None:
        with pytest.raises(ScoringError, match="example 0: grounded"):
            fit_thresholds(
                [{"question": "q", "response": "r", "grounded": "yes"}],
                encoder=HashEncoder(),
                reference_direction=np.ones(16),
            )

    def test_no_examples_raise(self) -> None:
        with pytest.raises(ScoringError, match="no examples"):
            fit_thresholds([], encoder=HashEncoder(), reference_direction=np.ones(16))


class TestReferenceDirection:
    def test_hand_computed(self) -> None:
        q = np.array([[1.0, 0.0, 0.0], [1.0, 0.0, 0.0]])
        r = np.array([[0.0, 1.0, 0.0], [0.0, 0.0, 1.0]])
        mu = fit_reference_direction(q, r)
        np.testing.assert_allclose(mu, np.array([-2.0, 1.0, 1.0]) / np.sqrt(6.0))
        assert mu.dtype == np.float64

    def test_embeddings_are_normalised_before_the_displacement(self) -> None:
        q = np.array([[5.0, 0.0]])
        r = np.array([[0.0, 0.1]])
        np.testing.assert_allclose(fit_reference_direction(q, r), [-(2**-0.5), 2**-0.5])

    def test_zero_displacement_rows_are_skipped(self) -> None:
        q = np.array([[1.0, 0.0], [1.0, 0.0], [0.0, 0.0]])
        r = np.array([[1.0, 0.0], [0.0, 1.0], [0.0, 1.0]])
        np.testing.assert_allclose(fit_reference_direction(q, r), [-(2**-0.5), 2**-0.5])

    def test_agrees_with_dgi_geometry(self) -> None:
        # Fitted on one pair, μ̂ is that pair's displacement: its DGI is exactly 1.
        q = np.array([[3.0, 1.0, 0.0]])
        r = np.array([[0.0, 2.0, 1.0]])
        mu = fit_reference_direction(q, r)
        assert dgi_from_embeddings(q[0], r[0], mu).value == pytest.approx(1.0)

    def test_nothing_usable_raises(self) -> None:
        same = np.array([[1.0, 0.0], [0.0, 1.0]])
        with pytest.raises(ScoringError, match="no usable pair"):
            fit_reference_direction(same, same)

    def test_cancelling_displacements_raise(self) -> None:
        q = np.array([[1.0, 0.0], [0.0, 1.0]])
        r = np.array([[0.0, 1.0], [1.0, 0.0]])
        with pytest.raises(ScoringError, match="cancel"):
            fit_reference_direction(q, r)

    def test_shape_mismatch_raises(self) -> None:
        with pytest.raises(ScoringError, match="same shape"):
            fit_reference_direction(np.ones((2, 3)), np.ones((3, 3)))
