"""Every command of the CLI, against an unreachable broker and against a malformed file,
fails with one line on stderr and a non-zero exit: never a traceback (issue 22, item 2).

Each command runs as a subprocess, as a user would run it; the broker is a closed port
(127.0.0.1:1), so no Kafka is needed. A command added to the CLI without a row here fails
`test_every_command_is_tried`.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import click
import pytest

from pipeline.policy.document import DEFAULT_POLICY_PATH
from tests.fixtures.one_line import one_line
from workers.cli import main
from workers.runtime.ready import announce_ready
from workers.runtime.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
NOWHERE = "127.0.0.1:1"
FIRST_RUN = ROOT / "tests" / "fixtures" / "first_run"
NOISY = (
    "matplotlib",
    *("torch", "sentence_transformers", "transformers", "huggingface_hub"),
    *("onnxruntime", "onnx", "playwright"),
)
"""Libraries that may say something the first time they run on a machine (matplotlib's
font cache, model caches): each command here runs as on that first run, every import of
one announced on stderr (tests/fixtures/first_run), so a command that imports one before
it has checked its input gains a second line, on every machine."""

# Commands that reach the broker, with the arguments that get them there.
BROKER: dict[str, list[str]] = {
    "produce": ["produce", "{good}"],
    "consume": ["consume", "candidates", "--timeout", "1"],
    "outcomes": ["outcomes", "--timeout", "1"],
    "topics create": ["topics", "create"],
    "worker": ["worker", "switch"],
    "wait-ready": ["wait-ready", "--timeout", "0", "--stage", "rules"],
    "calibrate": ["calibrate", "--from-decisions", "--out", "{policy}"],
    "review list": ["review", "list"],
    "review export": ["review", "export", "--out", "{tmp}/reviewed.jsonl"],
    "review show": ["review", "show", "c-1"],
    "review decide": ["review", "decide", "c-1", "accept", "--by", "ana"],
    "dashboard": ["dashboard"],
    "control kill-switch": ["control", "kill-switch", "on", "--by", "ana"],
    "replay": ["replay", "--from", "0"],
    "attach": ["attach", "--source", "answers", "--preset", "openai-chat"],
    "audit record": ["audit", "record"],
    "audit verify": ["audit", "verify"],
    # Without --apply it prints and needs no broker (tests/unit/test_acls.py).
    "acls": ["acls", "--stage", "geometry", "--principal", "User:geometry", "--apply"],
}

# Commands that read a file, each given a malformed one.
MALFORMED: dict[str, list[str]] = {
    "eval": ["eval", "{bad}", "--report", "{tmp}/report"],
    "determinism": ["determinism", "{bad}", "--backends", "onnx", "--batch-sizes", "1"],
    "calibrate": ["calibrate", "{bad}", "--out", "{tmp}/fitted.toml"],
    "train": ["train", "--ragtruth", "{bad}", "--begin", "{bad}", "--out", "{tmp}/head"],
    "train claims": [
        *("train", "claims", "--pretrain-share", "0"),
        *("--ragtruth", "{bad}", "--begin", "{bad}", "--out", "{tmp}/reader"),
    ],
    "bench plot": ["bench", "plot", "{bad}", "--out", "{tmp}/plot"],
    "bench judge": ["bench", "judge", "{bad}"],
    "encoder export": ["encoder", "export", "--model", "{tmp}"],
    "encoder compare": ["encoder", "compare", "{bad}", "--limit", "1"],
    "reader export": ["reader", "export", "{bad}", "--out", "{tmp}/exported"],
    "verify": ["verify", "{good}", "--policy", "{bad}"],
    "check": ["check", "[not json"],  # a malformed line rather than a file
    "review add-reviewer": ["review", "add-reviewer", "ana", "--file", "{bad}"],
}

# Commands that ask a model endpoint, given one that does not answer: their report ends
# in one verdict line on stdout (`not usable: …`), exit 1, nothing on stderr.
ENDPOINT: dict[str, list[str]] = {
    "judge probe": ["judge", "probe", "--url", f"http://{NOWHERE}/v1", "--model", "m"],
    "sampler probe": ["sampler", "probe", "--url", f"http://{NOWHERE}/v1"],
}

# Commands neither table can reach, and why.
NEITHER = {
    f"bench {name}": "starts its own broker with deploy/kafka/local.sh when none answers"
    for name in (
        *("geometry", "cache", "claims", "switch", "latency", "scale", "ladder", "fairness"),
        "judge-throughput",
    )
} | {"keys generate": "reads nothing and reaches no broker (tests/unit/test_signing_keys.py)"}


def leaves(command: click.Command, path: tuple[str, ...] = ()) -> Iterator[str]:
    if isinstance(command, click.Group):
        if command.invoke_without_command and path:
            yield " ".join(path)
        for name, sub in command.commands.items():
            yield from leaves(sub, (*path, name))
    else:
        yield " ".join(path)


def test_every_command_is_tried() -> None:
    untried = set(leaves(main)) - set(BROKER) - set(MALFORMED) - set(ENDPOINT) - set(NEITHER)
    assert not untried, f"add these commands to a table here: {sorted(untried)}"


@pytest.fixture(scope="module")
def runs(
    tmp_path_factory: pytest.TempPathFactory,
) -> dict[tuple[str, str], subprocess.CompletedProcess]:
    """Every row of both tables, run at once (each is a fresh interpreter)."""
    tmp = tmp_path_factory.mktemp("cli")
    good, bad = tmp / "good.jsonl", tmp / "bad.jsonl"
    good.write_text('{"id": "c-1", "session_id": "s", "question": "q?", "response": "a."}\n')
    bad.write_bytes(b"{not json\n\xff\xfe\n")
    policy = tmp / "policy.toml"  # calibrate --from-decisions updates an existing policy
    policy.write_bytes(DEFAULT_POLICY_PATH.read_bytes())
    env = {k: v for k, v in os.environ.items() if not k.startswith("GROUNDSTREAM_")}
    env |= {
        "GROUNDSTREAM_BOOTSTRAP_SERVERS": NOWHERE,
        "GROUNDSTREAM_DATA_DIR": str(tmp / "data"),
        "PYTHONPATH": os.pathsep.join((str(FIRST_RUN), str(ROOT))),
        "GS_TEST_FIRST_RUN": ",".join(NOISY),
    }
    # wait-ready's stage is up (this process announces it): only the broker is missing.
    announce_ready(Settings(data_dir=str(tmp / "data")), "rules", "g", [0], err=io.StringIO())
    started = {}
    for table, rows in (("broker", BROKER), ("malformed", MALFORMED), ("endpoint", ENDPOINT)):
        for name, argv in rows.items():
            args = [a.format(tmp=tmp, good=good, bad=bad, policy=policy) for a in argv]
            started[table, name] = subprocess.Popen(
                [sys.executable, "-m", "workers.cli", *args],
                cwd=ROOT, env=env, stdin=subprocess.DEVNULL, text=True,
                stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            )  # fmt: skip
    done = {}
    for key, proc in started.items():
        out, err = proc.communicate(timeout=180)
        done[key] = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
    return done


@pytest.mark.parametrize("name", sorted(BROKER))
def test_an_unreachable_broker_is_one_line_naming_the_setting(runs, name: str) -> None:
    line = one_line(runs["broker", name])
    assert line == (
        f"groundstream: cannot reach Kafka at {NOWHERE} (GROUNDSTREAM_BOOTSTRAP_SERVERS): "
        "KafkaConnectionError; see docs/how-to/troubleshooting.md#cannot-reach-kafka"
    )
    assert runs["broker", name].returncode == 2


@pytest.mark.parametrize("name", sorted(MALFORMED))
def test_a_malformed_file_is_one_line_naming_it(runs, name: str) -> None:
    line = one_line(runs["malformed", name])
    assert "bad.jsonl" in line or "model.safetensors" in line or "not a JSON line" in line, line


@pytest.mark.parametrize("name", sorted(ENDPOINT))
def test_an_unreachable_endpoint_is_one_verdict_line(runs, name: str) -> None:
    done = runs["endpoint", name]
    assert done.returncode == 1 and not done.stderr, done.stderr
    last = done.stdout.strip().splitlines()[-1]
    assert last.startswith(f"not usable: cannot reach http://{NOWHERE}/v1 ("), last


def test_a_first_run_notice_logged_by_a_library_stays_off_a_working_command(
    tmp_path: Path,
) -> None:
    """matplotlib logs "building the font cache" as a warning on a new machine; a command
    that works prints its own line and nothing of the library's first run."""
    result = tmp_path / "bench.jsonl"
    result.write_text(
        '{"bench": "switch", "goal": 1.0, "figure": 2.0, "lower_is_better": false,'
        ' "unit": "x", "peaks": {}}\n'
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("GROUNDSTREAM_")}
    env |= {
        "PYTHONPATH": os.pathsep.join((str(FIRST_RUN), str(ROOT))),
        "GS_TEST_FIRST_RUN": "matplotlib.font_manager:log",
        "MPLCONFIGDIR": str(tmp_path / "mpl"),
    }
    argv = ["bench", "plot", str(result), "--out", str(tmp_path / "plot.png")]
    run = lambda *extra: subprocess.run(  # noqa: E731
        [sys.executable, "-m", "workers.cli", *extra, *argv],
        cwd=ROOT, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip
    done = run()
    assert done.returncode == 0, done.stderr
    assert done.stderr.strip().splitlines() == [f"wrote {tmp_path / 'plot.png'}"]
    # The notice is really raised, and shown to whoever asks for the library's chatter.
    loud = run("--log-level", "info")
    assert "matplotlib.font_manager: building the first-run cache" in loud.stderr
