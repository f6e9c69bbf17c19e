"""calibrate → policy file → verify and check() use the fitted cuts (real encoder)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.bounds.thresholds import SCORE_EPSILON
from pipeline.policy.document import load_policy
from pipeline.scores.check import check
from pipeline.scores.results import SGIResult
from topics.codec import loads

from .harness import FIXTURES, cli, worker_env


def test_calibrated_policy_is_used_by_verify_and_check(tmp_path: Path) -> None:
    policy_path = tmp_path / "policy.toml"
    env = worker_env("127.0.0.1:1", "unused.", tmp_path / "data")
    done = cli(
        env,
        "calibrate",
        str(FIXTURES / "labelled.jsonl"),
        "--reference",
        str(FIXTURES / "reference_pairs.csv"),
        "--max-accept-error",
        "0.1",
        "--max-accept-error-long",
        "0.2",
        "--out",
        str(policy_path),
    )
    policy = load_policy(policy_path)
    text = policy_path.read_text()
    assert "groundstream calibrate" in text  # the file says how it was produced
    # The per-file figures are printed in-sample and cross-validated (grouped by context).
    assert "labelled.jsonl: in-sample" in done.stdout
    assert "cross-validated" in done.stdout
    metrics = policy.grounding.metrics if policy.grounding else {}
    assert 0.0 <= metrics["labelled.jsonl.cv_accept_rate_grounded"] <= 1.0
    assert policy.reference is not None and len(policy.reference) == 384
    assert policy.grounding is not None
    assert policy.calibration["n"] == 20
    assert "labelled.jsonl" in policy.calibration["data"]
    # Long-form answers were fitted to their own bound, and the policy says so.
    assert policy.calibration["max_accept_error_long"] == 0.2
    assert metrics["max_accept_error_long"] == 0.2
    t = policy.thresholds
    assert t.sgi_review <= t.sgi_strong_pass and t.grounding_review <= t.grounding_accept

    # check() under the loaded policy agrees with the fitted cut exactly at the boundary.
    at_cut = SGIResult(t.sgi_strong_pass, 0.0, 0.0, 0, 1)
    assert check(at_cut, t).level.value == "ok"
    below = SGIResult(t.sgi_review - 1e-9, 0.0, 0.0, 0, 1)
    assert check(below, t).level.value == "risk"

    out = tmp_path / "records.jsonl"
    cli(
        env,
        "verify",
        str(FIXTURES / "labelled.jsonl"),
        "--policy",
        str(policy_path),
        "--out",
        str(out),
    )
    records = [loads(line) for line in out.read_bytes().splitlines()]
    switch = [r for r in records if r["stage"] == "switch"]
    assert len(switch) == 20
    assert {r["policy_version"] for r in records} == {policy.version}
    for r in switch:
        assert r["thresholds"]["grounding_accept"] == t.grounding_accept
        assert r["method"] == "grounding"
    # verify scores the training data exactly as calibrate did, so it accepts what the
    # fitted cut was chosen for: in-sample, at most --max-accept-error of the accepted
    # answers are hallucinated, and the shares match the ones calibrate recorded.
    accepted = {r["candidate_id"] for r in switch if r["action"] == "accept"}
    right_accepted = [cid for cid in accepted if cid.endswith("-right")]
    bad_accepted = [cid for cid in accepted if cid.endswith("-bad")]
    assert right_accepted
    assert len(bad_accepted) <= 0.1 * len(accepted)
    assert len(right_accepted) / 10 == pytest.approx(
        metrics["labelled.jsonl.accept_rate_grounded"], abs=1e-9
    )
    assert len(bad_accepted) / len(accepted) == pytest.approx(
        metrics["labelled.jsonl.accept_error"], abs=1e-9
    )


def closest_to_a_cut(report: str) -> float:
    """The margin `groundstream determinism` reports between a switch score and its cuts."""
    (line,) = [ln for ln in report.splitlines() if "closest switch score" in ln]
    return float(line.split(":")[1].split()[0])


def test_a_fitted_policy_decides_its_training_data_the_same_in_every_batch_and_backend(
    tmp_path: Path,
) -> None:
    """Issue 33: calibrate put a cut exactly on a training answer's score, and a 2e-7 move
    of that score with the batch flipped it. Fitted cuts now keep SCORE_EPSILON from every
    score they were fitted on, and the encoder's rows do not depend on the batch."""
    policy_path = tmp_path / "policy.toml"
    env = worker_env("127.0.0.1:1", "unused.", tmp_path / "data")
    data = str(FIXTURES / "labelled.jsonl")
    cli(env, "calibrate", data, "--max-accept-error", "0.1", "--out", str(policy_path))
    done = cli(env, "determinism", data, "--policy", str(policy_path), "--batch-sizes", "1,7,64")
    assert "same decision at every stage in every run: 20 of 20" in done.stdout, done.stdout
    assert "differing away from any cut: 0" in done.stdout
    assert "within a backend by 0.00e+00" in done.stdout  # bit-identical, not merely close
    assert "(torch@1, torch@7, torch@64, onnx@1, onnx@7, onnx@64)" in done.stdout
    assert closest_to_a_cut(done.stdout) >= SCORE_EPSILON


def test_the_library_switch_applies_calibrates_sgi_cuts_to_the_sgi_they_were_fitted_on(
    tmp_path: Path,
) -> None:
    """Issue 33 (one SGI): `calibrate` fits the policy's SGI cuts on SGI of the answer's
    core; `pipeline.compute_sgi` reads the same quantity, so the library's switch under the
    written policy decides every training answer as `calibrate` counted it in-sample. The
    seed's whole-response SGI under the same cuts does not."""
    from pipeline import compute_sgi
    from pipeline.claims.units import answer_core
    from pipeline.encoding.encoder import load_encoder
    from pipeline.rungs.grounding_switch import GroundingSwitch, SwitchAction
    from pipeline.scores.geometric import compute_sgi_batch
    from workers.eval.datasets import load_labelled

    policy_path = tmp_path / "policy.toml"
    env = worker_env("127.0.0.1:1", "unused.", tmp_path / "data")
    data = FIXTURES / "labelled.jsonl"
    cli(env, "calibrate", str(data), "--max-accept-error", "0.1", "--out", str(policy_path))
    policy = load_policy(policy_path)
    t, fit = policy.thresholds, policy.calibration["fit"]
    switch = GroundingSwitch(t.sgi_strong_pass, t.sgi_review)
    encoder = load_encoder(policy.encoder_model)

    items = load_labelled(data)
    assert any(
        answer_core(i.candidate["response"], i.candidate["question"]) != i.candidate["response"]
        for i in items
    )
    core, whole = [], []
    for item in items:
        c = item.candidate
        core.append(switch.decide(compute_sgi(c["question"], c["context"], c["response"], encoder)))
        (seed,) = compute_sgi_batch([(c["question"], c["context"], c["response"])], encoder)
        whole.append(switch.decide(seed))

    def rate(decisions: list, action: SwitchAction, grounded: bool) -> float:
        picked = [d for d, i in zip(decisions, items, strict=True) if i.grounded is grounded]
        return sum(d.action is action for d in picked) / len(picked)

    def in_sample(decisions: list) -> dict[str, float]:
        return {
            f"{kind}_rate_{label}_at_{cut}": rate(decisions, action, label == "grounded")
            for kind, cut, action in (
                ("accept", "strong_pass", SwitchAction.ACCEPT),
                ("reject", "review", SwitchAction.FALLBACK),
            )
            for label in ("grounded", "ungrounded")
        }

    recorded = {key: fit[key] for key in in_sample(core)}
    assert in_sample(core) == pytest.approx(recorded, abs=1e-12)
    assert in_sample(whole) != pytest.approx(recorded, abs=1e-12)
