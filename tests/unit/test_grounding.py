"""The grounding model: its features, the logistic fit, the cuts and cross-validation."""

from __future__ import annotations

import numpy as np
import pytest

from pipeline.claims.head import LEXICAL_FEATURES, ClaimHead
from pipeline.claims.units import ClaimSupport, answer_core
from pipeline.errors import PolicyError, ScoringError
from pipeline.fit.grounding_model import accepted_by, fit_grounding, fit_logistic, regime_cuts
from pipeline.fit.metrics import auroc
from pipeline.scores.batch import score_batch
from pipeline.scores.grounding import (
    BASE_FEATURES,
    CLAIM_SUPPORT,
    FEATURES,
    LONG_FORM,
    GroundingModel,
    grounding_features,
    score_grounding,
)
from pipeline.scores.results import SGIResult

SOURCE = (
    "Porto lies on the Douro river. The old town climbs the northern bank. "
    "Trams cross the upper deck of the bridge. Wine lodges line the southern bank. "
    "Ferries stop running at midnight."
)


def sgi(value: float = 1.2, context_windows: int = 1, flagged: bool = False) -> SGIResult:
    return SGIResult(value, 1.0, 0.8, 0, 1, 1, context_windows, flagged, "x" if flagged else "")


def features(response: str, context_windows: int = 1) -> dict[str, float]:
    return grounding_features(
        "Tell me about Porto.", (SOURCE,), response, sgi(1.2, context_windows)
    )


class TestFeatures:
    def test_every_named_feature_and_nothing_else(self) -> None:
        assert tuple(features("Wine lodges line the southern bank.")) == FEATURES

    def test_one_sentence_from_one_window_is_short_form(self) -> None:
        f = features("Wine lodges line the southern bank.")
        assert f[LONG_FORM] == 0.0
        assert all(f[f"{name}:long"] == 0.0 for name in BASE_FEATURES)

    @pytest.mark.parametrize(
        ("response", "windows"),
        [("Wine lodges line the bank. Trams cross the bridge.", 1), ("Trams cross.", 3)],
    )
    def test_several_sentences_or_a_long_source_is_long_form(
        self, response: str, windows: int
    ) -> None:
        f = features(response, windows)
        assert f[LONG_FORM] == 1.0
        assert all(f[f"{name}:long"] == f[name] for name in BASE_FEATURES)

    def test_unsupported_words_are_counted_and_capped(self) -> None:
        assert features("Porto exports cork, sardines and granite.")["unsupported_words"] == 4
        many = "Porto exports cork, sardines, granite, textiles, shoes, azulejos and olives."
        assert features(many)["unsupported_words"] == 6

    def test_weak_shares_count_only_sentences_that_claim_something(self) -> None:
        # "Yes." claims nothing; the second sentence is supported word by word but its
        # words lie in distant source sentences; the third is unsupported.
        f = features("Yes. Porto ferries stop at midnight. Lisbon exports cork.")
        assert f["weak_sentence_share"] == pytest.approx(1 / 2)
        assert f["local_weak_share"] == pytest.approx(1 / 2)

    def test_claim_support_is_the_weakest_claims_score(self) -> None:
        claim = ClaimSupport(0.27, None, None, (), ())
        got = grounding_features("Tell me about Porto.", (SOURCE,), "Trams cross.", sgi(), claim)
        assert got[CLAIM_SUPPORT] == 0.27
        assert features("Trams cross.")[CLAIM_SUPPORT] == 0.0  # unmeasured is no support

    @pytest.mark.parametrize(
        ("question", "answer"),
        [
            ("Tell me about Porto.", "Based on the passage, trams cross the upper deck."),
            ("Tell me about Porto.", "According to the context, trams cross the upper deck."),
            ("What crosses the upper deck?", "The upper deck is crossed by trams."),
            ("What crosses the upper deck?", "It's trams."),
        ],
    )
    def test_features_read_the_answers_core_not_its_wrapper(self, question, answer) -> None:
        # What the features read is what the answer adds to the question: an assistant's
        # wrapper and the question restated are not part of it.
        core = answer_core(answer, question)
        assert "trams" in core.lower() and "passage" not in core and "context" not in core
        bare = "Trams cross the upper deck." if question.startswith("Tell") else "trams"
        assert features(core) == features(answer_core(bare, question))

    def test_local_weakness_is_not_plain_weakness(self) -> None:
        f = features("Douro ferries. Douro trams cross the bridge.")
        assert f["weak_sentence_share"] == 0.0  # every word is somewhere in the source
        assert f["local_weak_share"] == pytest.approx(1 / 2)  # but not Douro with ferries


def random_rows(rng: np.random.Generator, n: int) -> list[dict[str, float]]:
    return [dict(zip(FEATURES, rng.normal(size=len(FEATURES)), strict=True)) for _ in range(n)]


class TestFitLogistic:
    def test_recovers_known_coefficients(self) -> None:
        rng = np.random.default_rng(7)
        x = rng.normal(size=(20_000, 2))
        y = rng.random(20_000) < 1 / (1 + np.exp(-(0.5 + 2.0 * x[:, 0] - 1.0 * x[:, 1])))
        coefficients, intercept = fit_logistic(x, y, l2=0.0)
        assert coefficients == pytest.approx([2.0, -1.0], abs=0.08)
        assert intercept == pytest.approx(0.5, abs=0.08)

    def test_one_class_is_refused(self) -> None:
        with pytest.raises(ScoringError, match="both grounded and ungrounded"):
            fit_logistic(np.ones((4, 2)), np.ones(4, dtype=bool))

    def test_a_whole_weight_counts_as_that_many_copies_of_the_row(self) -> None:
        rng = np.random.default_rng(2)
        x = rng.normal(size=(300, 3))
        y = rng.random(300) < 1 / (1 + np.exp(-x[:, 0]))
        weights = rng.integers(1, 4, 300)
        weighted = fit_logistic(x, y, weights.astype(float))
        copied = fit_logistic(np.repeat(x, weights, axis=0), np.repeat(y, weights))
        np.testing.assert_allclose(weighted[0], copied[0], rtol=1e-6)
        assert weighted[1] == pytest.approx(copied[1], rel=1e-6)

    def test_the_penalty_does_not_depend_on_a_features_units(self) -> None:
        # Standardised inside: a feature in centimetres instead of metres gets a coefficient
        # a hundred times smaller and the same probabilities, under the same l2.
        rng = np.random.default_rng(8)
        x = rng.normal(size=(400, 2))
        y = rng.random(400) < 1 / (1 + np.exp(-(x[:, 0] - x[:, 1])))
        metres, intercept = fit_logistic(x, y, l2=5.0)
        centimetres, intercept_cm = fit_logistic(x * [100.0, 1.0], y, l2=5.0)
        assert centimetres[0] == pytest.approx(metres[0] / 100.0, rel=1e-6)
        assert centimetres[1] == pytest.approx(metres[1], rel=1e-6)
        assert intercept_cm == pytest.approx(intercept, rel=1e-6)

    def test_a_larger_penalty_shrinks_the_coefficients(self) -> None:
        rng = np.random.default_rng(9)
        x = rng.normal(size=(400, 2))
        y = rng.random(400) < 1 / (1 + np.exp(-2.0 * x[:, 0]))
        loose, _ = fit_logistic(x, y, l2=0.1)
        tight, _ = fit_logistic(x, y, l2=100.0)
        assert abs(tight[0]) < 0.7 * abs(loose[0])


class TestFitGrounding:
    @staticmethod
    def learnable(n: int, seed: int = 3) -> tuple[list[dict[str, float]], list[bool]]:
        rng = np.random.default_rng(seed)
        rows = random_rows(rng, n)
        labels = [r["content_coverage"] + 0.5 * rng.normal() > 0 for r in rows]
        return rows, labels

    def test_accept_cut_keeps_accepted_error_within_budget(self) -> None:
        rows, labels = self.learnable(600)
        fit = fit_grounding(rows, labels, ["a"] * 600, max_accept_error=0.05)
        p = np.array([fit.model.probability(r) for r in rows])
        long = np.array([r[LONG_FORM] > 0.5 for r in rows])  # each regime has its own cut
        accepted = p >= np.where(long, fit.accept_long, fit.accept)
        assert accepted.any()
        assert (~np.asarray(labels)[accepted]).mean() <= 0.05
        assert fit.review <= fit.accept
        assert fit.model.metrics["a.accept_error"] <= 0.05

    def test_each_file_weighs_the_same(self) -> None:
        # A large file where coverage predicts the label and a small one where it predicts
        # the opposite: with equal weights per file the coefficient nearly cancels out.
        rng = np.random.default_rng(5)
        big, small = random_rows(rng, 900), random_rows(rng, 100)
        labels = [r["content_coverage"] > 0 for r in big] + [
            r["content_coverage"] < 0 for r in small
        ]
        balanced = fit_grounding(big + small, labels, ["big"] * 900 + ["small"] * 100)
        index = FEATURES.index("content_coverage")
        pooled, _ = fit_logistic(
            np.array([[r[f] for f in FEATURES] for r in big + small]), np.array(labels)
        )
        assert abs(balanced.model.coefficients[index]) < 0.5 * abs(pooled[index])

    def test_cross_validation_is_honest_about_noise(self) -> None:
        # Labels unrelated to the features: in-sample the fit finds a pattern, out of fold
        # it is at chance.
        rng = np.random.default_rng(11)
        rows = random_rows(rng, 400)
        labels = list(rng.random(400) < 0.5)
        contexts = [f"doc-{i // 2}" for i in range(400)]
        fit = fit_grounding(rows, labels, ["f"] * 400, contexts=contexts, l2=0.01)
        m = fit.model.metrics
        assert m["auroc_in_sample"] > 0.6
        assert abs(m["f.cv_auroc"] - 0.5) < 0.1
        assert m["cv_folds"] == 5

    def test_cross_validation_tracks_a_real_signal(self) -> None:
        rows, labels = self.learnable(600)
        contexts = [f"doc-{i // 3}" for i in range(600)]
        m = fit_grounding(rows, labels, ["f"] * 600, contexts=contexts).model.metrics
        assert m["f.cv_auroc"] > 0.85
        assert 0.0 < m["f.cv_accept_rate_grounded"] <= 1.0
        assert m["f.cv_accept_error"] < 0.15

    def test_long_form_answers_can_have_their_own_accept_error_bound(self) -> None:
        # Short answers separate cleanly; long-form ones overlap. A looser long-form bound
        # lowers only the long-form accept cut, and that regime's accepts respect it.
        rng = np.random.default_rng(7)
        p = np.concatenate([rng.random(400), rng.random(400)])
        long = np.arange(800) >= 400
        y = np.where(long, rng.random(800) < p, p > 0.3)
        same = regime_cuts(p, y, long, 0.05)
        own = regime_cuts(p, y, long, 0.05, max_accept_error_long=0.15)
        assert own[0] == same[0]
        assert own[1][0] < same[1][0]
        accepted = long & accepted_by(p, long, own)
        assert 0.05 < (~y[accepted]).mean() <= 0.15

    def test_the_long_form_bound_is_recorded_and_defaults_to_the_short_one(self) -> None:
        rows, labels = self.learnable(200)
        assert fit_grounding(rows, labels, ["f"] * 200).model.metrics[
            "max_accept_error_long"
        ] == pytest.approx(0.05)
        fit = fit_grounding(rows, labels, ["f"] * 200, max_accept_error_long=0.08)
        assert fit.model.metrics["max_accept_error_long"] == pytest.approx(0.08)
        assert fit.model.metrics["max_accept_error"] == pytest.approx(0.05)

    @pytest.mark.parametrize("bound", [1.0, -0.01, True])
    def test_a_long_form_bound_outside_a_share_is_refused(self, bound) -> None:
        rows, labels = self.learnable(100)
        with pytest.raises(PolicyError, match="max_accept_error_long"):
            fit_grounding(rows, labels, ["f"] * 100, max_accept_error_long=bound)

    def test_without_contexts_there_are_no_cross_validated_figures(self) -> None:
        rows, labels = self.learnable(100)
        assert not any("cv_" in k for k in fit_grounding(rows, labels, ["f"] * 100).model.metrics)


class TestModel:
    def test_policy_of_an_older_feature_set_is_refused_by_name(self) -> None:
        with pytest.raises(PolicyError, match=r"grounding\.features"):
            GroundingModel.from_mapping(
                {"features": ["multi_window_source"], "coefficients": [1.0], "intercept": 0.0}
            )

    def test_round_trip_through_a_policy_table(self) -> None:
        model = GroundingModel(FEATURES, tuple(0.1 * i for i in range(len(FEATURES))), -0.3)
        again = GroundingModel.from_mapping(model.to_dict())
        assert again == model

    def test_flagged_sgi_scores_zero_and_stays_flagged(self) -> None:
        model = GroundingModel(FEATURES, (0.0,) * len(FEATURES), 10.0)
        score = score_grounding(model, "q", ("Porto",), "Porto", sgi(flagged=True))
        assert score.value == 0.0 and score.flagged

    def test_probability_follows_the_coefficients(self) -> None:
        coefficients = tuple(1.0 if f == "content_coverage" else 0.0 for f in FEATURES)
        model = GroundingModel(FEATURES, coefficients, 0.0)
        supported = score_grounding(model, "q", (SOURCE,), "Wine lodges line the bank.", sgi())
        unsupported = score_grounding(model, "q", (SOURCE,), "Lisbon exports cork.", sgi())
        assert supported.value == pytest.approx(1 / (1 + np.exp(-1.0)))
        assert unsupported.value == pytest.approx(0.5)
        assert auroc(np.array([supported.value, unsupported.value]), np.array([True, False])) == 1.0


class _HashEncoder:
    """Deterministic stand-in for the sentence encoder: a hash-seeded unit row per text."""

    def encode(self, texts):
        rows = []
        for text in texts:
            v = np.random.default_rng(sum(map(ord, text))).standard_normal(8)
            rows.append(v / np.linalg.norm(v))
        return np.asarray(rows).reshape(len(texts), 8)

    def windows(self, text: str) -> list[str]:
        return [text]


class TestClaimSupportInTheScore:
    """score_batch runs the claim head when the model reads claim support."""

    MODEL = GroundingModel(
        FEATURES, tuple(8.0 if f == CLAIM_SUPPORT else 0.0 for f in FEATURES), -4.0
    )

    def head(self):
        width = len(LEXICAL_FEATURES)
        w = np.zeros((width, 1), dtype=np.float32)
        w[LEXICAL_FEATURES.index("window_coverage"), 0] = 20.0
        return ClaimHead(
            np.zeros(width, np.float32), np.ones(width, np.float32), ((w, np.array([-10.0])),)
        )

    def test_the_unsupported_claim_is_named_and_lowers_the_probability(self) -> None:
        items = [
            ("Tell me about Porto.", (SOURCE,), "Trams cross the upper deck of the bridge."),
            ("Tell me about Porto.", (SOURCE,), "Trams cross the bridge. Buses climb to Braga."),
        ]
        good, bad = score_batch(items, _HashEncoder(), None, self.MODEL, None, self.head())
        assert good.value > 0.9 > 0.1 > bad.value
        assert bad.claim is not None and bad.claim.weakest is not None
        assert "Braga" in bad.claim.weakest.text

    def test_without_a_head_claim_support_counts_as_none(self) -> None:
        items = [("Tell me about Porto.", (SOURCE,), "Trams cross the upper deck of the bridge.")]
        (got,) = score_batch(items, _HashEncoder(), None, self.MODEL)
        assert got.features[CLAIM_SUPPORT] == 0.0 and got.claim is None
