"""`calibrate --from-decisions` on the real broker: a person's verdicts on `decisions`, with
the candidates they judged on `candidates`, refit the cuts of a copy of the shipped policy
(real encoder) and the command says how the operating point moved; `review export` writes
the same verdicts as a labelled file for `train --reviewed`."""

from __future__ import annotations

import shutil
import time
import tomllib
from pathlib import Path

import orjson

from pipeline.fit.claims_data import reviewed_examples
from pipeline.policy.document import DEFAULT_POLICY_PATH, load_policy
from topics.codec import dumps
from topics.names import Topic
from workers.runtime.settings import Settings

from .conftest import decision_record, produce, send_decisions
from .harness import FIXTURES, cli, worker_env

N_JUDGED = 12


async def test_human_verdicts_refit_the_cuts(
    dashboard_settings: Settings, kafka_bootstrap: str, topic_prefix: str, tmp_path: Path
) -> None:
    settings = dashboard_settings  # this test's own topics, created
    labelled = [
        orjson.loads(line) for line in (FIXTURES / "labelled.jsonl").read_bytes().splitlines()
    ]
    judged = labelled[:N_JUDGED]
    await produce(
        kafka_bootstrap,
        settings.topic(Topic.CANDIDATES),
        [(c["session_id"].encode(), dumps(c)) for c in labelled],
    )
    since = time.time()
    verdicts = [
        decision_record(
            c["id"],
            "review",
            "accept" if c["metadata"]["label"] == "right" else "reject",
            method="human",
            decided_at=since + 1,
        )
        for c in judged
    ]
    old = decision_record(
        labelled[-1]["id"], "review", "accept", method="human", decided_at=since - 3600
    )
    not_a_person = decision_record(labelled[-2]["id"], "switch", "accept", decided_at=since + 1)
    unknown = decision_record(
        "never-produced", "review", "reject", method="human", decided_at=since + 1
    )
    await send_decisions(kafka_bootstrap, settings, *verdicts, old, not_a_person, unknown)

    policy_file = tmp_path / "policy.toml"
    shutil.copy(DEFAULT_POLICY_PATH, policy_file)
    before = load_policy(policy_file)
    env = worker_env(kafka_bootstrap, topic_prefix, tmp_path / "data")
    done = cli(
        env,
        "calibrate",
        "--from-decisions",
        "--since",
        str(since),
        "--out",
        str(policy_file),
    )
    out = done.stdout
    print(out)  # the operating point's move, for the record (pytest -s)
    assert f"{N_JUDGED + 1} human verdicts read; left out: 1 candidate not found" in out
    assert (
        f"route (policy default): {N_JUDGED} verdicts (6 accept, 6 reject); refitted cuts only"
        in out
    )
    assert "before: " in out and "after:  " in out and "accept cut " in out

    after = load_policy(policy_file)
    assert after.version != before.version
    refit = tomllib.loads(policy_file.read_text())["calibration"]["refit"]
    assert refit["n"] == N_JUDGED and refit["model_refitted"] is False
    assert refit["accept_error_after"] <= 0.05  # within the bound, on these labels
    assert after.grounding == before.grounding  # too few verdicts to refit the model
    assert (after.thresholds.sgi_strong_pass, after.thresholds.sgi_review) == (
        before.thresholds.sgi_strong_pass,
        before.thresholds.sgi_review,
    )
    assert after.routes.keys() == before.routes.keys()

    # The same verdicts, exported as a labelled file: what `train --reviewed` and `eval` read.
    export = tmp_path / "reviewed.jsonl"
    done = cli(env, "review", "export", "--since", str(since), "--out", str(export))
    assert f"wrote {N_JUDGED} reviewed candidates" in done.stdout
    assert "left out: 1 candidate(s) not found" in done.stdout
    rows = [orjson.loads(line) for line in export.read_bytes().splitlines()]
    assert {r["id"]: r["metadata"]["label"] for r in rows} == {
        c["id"]: c["metadata"]["label"] for c in judged
    }
    assert len(reviewed_examples(export)) == N_JUDGED  # every judged one has a context
