"""calibrate's familiarity test at run time (issue 34), with the real encoder: `verify`
reads each training answer's familiarity vector exactly as the fit did, the policy counts
its own training answers familiar (the share `calibrate` prints), and an answer beyond
the cut is never accepted on geometry's word."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from pipeline.guards.familiarity import FAMILIAR_SHARE
from pipeline.policy.defaults import default_encoder
from pipeline.policy.document import load_policy
from pipeline.scores.batch import familiarity_vectors, measure_batch
from workers.eval.calibration import examples_from

from .harness import FIXTURES, cli, worker_env

DATA = FIXTURES / "labelled.jsonl"


def records(path: Path, stage: str) -> dict[str, dict]:
    out = {}
    for line in path.read_text().splitlines():
        record = json.loads(line)
        if record["stage"] == stage:
            out[record["candidate_id"]] = record
    return out


@pytest.fixture(scope="module")
def fitted(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, dict]:
    tmp = tmp_path_factory.mktemp("familiarity")
    policy_path = tmp / "policy.toml"
    env = worker_env("127.0.0.1:1", "unused.", tmp / "data")
    done = cli(env, "calibrate", str(DATA), "--max-accept-error", "0.1", "--out", str(policy_path))
    return policy_path, done.stdout, env


def test_calibrate_prints_the_share_familiar_out_of_fold_and_as_fitted(fitted) -> None:
    policy_path, stdout, _ = fitted
    test = load_policy(policy_path).grounding.familiarity  # type: ignore[union-attr]
    assert test is not None and test.n == 20
    assert test.familiar >= 0.95 and test.in_sample >= 0.95
    (line,) = [ln for ln in stdout.splitlines() if ln.startswith("familiarity: cut ")]
    assert f"cut {test.cut:.4f}" in line
    cv, own = (float(v) / 100 for v in re.findall(r"([\d.]+)% ", line.split(")", 1)[1]))
    assert cv == pytest.approx(test.familiar, abs=5e-4) and cv >= 0.95
    assert own == pytest.approx(test.in_sample, abs=5e-4) and own >= 0.95


def test_verify_reads_the_vector_the_fit_saw_and_counts_its_training_answers_familiar(
    fitted, tmp_path: Path
) -> None:
    policy_path, _, env = fitted
    out = tmp_path / "records.jsonl"
    cli(env, "verify", str(DATA), "--policy", str(policy_path), "--out", str(out))
    geometry = records(out, "geometry")
    assert len(geometry) == 20
    test = load_policy(policy_path).grounding.familiarity  # type: ignore[union-attr]
    assert test is not None
    # The distance the stage recorded is the distance of calibrate's own vector.
    examples = examples_from(DATA, None)
    encoder = default_encoder()
    measured = measure_batch([(e.question, e.context, e.response) for e in examples], encoder)
    vectors = familiarity_vectors(
        [(e.context, m.core) for e, m in zip(examples, measured, strict=True)], encoder
    )
    ids = [json.loads(line)["id"] for line in DATA.read_text().splitlines()]
    fit_distances = test.distances(np.array(vectors))
    for cid, distance in zip(ids, fit_distances, strict=True):
        reading = geometry[cid]["evidence"]["familiarity"]
        assert reading["distance"] == pytest.approx(distance, abs=1e-9), cid
        assert reading["cut"] == test.cut
    familiar = [r["evidence"]["familiarity"]["familiar"] for r in geometry.values()]
    assert sum(familiar) / len(familiar) >= FAMILIAR_SHARE  # at least 97% at run time
    assert sum(familiar) / len(familiar) == pytest.approx(test.in_sample)
    assert not any("unfamiliar" in r["reason"] for r in geometry.values())


def test_an_answer_beyond_the_cut_is_never_accepted_on_geometrys_word(
    fitted, tmp_path: Path
) -> None:
    """The fitted policy with its cut lowered by hand below half of the answers' distances
    (no text of this fixture is far from the others): the answers beyond it escalate, with
    the reason and the distance in the record; with no judge configured they end at the
    route's escalation, none in state."""
    policy_path, _, env = fitted
    before = tmp_path / "before.jsonl"
    cli(env, "verify", str(DATA), "--policy", str(policy_path), "--out", str(before))
    distances = {
        cid: r["evidence"]["familiarity"]["distance"]
        for cid, r in records(before, "geometry").items()
    }
    cut = float(np.median(list(distances.values())))
    text = policy_path.read_text()
    lowered = re.sub(r"(?m)^cut = .*$", f"cut = {cut!r}", text)
    assert lowered != text
    low = tmp_path / "low.toml"
    low.write_text(lowered)
    out = tmp_path / "after.jsonl"
    cli(env, "verify", str(DATA), "--policy", str(low), "--out", str(out))
    geometry, switch = records(out, "geometry"), records(out, "switch")
    outcome = records(out, "outcome")
    accepted_before = {
        cid for cid, r in records(before, "switch").items() if r["action"] == "accept"
    }
    far = {cid for cid, d in distances.items() if d > cut}
    assert far & accepted_before  # some answer geometry accepted lies beyond the new cut
    for cid in far:
        reading = geometry[cid]["evidence"]["familiarity"]
        assert reading == {"distance": distances[cid], "cut": cut, "familiar": False}
        assert geometry[cid]["evidence"]["out_of_range"].startswith(
            f"unfamiliar: distance {distances[cid]:.3f}"
        )
        assert switch[cid]["action"] == "escalate"
        assert "unfamiliar: distance" in switch[cid]["reason"]
        assert outcome[cid]["action"] != "accept" and not outcome[cid]["write_to_state"]
        assert "judge unavailable" in outcome[cid]["reason"]  # no judge: the escalation
    for cid in accepted_before - far:  # the familiar ones decide as before
        assert switch[cid]["action"] == "accept"
