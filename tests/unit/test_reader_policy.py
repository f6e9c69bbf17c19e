"""A policy knows the reader it was fitted with (issue 32), end to end: a tiny BERT pair
classifier built here from a config → `groundstream reader export` → `calibrate --reader`
(the fit with and without the reader printed side by side, the reader's identity written
into the policy) → `verify` with it (the records name it and carry its per-claim scores);
the same policy without it, or with another reader, is refused at start-up in one line
naming GROUNDSTREAM_READER; a reader a policy gives no weight is not run, and said so.

A reader keeps its weight only when the cross-validated figures say it helps
(`workers.eval.reader_figures.reader_verdict`). The random reader does not: `calibrate
--reader` gives it no say — weight exactly 0, the reader and both fits recorded — and
`verify` runs without it. The policy that does weigh it is fitted on the labelled fixture
with three sources' labels swapped (which the head cannot see) while the reader's scores
carry those labels (the reader call replaced in-process; the policy still names the
exported reader, whose directory `verify` then serves)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from pipeline.claims.readers import META_FILE, reader_identity
from pipeline.policy.document import load_policy
from pipeline.scores.grounding import (
    CLAIM_READER,
    FEATURES,
    GroundingModel,
    reads_claims,
    served_reader_problem,
)
from workers.runtime.settings import Settings, SettingsError

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from tests.unit.test_readers import NLI, checkpoint  # noqa: E402  (needs torch)

ROOT = Path(__file__).resolve().parents[2]
LABELLED = ROOT / "tests" / "fixtures" / "labelled.jsonl"


def groundstream(*args: str, **settings: str) -> subprocess.CompletedProcess:
    """A command as a user runs it: a fresh interpreter, no GROUNDSTREAM_* of this shell
    but `settings` (GROUNDSTREAM_POLICY=...)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GROUNDSTREAM_")}
    return subprocess.run(
        [sys.executable, "-m", "workers.cli", *args],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
        env={**env, **settings, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip


SWAPPED = ("lab-0", "lab-1", "lab-2")
"""The sources whose right and hallucinated answers swap labels in the data the weighing
policy is fitted on."""


def swapped_data(directory: Path) -> tuple[Path, dict[str, bool]]:
    """The labelled fixture with `SWAPPED`'s labels swapped (same file name), and each
    response's label in it (True: right)."""
    directory.mkdir()
    rows = [json.loads(line) for line in LABELLED.read_text().splitlines()]
    for row in rows:
        if row["session_id"] in SWAPPED:
            right = row["metadata"]["label"] == "right"
            row["metadata"]["label"] = "hallucinated" if right else "right"
    data = directory / LABELLED.name
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return data, {row["response"].lower(): row["metadata"]["label"] == "right" for row in rows}


def label_reader(labels: dict[str, bool]):
    """A pair reader whose P(supported) of a claim is its answer's label."""
    import numpy as np

    def read(pairs):
        return np.array(
            [
                float(any(claim.lower() in text and right for text, right in labels.items()))
                for claim, _ in pairs
            ]
        )

    return read


@pytest.fixture(scope="module")
def fitted(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The reader exported by the CLI, another one, and the policy fitted with the first,
    on the swapped data with the label-carrying scores: the reader is given its weight."""
    from click.testing import CliRunner

    from pipeline.claims.readers import ReaderKind
    from pipeline.policy.defaults import default_claim_reader
    from workers.cli import main
    from workers.eval import calibration
    from workers.eval.reader_export import export_reader

    root = tmp_path_factory.mktemp("reader-policy")
    hf_dir, _ = checkpoint(root, "bert", ReaderKind.PAIR, NLI, seed=0)
    reader = root / "reader"
    exported = groundstream("reader", "export", str(hf_dir), "--out", str(reader))
    assert exported.returncode == 0, exported.stderr[-2000:]
    other_hf, _ = checkpoint(root, "bert", ReaderKind.PAIR, NLI, seed=1)
    other = root / "other"
    export_reader(other_hf, other)
    policy = root / "policy.toml"
    data, labels = swapped_data(root / "swapped")
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv("GROUNDSTREAM_READER", raising=False)  # restored: calibrate sets it
        patch.setattr(calibration, "default_claim_reader", lambda: label_reader(labels))
        calibrated = CliRunner().invoke(
            main,
            [
                *("calibrate", str(data), "--max-accept-error", "0.1", "--judge-share", "0.4"),
                *("--reader", str(reader), "--out", str(policy)),
            ],
        )
    default_claim_reader.cache_clear()
    assert calibrated.exit_code == 0, calibrated.output[-2000:]
    return {
        "reader": reader,
        "other": other,
        "policy": policy,
        "printed": calibrated.output,
        "root": root,
        "data": data,
    }


@pytest.fixture(scope="module")
def unhelpful(fitted) -> dict:
    """`calibrate --reader` with the random reader on the labelled fixture, as a user runs it."""
    policy = fitted["root"] / "unhelpful.toml"
    done = groundstream(
        *("calibrate", str(LABELLED), "--max-accept-error", "0.1", "--judge-share", "0.4"),
        *("--reader", str(fitted["reader"]), "--out", str(policy)),
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return {"policy": policy, "printed": done.stdout}


def test_the_verdict_asks_a_clear_gain_in_cross_validated_auroc_and_no_fewer_accepted() -> None:
    from workers.eval.reader_figures import READER_MIN_AUROC_GAIN, reader_verdict

    def figures(auc: float, rate: float, other: float = 0.9) -> dict[str, float]:
        return {
            "a.jsonl.cv_auroc": auc,
            "a.jsonl.cv_accept_rate_grounded": rate,
            "b.jsonl.cv_auroc": other,
            "b.jsonl.cv_accept_rate_grounded": rate,
        }

    base = figures(0.80, 0.50)
    # Each file counts once: +0.010 on one of two files is +0.005 on the mean.
    assert reader_verdict(figures(0.81, 0.50), base)[0]
    assert not reader_verdict(figures(0.81 - 2e-3, 0.50), base)[0]
    assert not reader_verdict(figures(0.95, 0.49), base)[0]  # fewer grounded answers accepted
    assert not reader_verdict(base, base)[0]
    kept, line = reader_verdict(figures(0.90, 0.60), base)
    assert kept and "0.900 with it, 0.850 without" in line and "60.0% with it, 50.0%" in line
    _, why = reader_verdict(base, base)
    assert f"less than +{READER_MIN_AUROC_GAIN}" in why
    assert not reader_verdict({}, {})[0]  # no cross-validated figures: no say


def test_a_reader_that_does_not_help_gets_no_weight_and_is_not_asked_for(
    fitted, unhelpful, tmp_path
) -> None:
    """The random reader adds nothing the fit without it lacks: the policy is the fit
    without it (its weights exactly 0), still names it with both fits' figures and the
    verdict, says so in one line, and `verify` starts without it."""
    from workers.eval.reader_figures import reader_verdict

    grounding = tomllib.loads(unhelpful["policy"].read_text())["grounding"]
    weights = dict(zip(grounding["features"], grounding["coefficients"], strict=True))
    assert weights[CLAIM_READER] == 0.0 and weights[f"{CLAIM_READER}:long"] == 0.0
    record = grounding["reader"]
    identity = reader_identity(fitted["reader"])
    assert {k: record[k] for k in identity} == identity and record["weighed"] is False
    with_it, without = record["with"]["metrics"], record["without"]["metrics"]
    assert reader_verdict(with_it, without) == (False, record["verdict"])
    assert record["with"]["weights"][CLAIM_READER] != 0.0  # the fit with it did weigh it
    assert without == {k: grounding["metrics"][k] for k in without}  # the policy is that fit
    printed = unhelpful["printed"]
    (line,) = [x for x in printed.splitlines() if "measured and given no say" in x]
    assert identity["name"] in line and record["verdict"] in line
    assert f"with reader {identity['name']} | without it, cross-validated" in printed
    assert f"with reader {identity['name']} (given no say):" in printed
    model = load_policy(unhelpful["policy"]).grounding
    assert model is not None and not reads_claims(model, CLAIM_READER)
    out = tmp_path / "records.jsonl"
    done = groundstream(
        "verify", str(LABELLED), "--policy", str(unhelpful["policy"]), "--out", str(out)
    )
    assert done.returncode == 0, done.stderr[-2000:]
    records = [json.loads(x) for x in out.read_text().splitlines()]
    assert records and all("reader" not in r.get("evidence", {}) for r in records)
    served = Settings.from_env(
        {
            "GROUNDSTREAM_POLICY": str(unhelpful["policy"]),
            "GROUNDSTREAM_READER": str(fitted["reader"]),
        }
    )
    note = served.reader_note(served.load_policy())
    assert note is not None and "no say" in note and record["verdict"] in note


def test_the_policy_names_the_reader_it_was_fitted_with(fitted) -> None:
    identity = reader_identity(fitted["reader"])
    table = tomllib.loads(fitted["policy"].read_text())["grounding"]["reader"]
    assert {k: table[k] for k in ("name", "kind", "digest", "files")} == identity
    meta = json.loads((fitted["reader"] / META_FILE).read_text())
    assert identity["kind"] == "pair" and identity["files"] == meta["files"]
    model = load_policy(fitted["policy"]).grounding
    assert model is not None and reads_claims(model, CLAIM_READER)
    assert model.reader is not None and model.reader["digest"] == identity["digest"]


def test_calibrate_prints_the_fit_with_and_without_the_reader_side_by_side(fitted) -> None:
    printed, name = fitted["printed"], reader_identity(fitted["reader"])["name"]
    table = printed[printed.index(f"with reader {name} | without it, cross-validated") :]
    lines = table.splitlines()
    assert "(folds grouped by source)" in lines[0]
    heads = ["AUROC", "grounded", "acc.", "acc.", "wrong"]
    assert lines[1].split() == ["data", *heads, "|", *heads]
    row = lines[2].split()
    assert row[0] == "labelled.jsonl" and row[4] == "|" and len(row) == 8
    record = tomllib.loads(fitted["policy"].read_text())["grounding"]["reader"]
    assert record["weighed"] is True and float(row[1]) >= float(row[5]) + 0.005
    assert f"reader {name} given its weight: {record['verdict']}" in printed
    without = tomllib.loads(fitted["policy"].read_text())["grounding"]["reader"]["without"]
    cv = without["metrics"]["labelled.jsonl.cv_accept_rate_grounded"]
    assert row[6] == f"{cv:.1%}"  # the right-hand side is the fit without the reader
    # The judge-share frontier was fitted in the same run: shown for both.
    assert printed.count("judge share 0.40 on route default") == 2
    assert f"without reader {name}:" in printed
    assert without["judge_share"]["judge_share"] == 0.4
    assert without["judge_share"]["frontier"]["labelled.jsonl"][-1]["every_answer"] is True


def test_the_without_side_is_the_fit_calibrate_makes_with_no_reader(fitted, monkeypatch) -> None:
    """The figures printed and recorded without the reader are those of `calibrate` run
    without --reader on the same data: its feature reads 0 and the fit gives it no weight."""
    from click.testing import CliRunner

    from pipeline.policy.defaults import default_claim_reader
    from workers.cli import main

    plain_file = fitted["root"] / "plain.toml"
    monkeypatch.delenv("GROUNDSTREAM_READER", raising=False)
    default_claim_reader.cache_clear()
    done = CliRunner().invoke(
        main,
        [
            *("calibrate", str(fitted["data"]), "--max-accept-error", "0.1"),
            *("--judge-share", "0.4"),
            *("--out", str(plain_file)),
        ],
    )
    default_claim_reader.cache_clear()
    assert done.exit_code == 0, done.output[-2000:]
    assert "with reader" not in done.output and "without reader" not in done.output
    plain = tomllib.loads(plain_file.read_text())
    assert "reader" not in plain["grounding"]
    grounding = plain["grounding"]
    weights = dict(zip(grounding["features"], grounding["coefficients"], strict=True))
    assert weights[CLAIM_READER] == 0.0 and weights[f"{CLAIM_READER}:long"] == 0.0
    without = tomllib.loads(fitted["policy"].read_text())["grounding"]["reader"]["without"]
    assert without["metrics"] == {k: plain["grounding"]["metrics"][k] for k in without["metrics"]}
    assert without["thresholds"] == {k: plain["thresholds"][k] for k in without["thresholds"]}
    frontier = plain["routes"]["default"]["calibration"]["judge_band"]["frontier"]
    assert without["judge_share"]["frontier"] == frontier


@pytest.fixture(scope="module")
def verified(fitted) -> list[dict]:
    """The records of `verify --policy P --reader DIR` on the labelled fixture."""
    out = fitted["root"] / "records.jsonl"
    done = groundstream(
        *("verify", str(LABELLED), "--policy", str(fitted["policy"])),
        *("--reader", str(fitted["reader"]), "--out", str(out)),
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "no weight" not in done.stderr
    return [json.loads(line) for line in out.read_text().splitlines()]


def test_verify_with_the_reader_records_its_name_and_every_claims_score(fitted, verified) -> None:
    scored = [r for r in verified if r["stage"] == "geometry"]
    assert len(scored) == 20
    name = reader_identity(fitted["reader"])["name"]
    for record in scored:
        reader = record["evidence"]["reader"]
        assert reader["name"] == name
        assert reader["claims"] and all(0.0 <= c["support"] <= 1.0 for c in reader["claims"])
        response = next(
            json.loads(line)["response"]
            for line in LABELLED.read_text().splitlines()
            if json.loads(line)["id"] == record["candidate_id"]
        )
        first = reader["claims"][0]
        spanned = response[first["span"][0] : first["span"][1]]
        assert spanned.lower() == first["text"].lower()  # a claim's first letter is capitalised
        assert record["evidence"]["features"][CLAIM_READER] == pytest.approx(
            min(c["support"] for c in reader["claims"])
        )


def test_eval_reports_the_readers_auroc_beside_the_heads(fitted, verified) -> None:
    """`eval --reader`: the reader's answer-level AUROC is that of the weakest-claim scores
    the records carry, against the labels; the head's is printed beside it."""
    import re

    from click.testing import CliRunner

    from pipeline.fit.metrics import auroc
    from workers.cli import main

    done = CliRunner().invoke(
        main,
        [
            "eval",
            str(LABELLED),
            "--policy",
            str(fitted["policy"]),
            "--reader",
            str(fitted["reader"]),
        ],
    )
    assert done.exit_code == 0, done.output[-2000:]
    name = reader_identity(fitted["reader"])["name"]
    found = re.search(
        rf"reader {re.escape(name)}: answers \(n=20\) AUROC head (\S+), reader (\S+); "
        r"claims \(n=(\d+)\) head (\S+), reader (\S+)",
        done.output,
    )
    assert found is not None, done.output
    labels = {
        json.loads(line)["id"]: json.loads(line)["metadata"]["label"] == "right"
        for line in LABELLED.read_text().splitlines()
    }
    scored = [r for r in verified if r["stage"] == "geometry"]
    weakest = [min(c["support"] for c in r["evidence"]["reader"]["claims"]) for r in scored]
    expected = auroc(weakest, [labels[r["candidate_id"]] for r in scored])
    assert found.group(2) == f"{expected:.3f}"
    assert 0.0 <= float(found.group(1)) <= 1.0 and int(found.group(3)) >= 20


def test_the_policy_refuses_to_start_without_its_reader_in_one_line(fitted) -> None:
    done = groundstream("verify", str(LABELLED), "--policy", str(fitted["policy"]))
    assert done.returncode == 2 and "Traceback" not in done.stderr
    (line,) = done.stderr.strip().splitlines()
    name = reader_identity(fitted["reader"])["name"]
    assert "GROUNDSTREAM_READER" in line and "--reader" in line and name in line
    with pytest.raises(SettingsError, match="GROUNDSTREAM_READER=\\(unset\\)"):
        Settings.from_env({"GROUNDSTREAM_POLICY": str(fitted["policy"])}).load_policy()
    # `check` and the library's score_candidate refuse it the same way.
    done = groundstream(
        *("check", "-q", "Q?", "-c", "A source.", "-r", "An answer."),
        GROUNDSTREAM_POLICY=str(fitted["policy"]),
    )
    assert done.returncode == 2 and "Traceback" not in done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert "GROUNDSTREAM_READER=(unset)" in line and name in line


def test_another_reader_is_refused_by_its_digest(fitted) -> None:
    env = {"GROUNDSTREAM_POLICY": str(fitted["policy"]), "GROUNDSTREAM_READER": ""}
    with pytest.raises(SettingsError) as caught:
        Settings.from_env({**env, "GROUNDSTREAM_READER": str(fitted["other"])}).load_policy()
    message = str(caught.value)
    assert "\n" not in message and "not with the reader served" in message
    assert reader_identity(fitted["other"])["name"] in message
    served = Settings.from_env({**env, "GROUNDSTREAM_READER": str(fitted["reader"])})
    assert served.load_policy().grounding is not None


def test_a_reader_json_edited_after_the_fit_is_another_reader(fitted, tmp_path) -> None:
    """Its files' hashes still match, so the directory loads; but it no longer reads as the
    fit's reader did (here: a shorter maximum length), and the digest says so."""
    import shutil

    edited = tmp_path / "edited"
    shutil.copytree(fitted["reader"], edited)
    meta = json.loads((edited / META_FILE).read_text())
    meta["max_tokens"] = 64
    (edited / META_FILE).write_text(json.dumps(meta))
    assert reader_identity(edited)["files"] == reader_identity(fitted["reader"])["files"]
    with pytest.raises(SettingsError, match="not with the reader served"):
        Settings.from_env(
            {"GROUNDSTREAM_POLICY": str(fitted["policy"]), "GROUNDSTREAM_READER": str(edited)}
        ).load_policy()


def test_a_reader_the_policy_gives_no_weight_is_not_run_and_said_so(fitted) -> None:
    settings = Settings.from_env({"GROUNDSTREAM_READER": str(fitted["reader"])})
    shipped = settings.load_policy()  # fitted without a reader: no weight, nothing refused
    note = settings.reader_note(shipped)
    assert note is not None and "no weight" in note and "\n" not in note
    assert settings.reader_note(load_policy(fitted["policy"])) is None


def test_a_policy_fitted_before_readers_were_named_needs_some_reader(fitted) -> None:
    weighing = GroundingModel(FEATURES, tuple(float(f == CLAIM_READER) for f in FEATURES), 0.0)
    assert "gives it weight" in str(served_reader_problem([("m", weighing)], None))
    assert served_reader_problem([("m", weighing)], fitted["reader"]) is None
    unweighed = GroundingModel(FEATURES, (0.0,) * len(FEATURES), 0.0, reader={"digest": "x"})
    assert served_reader_problem([("m", unweighed)], None) is None


def test_a_worker_refuses_to_start_without_the_reader_and_logs_one_it_will_not_run(
    fitted, caplog
) -> None:
    import logging

    from workers.runtime.runner import build_loop

    with pytest.raises(SettingsError, match="GROUNDSTREAM_READER"):
        build_loop("switch", Settings(policy=str(fitted["policy"])))
    shipped = Settings(reader=str(fitted["reader"]))  # a policy fitted without a reader
    with caplog.at_level(logging.WARNING, logger="groundstream.runner"):
        build_loop("geometry", shipped)
    (line,) = [r.getMessage() for r in caplog.records if "no weight" in r.getMessage()]
    assert str(fitted["reader"]) in line and "not run" in line


def test_the_library_refuses_a_policy_whose_reader_is_not_served(fitted, monkeypatch) -> None:
    """`pipeline.score_candidate` applies the start-up refusal too, before any encoding."""
    from pipeline.errors import ReaderError
    from pipeline.policy import defaults

    monkeypatch.setenv("GROUNDSTREAM_POLICY", str(fitted["policy"]))
    monkeypatch.delenv("GROUNDSTREAM_READER", raising=False)
    defaults.default_policy.cache_clear()
    try:
        with pytest.raises(ReaderError, match="GROUNDSTREAM_READER=\\(unset\\)"):
            defaults.score_candidate("Q?", "An answer.", "A source.")
        monkeypatch.setenv("GROUNDSTREAM_READER", str(fitted["reader"]))
        defaults.check_served_reader()  # the reader it was fitted with: nothing refused
    finally:
        defaults.default_policy.cache_clear()
