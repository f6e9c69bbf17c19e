"""Run groundstream's own CLI and workers as subprocesses against the test broker."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

from topics.codec import loads
from workers.bench.procs import broker_answers

REPO_ROOT = Path(__file__).resolve().parents[2]
FIXTURES = REPO_ROOT / "tests" / "fixtures"
READY_LINE = " ready (group "  # workers/runtime/ready.py's line
LOCAL_SH = REPO_ROOT / "deploy" / "kafka" / "local.sh"


def local_sh(
    *args: str, timeout: float = 300, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run deploy/kafka/local.sh ARGS; `env` is added to this process's environment."""
    full = {**os.environ, **(env or {})}
    # The readiness probe in local.sh needs aiokafka; the interpreter running this has it.
    full.setdefault("GROUNDSTREAM_PYTHON", sys.executable)
    return subprocess.run(
        [str(LOCAL_SH), *args],
        cwd=REPO_ROOT,
        env=full,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


class BrokerStartError(RuntimeError):
    """No broker answers and local.sh could not start one."""


@contextlib.contextmanager
def local_broker(bootstrap: str) -> Iterator[bool]:
    """A broker at ``bootstrap``: the one that answers there, or one started with local.sh.

    Yields True when this call started it, and then stops it on exit. A broker local.sh
    already had (e.g. still starting) is reused and left running.
    """
    if broker_answers(bootstrap):
        yield False
        return
    for tool in ("java", "mvn"):
        if shutil.which(tool) is None:
            raise BrokerStartError(f"no Kafka broker at {bootstrap} and no `{tool}` to start one")
    already_ours = local_sh("status", timeout=30).returncode == 0
    here = LOCAL_SH.relative_to(REPO_ROOT)
    print(f"no broker at {bootstrap}: starting one with {here}", flush=True)
    started = time.monotonic()
    proc = local_sh("start")
    if proc.returncode != 0:
        raise BrokerStartError(
            f"`{LOCAL_SH} start` failed (rc={proc.returncode}) after "
            f"{time.monotonic() - started:.0f}s:\n{proc.stdout}\n{proc.stderr}"
        )
    try:
        yield not already_ours
    finally:
        if not already_ours:
            stop = local_sh("stop", timeout=120)
            if stop.returncode != 0:
                print(
                    f"warning: `{LOCAL_SH} stop` failed:\n{stop.stdout}\n{stop.stderr}",
                    file=sys.stderr,
                )


def worker_env(bootstrap: str, prefix: str, data_dir: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GROUNDSTREAM_")}
    env.update(
        GROUNDSTREAM_BOOTSTRAP_SERVERS=bootstrap,
        GROUNDSTREAM_TOPIC_PREFIX=prefix,
        GROUNDSTREAM_PARTITIONS="2",
        GROUNDSTREAM_DATA_DIR=str(data_dir),
        GROUNDSTREAM_BATCH_WITHIN="0.02",
        GROUNDSTREAM_LOG_LEVEL="info",
        PYTHONPATH=str(REPO_ROOT),
    )
    env.update(extra)
    return env


def cli(env: dict[str, str], *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """Run `groundstream ARGS` from this checkout; raise with its output on failure."""
    done = subprocess.run(
        [sys.executable, "-m", "workers.cli", *args],
        env=env,
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if done.returncode != 0:
        raise AssertionError(f"groundstream {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}")
    return done


class Workers:
    """`groundstream worker STAGE` in the background, ready once every app says so."""

    def __init__(self, env: dict[str, str], stage: str, log: Path, *, apps: int = 1) -> None:
        self.env, self.stage, self.log_path, self.apps = env, stage, log, apps
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 180.0) -> Workers:
        self._log = self.log_path.open("ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "workers.cli", "worker", self.stage],
            env=self.env,
            cwd=REPO_ROOT,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        already = self.ready_count()
        deadline = time.monotonic() + timeout
        while self.ready_count() - already < self.apps:
            if self.proc.poll() is not None:
                raise AssertionError(f"worker {self.stage} exited early:\n{self.tail()}")
            if time.monotonic() > deadline:
                self.stop()
                raise AssertionError(f"worker {self.stage} not ready in {timeout}s:\n{self.tail()}")
            time.sleep(0.5)
        return self

    def ready_count(self) -> int:
        return (
            self.log_path.read_text(errors="replace").count(READY_LINE)
            if self.log_path.exists()
            else 0
        )

    def tail(self, n: int = 60) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])

    def kill(self) -> None:
        """Stop a single-stage worker hard, as a crash would: no graceful shutdown."""
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(30)
        if hasattr(self, "_log"):
            self._log.close()

    def __enter__(self) -> Workers:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def values(records) -> list[dict]:
    return [loads(r.value) for r in records]
