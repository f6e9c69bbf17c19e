"""The familiarity test: fitted on the calibration rows, its cut holds 95% of them familiar
out of fold and under the stored test itself, a row far from them is unfamiliar, and the
test survives the policy file."""

from __future__ import annotations

import tomllib

import numpy as np
import pytest
import tomli_w

from pipeline.bounds.thresholds import SCORE_EPSILON
from pipeline.errors import PolicyError, ScoringError
from pipeline.fit.familiarity_model import fit_familiarity, out_of_fold_distances
from pipeline.fit.grounding_model import fit_grounding
from pipeline.guards.familiarity import DIGITS, Familiarity, familiarity_vector, packed, rounded
from pipeline.policy.document import parse_policy
from pipeline.scores.grounding import FEATURES, GroundingModel

DIM = 40


def calibration(n: int = 600, seed: int = 0) -> tuple[np.ndarray, list[str]]:
    """`n` rows on a few directions of a DIM-dimensional space (topics), two rows a source."""
    rng = np.random.default_rng(seed)
    basis = rng.normal(size=(6, DIM))
    x = rng.normal(size=(n, 6)) @ basis + 0.05 * rng.normal(size=(n, DIM))
    return x, [f"source {i // 2}" for i in range(n)]


def fitted(share: float = 0.95) -> tuple[Familiarity, dict[str, float], np.ndarray, list[str]]:
    x, contexts = calibration()
    test, metrics = fit_familiarity(
        x, contexts, share=share, dimensions=8, groups=["a"] * 300 + ["b"] * 300
    )
    return test, metrics, x, contexts


class TestFit:
    def test_the_cut_holds_the_share_familiar_out_of_fold(self) -> None:
        test, metrics, x, contexts = fitted()
        oof = out_of_fold_distances(x, contexts, dimensions=8)
        assert (oof <= test.cut).mean() >= 0.95
        assert metrics["cv_familiar"] == pytest.approx((oof <= test.cut).mean())
        assert metrics["cv_familiar"] >= 0.95 and test.familiar == metrics["cv_familiar"]
        assert metrics["a.cv_familiar"] > 0.9 and metrics["b.cv_familiar"] > 0.9
        assert metrics["familiarity_cut"] == test.cut and test.share == 0.95

    def test_the_cut_holds_the_share_in_sample_too(self) -> None:
        """The stored test is the one fitted on every row, and the stage reads a training
        answer exactly as the fit did: its own rows count familiar at the share too."""
        test, metrics, x, _ = fitted()
        own = test.distances(x)
        assert (own <= test.cut).mean() >= 0.95
        assert metrics["familiar_in_sample"] == pytest.approx((own <= test.cut).mean())
        assert test.in_sample == metrics["familiar_in_sample"]
        assert metrics["a.familiar_in_sample"] > 0.9 and metrics["b.familiar_in_sample"] > 0.9

    def test_the_cut_is_the_lowest_that_holds_the_share(self) -> None:
        test, _, x, contexts = fitted()
        oof = np.sort(out_of_fold_distances(x, contexts, dimensions=8))
        own = np.sort(test.distances(x))
        k = int(np.ceil(0.95 * len(oof)))
        # one distance fewer inside, out of fold or in sample, would miss the share
        assert (oof <= oof[k - 2]).mean() < 0.95 and (own <= own[k - 2]).mean() < 0.95
        assert test.cut < max(oof[k], own[k])
        assert test.cut >= max(oof[k - 1], own[k - 1])

    def test_rows_the_components_were_fitted_to_are_familiar(self) -> None:
        """Issue 34's round trip: with few rows, a row far along a component fitted to it
        is farther in the test's units than any held-out row, so a cut from out-of-fold
        distances alone flagged training answers at run time. All 20 stay familiar."""
        # 20 rows of many dimensions, nearly orthogonal, as embeddings of distinct texts
        x = np.random.default_rng(0).normal(size=(20, 200))
        contexts = [f"source {i // 2}" for i in range(20)]
        test, metrics = fit_familiarity(x, contexts, dimensions=8)
        own = test.distances(x)
        oof = out_of_fold_distances(x, contexts, dimensions=len(test.components))
        assert own.max() > np.nanmax(oof)  # the case: in sample is not nearer here
        assert (own <= test.cut).all() and metrics["familiar_in_sample"] == 1.0

    def test_a_higher_share_gives_a_higher_cut(self) -> None:
        assert fitted(0.99)[0].cut > fitted(0.95)[0].cut

    def test_the_cut_keeps_epsilon_from_every_fitted_distance(self) -> None:
        test, _, x, contexts = fitted()
        distances = np.concatenate(
            [test.distances(x), out_of_fold_distances(x, contexts, dimensions=8)]
        )
        assert np.min(np.abs(distances - test.cut)) >= SCORE_EPSILON

    def test_stored_numbers_are_rounded_as_the_policy_keeps_them(self) -> None:
        test = fitted()[0]
        for value in (*test.mean, *test.components[0]):
            assert value == float(np.float32(value))  # float32, packed exactly
        for value in (*test.scales, test.residual):
            assert value == float(f"{value:.{DIGITS}g}")
        assert rounded(np.array([1.23456789])).tolist() == [1.23457]

    def test_few_rows_fit_fewer_components(self) -> None:
        x, contexts = calibration(20)
        test, metrics = fit_familiarity(x, contexts, dimensions=8)
        assert 1 <= len(test.components) <= 3 and metrics["cv_familiar"] >= 0.95
        with pytest.raises(ScoringError, match="more rows than 4"):
            fit_familiarity(x[:4], contexts[:4], dimensions=8)


class TestDistance:
    def test_calibration_like_rows_are_familiar_and_far_ones_are_not(self) -> None:
        test = fitted()[0]
        new, _ = calibration(200, seed=0)  # the same topics
        assert (test.distances(new) <= test.cut).mean() > 0.9
        far = np.random.default_rng(7).normal(size=(50, DIM)) * 3.0  # another topic
        assert (test.distances(far) > test.cut).all()

    def test_the_reason_names_the_distance_and_the_cut(self) -> None:
        test = fitted()[0]
        far = np.full(DIM, 5.0)
        reason = test.unfamiliar(far)
        assert reason.startswith("unfamiliar: distance ")
        assert f"{test.distance(far):.3f}" in reason and f"the cut {test.cut:.3f}" in reason
        assert test.unfamiliar(np.asarray(test.mean)) == ""

    def test_another_encoders_vector_is_unfamiliar(self) -> None:
        assert "another encoder" in fitted()[0].unfamiliar(np.zeros(DIM + 2))

    def test_the_vector_is_the_unit_answer_beside_the_unit_context(self) -> None:
        v = familiarity_vector(np.array([3.0, 4.0]), np.array([0.0, 2.0]))
        assert v.tolist() == [0.6, 0.8, 0.0, 1.0]
        assert familiarity_vector(np.zeros(2), np.array([1.0, 0.0])).tolist() == [0, 0, 1, 0]


class TestPolicy:
    def model(self) -> GroundingModel:
        return GroundingModel(FEATURES, (0.0,) * len(FEATURES), 1.0, {}, None, fitted()[0])

    def test_round_trip_through_the_policy_file(self) -> None:
        model = self.model()
        text = tomli_w.dumps({"grounding": model.to_dict()})
        policy = parse_policy(tomllib.loads(text))
        assert policy.grounding is not None
        assert policy.grounding.familiarity == model.familiarity
        x = calibration(20, seed=3)[0]
        assert (
            policy.grounding.familiarity.distances(x).tolist()
            == model.familiarity.distances(x).tolist()  # type: ignore[union-attr]
        )

    def test_the_mean_and_components_are_packed_float32(self) -> None:
        test = fitted()[0]
        table = test.to_dict()
        assert isinstance(table["mean"], str) and isinstance(table["components"], str)
        numbers = len(test.mean) * (1 + len(test.components))
        text = tomli_w.dumps(table)
        assert len(text) < numbers * 4 * 4 / 3 + 2_000  # base64 of 4 bytes a number
        assert Familiarity.from_mapping(table, "grounding.familiarity") == test

    def test_a_policy_that_lists_the_numbers_is_read_as_written(self) -> None:
        test = fitted()[0]
        listed = {
            **test.to_dict(),
            "mean": [v + 1e-9 for v in test.mean],  # a decimal float32 cannot hold
            "components": [list(c) for c in test.components],
        }
        read = Familiarity.from_mapping(listed, "grounding.familiarity")
        assert read.mean == tuple(v + 1e-9 for v in test.mean)
        assert read.components == test.components

    def test_bad_packed_numbers_name_the_field(self) -> None:
        table = fitted()[0].to_dict()
        where = "grounding.familiarity"
        with pytest.raises(PolicyError, match=r"grounding\.familiarity\.mean.*base64"):
            Familiarity.from_mapping({**table, "mean": "not base64!"}, where)
        with pytest.raises(PolicyError, match=r"grounding\.familiarity\.components.*rows of"):
            Familiarity.from_mapping({**table, "components": packed(np.ones(7))}, where)
        with pytest.raises(PolicyError, match=r"grounding\.familiarity\.mean.*finite"):
            Familiarity.from_mapping({**table, "mean": packed(np.array([np.nan] * 4))}, where)
        with pytest.raises(PolicyError, match=r"grounding\.familiarity\.mean.*float32"):
            Familiarity.from_mapping({**table, "mean": "AAAA"}, where)

    def test_a_policy_without_one_trusts_every_topic(self) -> None:
        table = self.model().to_dict()
        del table["familiarity"]
        assert GroundingModel.from_mapping(table).familiarity is None  # type: ignore[union-attr]

    def test_bad_tables_name_the_field(self) -> None:
        table = fitted()[0].to_dict()
        with pytest.raises(PolicyError, match=r"grounding\.familiarity\.colour"):
            Familiarity.from_mapping({**table, "colour": 1}, "grounding.familiarity")
        with pytest.raises(PolicyError, match=r"grounding\.familiarity\.scales"):
            Familiarity.from_mapping({**table, "scales": [1.0]}, "grounding.familiarity")
        with pytest.raises(PolicyError, match=r"grounding\.familiarity\.cut"):
            Familiarity.from_mapping({**table, "cut": -1.0}, "grounding.familiarity")
        with pytest.raises(PolicyError, match=r"grounding\.familiarity\.components"):
            Familiarity.from_mapping({**table, "components": [[1.0]]}, "grounding.familiarity")

    def test_fit_grounding_carries_a_familiarity_test_and_its_figures(self) -> None:
        rng = np.random.default_rng(1)
        n = 120
        labels = [bool(i % 2) for i in range(n)]
        rows = [
            {
                name: float(rng.normal() + (1.5 if y and j < 3 else 0.0))
                for j, name in enumerate(FEATURES)
            }
            for y in labels
        ]
        x, contexts = calibration(n)
        fit = fit_grounding(
            rows, labels, ["g"] * n, contexts=contexts, vectors=x, familiar_share=0.95
        )
        test = fit.model.familiarity
        assert test is not None and test.n == n and test.familiar >= 0.95
        assert test.in_sample >= 0.95 and (test.distances(x) <= test.cut).mean() >= 0.95
        assert fit.model.metrics["g.cv_familiar"] >= 0.95
        assert fit_grounding(rows, labels, ["g"] * n, contexts=contexts).model.familiarity is None
