"""The judge share (issue 31): the band of P(grounded) the judge is asked about, fitted for
a share the operator chooses, and how the ladder applies it; the judge's yes vetoed by the
geometry below `judge_veto_cut`; `calibrate --judge-share` and its frontier."""

from __future__ import annotations

import math
import tomllib
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import pipeline.encoding.encoder
from pipeline.bounds.thresholds import SCORE_EPSILON
from pipeline.errors import PolicyError
from pipeline.fit.grounding_model import L2, feature_matrix, fit_grounding
from pipeline.fit.judge_share import (
    BOUND_Z,
    FRONTIER_SHARES,
    Band,
    JudgeShare,
    every_answer,
    figures,
    fit_bands,
    fit_judge_share,
)
from pipeline.fit.metrics import wilson_interval
from pipeline.guards.provenance import SampleEvidence
from pipeline.judge.question import JudgeConfig, JudgeReadout, JudgeStatus
from pipeline.policy.document import parse_policy
from pipeline.policy.routing import RouteConfig
from pipeline.policy.sessions import SessionState
from pipeline.rungs.grounding_switch import SwitchAction
from pipeline.rungs.self_consistency import ConsistencyConfig
from pipeline.scores.grounding import FEATURES, LONG_FORM
from pipeline.scores.results import GroundingScore, SGIResult
from pipeline.stages import consistency as consistency_stage
from pipeline.stages import judge as judge_stage
from pipeline.stages import switch as switch_stage
from pipeline.trail.verdict import ASK_JUDGE, DEFER, HOLD
from tests.fixtures.fakes import HashEncoder
from topics.schema import Candidate
from workers.cli.__main__ import main
from workers.eval.calibration import judge_share_route, write_fit

LABELLED = Path(__file__).resolve().parents[1] / "fixtures" / "labelled.jsonl"
SHARES = (*FRONTIER_SHARES, 1.0)


def synthetic(n: int = 1500, seed: int = 0, near: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """P(grounded) that ranks like the real model (grounded higher, overlapping), inside
    (0.01, 0.99); with `near`, every tenth score has a twin closer than SCORE_EPSILON, so a
    cut between them would sit on float noise."""
    rng = np.random.default_rng(seed)
    y = rng.random(n) < 0.55
    p = 1.0 / (1.0 + np.exp(-rng.normal(np.where(y, 1.2, -0.2), 1.0)))
    p = np.clip(p, 0.01, 0.99)
    if near:
        p[1::10] = p[::10][: p[1::10].size] + SCORE_EPSILON / 3
    return p, y


def answers_in(codes_p: np.ndarray, band: Band) -> tuple[np.ndarray, np.ndarray]:
    """(accepted unjudged, asked) masks of scores under a band."""
    accepted = codes_p >= band.accept
    return accepted, (codes_p >= band.reject) & ~accepted


class TestFitBands:
    def test_a_hand_computed_band(self) -> None:
        # Accept only where state stays clean (0.8 and up: three right answers), then the
        # three answers just below it go to the always-right judge: 0.5 and 0.6 are right.
        # The search itself, on the point estimate (z=0); the margin is TestTheMargin's.
        p = np.array([0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95])
        y = np.array([0, 0, 1, 0, 1, 1, 0, 1, 1, 1], dtype=bool)
        band = fit_bands(p, y, [0.3], max_error=0.0, accuracy=1.0, z=0.0)[0.3]
        assert band.accept == pytest.approx(0.75) and band.reject == pytest.approx(0.45)
        assert band.veto is None
        f = figures(p, y, band, 1.0)
        assert (f.right, f.wrong, f.asked) == (5, 0, 3)
        # With one answer fewer to ask, only 0.6 of the band is worth asking.
        smaller = fit_bands(p, y, [0.2], max_error=0.0, accuracy=1.0, z=0.0)[0.2]
        assert (smaller.accept, smaller.reject) == (pytest.approx(0.75), pytest.approx(0.55))

    def test_a_judge_right_85_percent_of_the_time_counts_its_errors(self) -> None:
        p = np.array([0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95])
        y = np.array([0, 0, 1, 0, 1, 1, 0, 1, 1, 1], dtype=bool)
        f = figures(p, y, Band(0.75, 0.45), 0.85)
        assert f.right == pytest.approx(3 + 0.85 * 2)  # three unjudged, two right in the band
        assert f.wrong == pytest.approx(0.15 * 1)  # the band's wrong one, let through
        assert f.asked == 3 and f.to_person == 0
        assert f.wrong_share == pytest.approx(0.15 / 4.85)

    @pytest.mark.parametrize("accuracy", [1.0, 0.85])
    def test_the_share_and_the_bound_hold_and_more_share_never_loses(self, accuracy) -> None:
        p, y = synthetic()
        bands = fit_bands(p, y, SHARES, max_error=0.05, accuracy=accuracy)
        right = []
        for share, band in bands.items():
            f = figures(p, y, band, accuracy)
            assert f.asked <= share * p.size
            assert f.wrong <= 0.05 * (f.right + f.wrong) + 1e-9
            right.append(f.right)
        assert right == sorted(right)
        assert right[-1] > right[0]  # the judge is worth asking here

    def test_cuts_keep_epsilon_from_every_fitted_score(self) -> None:
        p, y = synthetic()
        for accuracy in (1.0, 0.85):
            for band in fit_bands(p, y, SHARES, 0.05, accuracy).values():
                for cut in (band.accept, band.reject):
                    if math.isfinite(cut):
                        assert np.abs(p - cut).min() >= SCORE_EPSILON

    def test_an_always_right_judge_beats_an_85_percent_one(self) -> None:
        p, y = synthetic(near=False)
        sure = fit_bands(p, y, SHARES, 0.05, 1.0)
        unsure = fit_bands(p, y, SHARES, 0.05, 0.85)
        for share in SHARES:
            r_sure = figures(p, y, sure[share], 1.0)
            r_unsure = figures(p, y, unsure[share], 0.85)
            assert r_unsure.right <= r_sure.right
        # Asked about enough answers, an always-right judge puts (nearly) every right
        # answer in state; an 85% one lets in wrong ones, so its band stops growing where
        # they would break the bound, well short of that.
        assert figures(p, y, sure[0.9], 1.0).right_share > 0.97
        assert figures(p, y, unsure[0.9], 0.85).right_share < 0.8
        assert figures(p, y, unsure[0.9], 0.85).asked < 0.9 * p.size

    def test_share_zero_is_the_accept_cut_alone(self) -> None:
        p, y = synthetic(near=False)
        band = fit_bands(p, y, [0.0], 0.05, 1.0)[0.0]
        assert figures(p, y, band, 1.0).asked == 0
        assert band.accept == band.reject

    def test_no_cut_meets_the_bound_so_nothing_reaches_state(self) -> None:
        p = np.array([0.2, 0.4, 0.6, 0.8])
        y = np.array([1, 1, 0, 0], dtype=bool)  # reversed: the top is wrong
        band = fit_bands(p, y, [0.0], 0.05, 0.85)[0.0]
        assert band.accept == math.inf
        assert figures(p, y, band, 0.85).right == 0 and figures(p, y, band, 0.85).asked == 0

    def test_every_answer_asked(self) -> None:
        y = np.array([1, 1, 0, 1], dtype=bool)
        f = every_answer(y, 0.85)
        assert f.asked == 4 and f.right == pytest.approx(3 * 0.85)
        assert f.wrong == pytest.approx(0.15)


class TestTheMargin:
    """The bound must hold at BOUND_Z standard errors, not just on the point estimate: the
    search picks the band that just meets it, whose point estimate is biased low."""

    def test_an_empty_state_meets_any_bound(self) -> None:
        # Every answer ungrounded: only the band that puts nothing in state (accept nothing,
        # ask nothing) meets a bound of 0, and the search finds it rather than failing on
        # the interval of an empty state, which is undefined.
        p = np.linspace(0.05, 0.95, 50)
        bands = fit_bands(p, np.zeros(50, dtype=bool), (0.0, 0.5), 0.0, 0.85)
        for band in bands.values():
            assert figures(p, np.zeros(50, dtype=bool), band, 0.85).wrong == 0.0
        assert bands[0.0].accept == math.inf

    def test_the_fitted_band_is_within_the_bound_at_z(self) -> None:
        p, y = synthetic()
        for accuracy in (1.0, 0.85):
            for band in fit_bands(p, y, SHARES, 0.05, accuracy, z=BOUND_Z).values():
                f = figures(p, y, band, accuracy)
                if f.right + f.wrong == 0:
                    continue  # an empty state is not wrong
                _, upper = wilson_interval(f.wrong, f.right + f.wrong, BOUND_Z)
                assert upper <= 0.05 + 1e-9

    def test_the_margin_keeps_the_bound_on_answers_the_fit_never_saw(self) -> None:
        # Fit on one sample, count on a large fresh one from the same distribution: on the
        # point estimate state's wrong share exceeds the bound about half the time (the
        # chosen band is the one whose sample happened to look cleanest); at BOUND_Z it is
        # much rarer (measured: 17 and 9 of 20).
        fresh_p, fresh_y = synthetic(20000, seed=99, near=False)
        over = {0.0: 0, BOUND_Z: 0}
        for seed in range(20):
            p, y = synthetic(600, seed=seed, near=False)
            for z in over:
                band = fit_bands(p, y, [0.5], 0.05, 0.85, z=z)[0.5]
                over[z] += figures(fresh_p, fresh_y, band, 0.85).wrong_share > 0.05
        assert over[0.0] >= 12
        assert over[BOUND_Z] <= over[0.0] - 6


class TestTheVeto:
    """A veto band [reject, veto) leaves state as the reject cut raised to the veto does,
    at more asks: the fit never sets one; a hand-set one is counted as going to a person."""

    @pytest.mark.parametrize("seed", range(5))
    def test_a_veto_never_beats_raising_the_reject_cut(self, seed) -> None:
        p, y = synthetic(600, seed, near=False)
        rng = np.random.default_rng(seed)
        for _ in range(50):
            reject, veto, accept = np.sort(rng.uniform(0.0, 1.0, 3))
            with_veto = figures(p, y, Band(accept, reject, veto), 0.85)
            raised = figures(p, y, Band(accept, veto), 0.85)
            assert with_veto.right == pytest.approx(raised.right)
            assert with_veto.wrong == pytest.approx(raised.wrong)
            assert with_veto.asked >= raised.asked
            vetoed = (p >= reject) & (p < veto)
            expected = 0.85 * (vetoed & y).sum() + 0.15 * (vetoed & ~y).sum()
            assert with_veto.to_person == pytest.approx(expected)

    def test_the_fit_leaves_the_veto_unset(self) -> None:
        p, y = synthetic()
        assert all(b.veto is None for b in fit_bands(p, y, SHARES, 0.05, 0.85).values())


def learnable_rows(n: int = 800, seed: int = 3) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Feature rows whose coverage predicts the label, half of them long-form."""
    rng = np.random.default_rng(seed)
    rows = [dict(zip(FEATURES, rng.normal(size=len(FEATURES)), strict=True)) for _ in range(n)]
    for i, row in enumerate(rows):
        row[LONG_FORM] = float(i % 2)
    y = np.array([r["content_coverage"] + 0.8 * rng.normal() > 0 for r in rows])
    return feature_matrix(rows), y, [f"doc-{i // 3}" for i in range(n)]


class TestFitJudgeShare:
    def fitted(self, share: float = 0.3, accuracy: float = 1.0):
        x, y, contexts = learnable_rows()
        groups = np.array(["a.jsonl", "b.jsonl"] * (len(y) // 2))
        rows = [dict(zip(FEATURES, r, strict=True)) for r in x]
        model = fit_grounding(rows, y, groups).model
        spec = JudgeShare(share, accuracy)
        fit = fit_judge_share(x, y, groups, model, spec, max_error=0.05, contexts=contexts)
        return fit, x, y, groups, model

    def test_the_frontier_per_file_and_over_all_ends_with_every_answer(self) -> None:
        fit, *_ = self.fitted(0.35)
        assert set(fit.frontier) == {"a.jsonl", "b.jsonl", "all"}
        assert [row.share for row in fit.frontier["all"]] == sorted({*FRONTIER_SHARES, 0.35})
        record = fit.to_dict()
        rows = record["frontier"]["a.jsonl"]
        assert rows[-1]["every_answer"] is True and rows[-1]["asked"] == 1.0
        assert {"right", "wrong", "asked", "cv_right", "cv_wrong", "cv_asked"} <= set(rows[0])
        assert record["judge_share"] == 0.35 and record["judge_accuracy"] == 1.0

    def test_each_regime_holds_the_share_and_the_bound_in_sample(self) -> None:
        fit, x, y, _, model = self.fitted(0.3)
        p = np.array([model.probability(dict(zip(FEATURES, r, strict=True))) for r in x])
        long = x[:, FEATURES.index(LONG_FORM)] > 0.5
        for mask, band in ((~long, fit.short), (long, fit.long)):
            f = figures(p[mask], y[mask], band, 1.0)
            assert f.asked <= 0.3 * mask.sum()
            assert f.wrong_share <= 0.05
        chosen = next(r for r in fit.frontier["all"] if r.share == 0.3)
        assert chosen.fitted.asked_share <= 0.3 and chosen.fitted.wrong_share <= 0.05
        assert chosen.cv is not None and 0.0 < chosen.cv.right_share <= 1.0
        assert fit.cuts["grounding_accept_long"] == fit.long.accept

    def test_with_the_judge_down_only_the_unjudged_accepts_reach_state(self) -> None:
        fit, x, y, _, model = self.fitted(0.3)
        p = np.array([model.probability(dict(zip(FEATURES, r, strict=True))) for r in x])
        long = x[:, FEATURES.index(LONG_FORM)] > 0.5
        down = fit.down["all"]
        short = figures(p[~long], y[~long], Band(fit.short.accept, fit.short.accept), 1.0)
        expected = short + figures(p[long], y[long], Band(fit.long.accept, fit.long.accept), 1.0)
        assert (down.fitted.right, down.fitted.wrong) == (expected.right, expected.wrong)
        assert down.fitted.asked == 0 and down.cv is not None
        assert fit.to_dict()["judge_down"]["a.jsonl"]["right"] <= 1.0

    def test_cross_validated_rows_need_contexts(self) -> None:
        fit, x, y, groups, model = self.fitted()
        plain = fit_judge_share(x, y, groups, model, JudgeShare(0.3), max_error=0.05)
        assert all(row.cv is None for row in plain.frontier["all"])
        assert plain.short == fit.short  # the bands are the in-sample fit's either way

    @pytest.mark.parametrize(("share", "accuracy"), [(-0.1, 1.0), (1.5, 1.0), (0.5, 0.2)])
    def test_a_bad_share_or_accuracy_is_named(self, share, accuracy) -> None:
        with pytest.raises(PolicyError, match="--judge-"):
            JudgeShare(share, accuracy)


# --- how the ladder applies a fitted band -------------------------------------------------

SHIPPED_ROUTE = {
    "mode": "evaluate",
    "on_reject": "fallback",
    "below_review_with_judge": "judge",  # as the shipped policy has it
    "judge_accept_cut": 0.9,
    "reader_accept_cut": 0.5,
}
MODEL = {"features": list(FEATURES), "coefficients": [0.0] * len(FEATURES), "intercept": 0.0}


def banded_policy(veto: float | None = None):
    """A policy whose default route carries a fitted band: accept 0.8, reject 0.4."""
    x, y, _ = learnable_rows(200)
    rows = [dict(zip(FEATURES, r, strict=True)) for r in x]
    groups = np.array(["f"] * len(y))
    fit = fit_judge_share(
        x, y, groups, fit_grounding(rows, y, groups).model, JudgeShare(0.3), max_error=0.05
    )
    fit = replace(fit, short=Band(0.8, 0.4, veto), long=Band(0.8, 0.4, veto))
    route = judge_share_route(dict(SHIPPED_ROUTE), fit, {"produced_by": "test"})
    policy = {
        "policy": {"version": "band-1"},
        "thresholds": {"grounding_accept": 0.7, "grounding_review": 0.5},
        "grounding": MODEL,
        "routes": {"default": route},
    }
    return parse_policy(policy), route


def switch_verdict(p: float, judge_available: bool = True, policy=None):
    """The switch's verdict on P(grounded) `p`, as the switch stage builds it: the route and
    cuts as decided with a judge where one is configured."""
    policy = policy or banded_policy()[0]
    route = policy.route("default")
    if judge_available:
        route = policy.judged_route(route)
    score = GroundingScore(p, SGIResult(1.1, 1.0, 0.8, 0, 1), {})
    candidate = Candidate(id="c1", session_id="s1", question="q?", response="r.")
    verdict, _ = switch_stage.decide(
        candidate,
        route,
        SessionState(),
        score,
        policy.switch(route, judge_available),
        policy.thresholds_dict("default", judge_available),
        policy.grounding_for("default"),
        judge_available,
    )
    return verdict


class TestTheBandOnTheLadder:
    def test_with_a_judge_the_route_takes_the_bands_cuts_and_asks_only_the_band(self) -> None:
        policy, table = banded_policy()
        route = policy.judged_route(policy.route("default"))
        assert route.below_review_with_judge == "on_reject"
        assert route.judge_accept_cut is None and route.reader_accept_cut is None
        assert policy.thresholds_for("default", judged=True).grounding_accept == 0.8
        assert policy.thresholds_for("default", judged=True).grounding_review_long == 0.4
        assert table["calibration"]["judge_band"]["judge_share"] == 0.3

    def test_without_a_judge_the_route_is_as_written(self) -> None:
        policy, table = banded_policy()
        assert policy.route("default") == RouteConfig.from_mapping(
            "default", {k: v for k, v in SHIPPED_ROUTE.items()}
        )
        assert policy.thresholds_for("default").grounding_accept == 0.7
        assert policy.thresholds_for("default").grounding_review == 0.5
        assert set(table["judge_band"]) == {
            "grounding_accept",
            "grounding_review",
            "grounding_accept_long",
            "grounding_review_long",
        }

    def test_without_a_judge_the_band_decides_nothing(self) -> None:
        """Every P(grounded) on a fine grid: the banded policy without a judge decides as
        the same policy with no band at all."""
        banded, table = banded_policy()
        plain = {k: v for k, v in table.items() if k not in ("judge_band", "calibration")}
        unbanded = parse_policy(
            {
                "policy": {"version": "plain"},
                "thresholds": {"grounding_accept": 0.7, "grounding_review": 0.5},
                "grounding": MODEL,
                "routes": {"default": plain},
            }
        )
        for p in np.linspace(0.0, 1.0, 201):
            a = switch_verdict(float(p), False, banded)
            b = switch_verdict(float(p), False, unbanded)
            assert (a.routing, a.reason, a.thresholds) == (b.routing, b.reason, b.thresholds)
        assert switch_verdict(0.75, False, banded).routing is SwitchAction.ACCEPT
        assert switch_verdict(0.75, True, banded).routing is SwitchAction.ESCALATE

    def test_above_the_accept_cut_state_without_the_judge(self) -> None:
        assert switch_verdict(0.85).routing is SwitchAction.ACCEPT  # shipped route: 0.9 asks

    def test_in_the_band_the_judge_is_asked(self) -> None:
        verdict = switch_verdict(0.6)
        assert verdict.routing is SwitchAction.ESCALATE  # up the ladder, to consistency
        # Consistency with no samples has nothing to commit on: it defers to the judge.
        passed = consistency_stage.decide(
            SampleEvidence((), 0, 0, 2), None, None, ConsistencyConfig(), nli=False
        )
        assert passed.routing == DEFER

    def test_below_the_reject_cut_on_reject_without_the_judge(self) -> None:
        verdict = switch_verdict(0.3)
        assert verdict.routing is SwitchAction.FALLBACK and verdict.routing != ASK_JUDGE

    def test_without_a_judge_the_band_escalates_as_any_review_zone(self) -> None:
        assert switch_verdict(0.6, judge_available=False).routing is SwitchAction.ESCALATE
        assert switch_verdict(0.3, judge_available=False).routing is SwitchAction.FALLBACK


def judged(p: float | None, route: RouteConfig):
    yes = JudgeReadout(JudgeStatus.OK, 0.97, 0.97, 0.03)
    scored = None if p is None else GroundingScore(p, SGIResult(1.1, 1.0, 0.8, 0, 1), {})
    return judge_stage.decide(yes, "", route, JudgeConfig(), scored, None)


class TestTheGroundingVeto:
    def test_a_yes_below_the_veto_cut_goes_to_a_person(self) -> None:
        route = RouteConfig(judge_veto_cut=0.5)
        verdict = judged(0.45, route)
        assert verdict.routing == HOLD and verdict.gate == "grounding_veto"
        assert "judge_veto_cut 0.500" in verdict.reason

    def test_a_yes_at_or_above_the_cut_stands(self) -> None:
        assert judged(0.5, RouteConfig(judge_veto_cut=0.5)).action == "accept"

    def test_no_cut_or_no_probability_leaves_the_yes(self) -> None:
        assert judged(0.05, RouteConfig()).action == "accept"
        assert judged(None, RouteConfig(judge_veto_cut=0.5)).action == "accept"

    def test_the_route_setting_is_validated_and_read(self) -> None:
        with pytest.raises(PolicyError, match="judge_veto_cut"):
            RouteConfig(judge_veto_cut=1.5)
        assert RouteConfig.from_mapping("r", {"judge_veto_cut": 0.2}).judge_veto_cut == 0.2

    def test_a_band_with_a_veto_writes_it_to_the_band(self) -> None:
        policy, table = banded_policy(veto=0.55)
        assert table["judge_band"]["judge_veto_cut"] == 0.55
        assert judged(0.5, policy.judged_route(policy.route("default"))).gate == "grounding_veto"
        # ... and with a band, a hand-set cut the band was not fitted with is not applied.
        _, cleared = banded_policy()
        assert "judge_veto_cut" not in cleared["judge_band"]
        with_cut = dict(SHIPPED_ROUTE, judge_veto_cut=0.9) | {"judge_band": cleared["judge_band"]}
        hand_set = parse_policy({"policy": {"version": "v"}, "routes": {"default": with_cut}})
        assert hand_set.judged_route(hand_set.route("default")).judge_veto_cut is None
        assert hand_set.route("default").judge_veto_cut == 0.9

    def test_a_bad_band_is_refused_naming_the_key(self) -> None:
        for band, key in (
            ({"grounding_accept": "high"}, "routes.default.judge_band.grounding_accept"),
            ({"judge_veto_cut": 1.5}, "routes.default.judge_band.judge_veto_cut"),
            ({"accept": 0.8}, "routes.default.judge_band.accept"),
        ):
            with pytest.raises(PolicyError, match=key.replace(".", r"\.")):
                parse_policy(
                    {"policy": {"version": "v"}, "routes": {"default": {"judge_band": band}}}
                )


# --- calibrate --judge-share ---------------------------------------------------------------


@pytest.fixture
def hashed(monkeypatch: pytest.MonkeyPatch) -> None:
    """calibrate's encoder: hashed vectors, no model to load."""
    monkeypatch.setattr(
        pipeline.encoding.encoder, "default_encoder", lambda *a, **k: HashEncoder(dim=16)
    )


def calibrate(out: Path, *options: str):
    args = ["calibrate", str(LABELLED), "--max-accept-error", "0.1", "--out", str(out), *options]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    return result.output


def without_run_facts(text: str) -> dict:
    """A written policy less what differs between two runs of one fit (time, version)."""
    policy = tomllib.loads(text)
    for key in ("version", "produced_by", "produced_at"):
        policy["policy"].pop(key)
    policy["calibration"].pop("seconds")
    return policy


class TestCalibrateCommand:
    def test_prints_the_frontier_with_every_answer_last(self, tmp_path, hashed) -> None:
        out = tmp_path / "p.toml"
        printed = calibrate(out, "--judge-share", "0.4", "--judge-accuracy", "0.85")
        assert "judge share 0.40 on route default: a judge right 85% of the time" in printed
        frontier = printed[printed.index("judge share 0.40") :]
        table = frontier[frontier.index("labelled.jsonl:") :].splitlines()
        assert "right→state" in table[1] and "asked" in table[1]
        rows = table[2 : 2 + len(FRONTIER_SHARES) + 1]
        assert [r.split()[0] for r in rows[:-1]] == [
            f"{s:.2f}" for s in sorted({*FRONTIER_SHARES, 0.4})
        ]
        assert "0.40 *" in printed
        assert rows[-1].lstrip().startswith("every answer")
        assert rows[-1].split()[2:5] == ["85.0%", "15.0%", "100.0%"]  # in-sample
        assert table[len(rows) + 2].lstrip().startswith("judge unavailable at 0.40")
        route = tomllib.loads(out.read_text())["routes"]["default"]
        assert route["calibration"]["judge_band"]["judge_accuracy"] == 0.85
        assert (
            route["calibration"]["judge_band"]["frontier"]["labelled.jsonl"][-1]["every_answer"]
            is True
        )
        # The band is its own section; the route's settings and cuts are as written.
        assert "thresholds" not in route and "below_review_with_judge" not in route
        assert set(route["judge_band"]) >= {
            "grounding_accept",
            "grounding_review",
            "grounding_accept_long",
            "grounding_review_long",
        }

    @pytest.mark.parametrize(
        ("options", "band_bound", "fit_bound"),
        [
            ((), 0.015, 0.05),  # always right: only geometry's accepts can be wrong
            (("--judge-accuracy", "0.85"), 0.05, 0.05),  # a third of its 15%
            (("--judge-accuracy", "0.7"), 0.1, 0.05),
            (("--max-accept-error", "0.03"), 0.03, 0.03),  # a bound given holds for both
        ],
    )
    def test_the_band_bound_defaults_to_a_third_of_the_judges_error(
        self, tmp_path, hashed, options, band_bound, fit_bound
    ) -> None:
        out = tmp_path / "p.toml"
        args = ["calibrate", str(LABELLED), "--out", str(out), "--judge-share", "0.4", *options]
        result = CliRunner().invoke(main, args)
        assert result.exit_code == 0, result.output
        policy = tomllib.loads(out.read_text())
        band = policy["routes"]["default"]["calibration"]["judge_band"]
        assert band["max_accept_error"] == pytest.approx(band_bound)
        assert band["max_accept_error_long"] == pytest.approx(band_bound)
        assert band["bound_z"] == BOUND_Z
        assert policy["calibration"]["max_accept_error"] == pytest.approx(fit_bound)
        assert f"at most {band_bound:.1%} of state wrong" in result.output
        assert f"at {BOUND_Z:g} standard errors" in result.output

    def test_without_judge_share_the_policy_is_as_before(self, tmp_path, hashed) -> None:
        plain, banded = tmp_path / "plain.toml", tmp_path / "banded.toml"
        printed = calibrate(plain)
        calibrate(banded, "--judge-share", "0.4")
        assert "every answer" not in printed and "judge share" not in printed
        assert "frontier" not in plain.read_text()
        a, b = without_run_facts(plain.read_text()), without_run_facts(banded.read_text())
        assert a["routes"]["default"] == {
            "mode": "evaluate",
            "on_reject": "fallback",
            "latch_escalation": False,
            "breaker_threshold": 5,
            "breaker_cooldown_seconds": 30.0,
        }
        b["routes"].pop("default"), a["routes"].pop("default")
        assert a == b  # the band touches its route only
        assert (
            tomllib.loads(plain.read_text())["policy"]["version"]
            != tomllib.loads(banded.read_text())["policy"]["version"]
        )

    def test_a_refit_without_judge_share_drops_the_stale_band(self, tmp_path, hashed) -> None:
        out = tmp_path / "p.toml"
        calibrate(out, "--judge-share", "0.4")
        calibrate(out)
        route = tomllib.loads(out.read_text())["routes"]["default"]
        assert "judge_band" not in route and "calibration" not in route

    def test_a_refit_from_verdicts_drops_the_stale_band_too(self, tmp_path, hashed) -> None:
        out = tmp_path / "p.toml"
        calibrate(out, "--judge-share", "0.4")
        policy = tomllib.loads(out.read_text())
        write_fit(out, None, {"thresholds": {}, "grounding": policy["grounding"]}, {"n": 6})
        route = tomllib.loads(out.read_text())["routes"]["default"]
        assert "judge_band" not in route and "calibration" not in route

    def test_band_only_adds_the_band_and_changes_nothing_else(self, tmp_path, hashed) -> None:
        """The shipped policy's band is fitted this way: a refit of the model on the same
        data may differ in its last digits, and then no decision record would be the same."""
        out = tmp_path / "p.toml"
        calibrate(out)
        before = tomllib.loads(out.read_text())
        printed = calibrate(out, "--judge-share", "0.4", "--judge-accuracy", "0.85", "--band-only")
        assert "wrote the judge band of route default" in printed
        assert "judge share 0.40 on route default: a judge right 85% of the time" in printed
        after = tomllib.loads(out.read_text())
        route = after["routes"]["default"]
        band = route.pop("judge_band")
        assert set(band) >= {"grounding_accept", "grounding_review"}
        record = route.pop("calibration")["judge_band"]
        assert record["fitted_on_version"] == before["policy"]["version"]
        assert record["judge_share"] == 0.4 and record["judge_accuracy"] == 0.85
        version, was = after["policy"].pop("version"), before["policy"].pop("version")
        assert version != was and version.startswith(was.split("+")[0] + "+")
        assert after == before  # every other number as it was
        policy = parse_policy(tomllib.loads(out.read_text()))
        assert policy.thresholds_for("default") == parse_policy(
            before | {"policy": {"version": was}}
        ).thresholds_for("default")

    def test_the_provenance_records_how_the_model_was_fitted(self, tmp_path, hashed) -> None:
        out = tmp_path / "p.toml"
        calibrate(out)
        calibrate(out, "--route", "qa")
        policy = tomllib.loads(out.read_text())
        for provenance in (policy["calibration"], policy["routes"]["qa"]["calibration"]):
            model = provenance["model"]
            assert model["estimator"] == "sklearn.linear_model.LogisticRegression"
            assert model["l2"] == L2 and model["C"] == 1.0 / L2
            assert "GroupKFold" in model["cv"] and model["cv_folds"] == 5

    def test_band_only_for_a_route_with_its_own_fit(self, tmp_path, hashed) -> None:
        out = tmp_path / "p.toml"
        calibrate(out)
        calibrate(out, "--route", "qa")
        fit = tomllib.loads(out.read_text())["routes"]["qa"]
        calibrate(out, "--route", "qa", "--judge-share", "0.3", "--band-only")
        route = tomllib.loads(out.read_text())["routes"]["qa"]
        assert route["thresholds"] == fit["thresholds"] and route["grounding"] == fit["grounding"]
        assert route["calibration"]["produced_by"] == fit["calibration"]["produced_by"]
        assert route["calibration"]["judge_band"]["judge_share"] == 0.3
        assert "judge_band" in route

    @pytest.mark.parametrize(
        ("options", "message"),
        [
            (["--band-only"], "give --judge-share"),
            (["--band-only", "--judge-share", "0.4", "--route", "nope"], "--route"),
        ],
    )
    def test_band_only_is_refused_in_one_line(self, tmp_path, hashed, options, message) -> None:
        out = tmp_path / "p.toml"
        calibrate(out)
        args = ["calibrate", str(LABELLED), "--out", str(out), *options]
        result = CliRunner().invoke(main, args)
        assert result.exit_code == 2 and message in result.output, result.output
        assert result.exception is None or isinstance(result.exception, SystemExit)

    def test_a_route_fit_with_judge_share(self, tmp_path, hashed) -> None:
        out = tmp_path / "p.toml"
        calibrate(out)
        printed = calibrate(out, "--route", "qa", "--judge-share", "0.2")
        assert "judge share 0.20 on route qa" in printed and "every answer" in printed
        route = tomllib.loads(out.read_text())["routes"]["qa"]
        assert route["calibration"]["judge_band"]["judge_share"] == 0.2 and "grounding" in route
        # The route's own cuts as its fit wrote them; the band beside them, for a judge.
        assert {"grounding_accept", "grounding_review"} <= set(route["thresholds"])
        assert {"grounding_accept", "grounding_review"} <= set(route["judge_band"])

    @pytest.mark.parametrize(
        ("options", "message"),
        [
            (["--judge-share", "1.5"], "--judge-share"),
            (["--judge-accuracy", "0.9"], "--judge-accuracy needs --judge-share"),
            (["--judge-share", "0.5", "--judge-accuracy", "0.1"], "--judge-accuracy"),
        ],
    )
    def test_bad_options_are_refused_before_encoding(self, tmp_path, options, message) -> None:
        def refuse(*a, **k):
            raise AssertionError("encoded")

        args = ["calibrate", str(LABELLED), "--out", str(tmp_path / "p.toml"), *options]
        with pytest.MonkeyPatch.context() as m:
            m.setattr(pipeline.encoding.encoder, "default_encoder", refuse)
            result = CliRunner().invoke(main, args)
        assert result.exit_code == 2 and message in result.output
