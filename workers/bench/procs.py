"""What a bench starts: the broker (if absent), a topic prefix of its own, worker processes.

Workers are started exactly as a person starts them (`groundstream worker NAME` or
`worker all`), so a bench measures whatever those commands run today; readiness comes from
the files every run loop writes (`workers.runtime.ready`). Peak resident memory is the
kernel's VmHWM of each process and each of its descendants, read just before they stop.
The shared broker is started when none answers and never stopped; the bench's topics are
deleted at the end.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from pipeline.errors import GroundstreamError
from topics import clients
from topics.clients import KafkaConnection
from workers.runtime.ready import not_ready
from workers.runtime.settings import Settings

REPO_ROOT = Path(__file__).resolve().parents[2]
OWN_SETTINGS = (
    "GROUNDSTREAM_KAFKA_",
    "GROUNDSTREAM_SIGNING_KEY_FILE",
    "GROUNDSTREAM_TRUSTED_KEYS_DIR",
)
"""The settings a bench run takes from its own environment (`bench … --tls` sets them)."""
LOCAL_SH = REPO_ROOT / "deploy" / "kafka" / "local.sh"
MIB = 1024 * 1024


class BenchError(GroundstreamError, RuntimeError):
    """The bench could not get what it needs (broker, workers) or its outputs never came."""


def free_port() -> int:
    """A TCP port nothing listens on at 127.0.0.1 now."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def broker_answers(bootstrap: str, timeout: float = 5.0) -> bool:
    from aiokafka.client import AIOKafkaClient

    async def probe() -> None:
        client = AIOKafkaClient(
            **connection(bootstrap).client_kwargs(), request_timeout_ms=int(timeout * 1000)
        )
        try:
            await asyncio.wait_for(client.bootstrap(), timeout)
        finally:
            await client.close()

    quiet = logging.getLogger("aiokafka")
    level = quiet.level
    quiet.setLevel(logging.CRITICAL)  # "Unable connect" is the answer here, not an error
    try:
        asyncio.run(probe())
    except Exception:
        return False
    finally:
        quiet.setLevel(level)
    return True


def ensure_broker(bootstrap: str) -> None:
    """The broker at `bootstrap`, started with deploy/kafka/local.sh when none answers."""
    if broker_answers(bootstrap):
        return
    print(f"no broker at {bootstrap}: {LOCAL_SH.relative_to(REPO_ROOT)} start", flush=True)
    env = {**os.environ, "GROUNDSTREAM_PYTHON": sys.executable}
    done = subprocess.run([str(LOCAL_SH), "start"], env=env, cwd=REPO_ROOT, check=False)
    if done.returncode != 0 or not broker_answers(bootstrap):
        raise BenchError(f"no Kafka broker at {bootstrap} and `{LOCAL_SH} start` failed")


def vm_hwm(pid: int) -> int | None:
    """Peak resident set (bytes) of a live process, from /proc/PID/status."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def descendants(pid: int) -> list[int]:
    """`pid` and every process below it, parents first."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop(0)
        out.append(p)
        for task in Path(f"/proc/{p}/task").glob("*/children"):
            with contextlib.suppress(OSError):
                todo += [int(c) for c in task.read_text().split()]
    return out


def label(pid: int) -> str:
    """`worker geometry`-style name of a process, from its command line."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")
    except OSError:
        return str(pid)
    if "worker" in argv:
        stage = argv[argv.index("worker") + 1 :]
        return stage[0] if stage else "worker"
    if "audit" in argv and "record" in argv:  # `worker all` runs the audit recorder too
        return "recorder"
    return Path(argv[0]).name if argv and argv[0] else str(pid)


@dataclass
class Bench:
    """One bench run: its prefix, data dir, settings, environment and started processes."""

    bootstrap: str
    partitions: int = 2
    extra_env: dict[str, str] = field(default_factory=dict)
    prefix: str = field(default_factory=lambda: f"bench-{uuid.uuid4().hex[:8]}.")
    procs: list[tuple[str, subprocess.Popen]] = field(default_factory=list)
    peaks: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._tmp = tempfile.TemporaryDirectory(prefix="gs-bench-")
        self.data_dir = Path(self._tmp.name)
        self.log = self.data_dir / "workers.log"

    @property
    def env(self) -> dict[str, str]:
        # The connection's security (GROUNDSTREAM_KAFKA_*) and the stages' keys are the
        # bench's own, the rest set here.
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith("GROUNDSTREAM_") or k.startswith(OWN_SETTINGS)
        }
        env.update(
            GROUNDSTREAM_BOOTSTRAP_SERVERS=self.bootstrap,
            GROUNDSTREAM_TOPIC_PREFIX=self.prefix,
            GROUNDSTREAM_PARTITIONS=str(self.partitions),
            GROUNDSTREAM_DATA_DIR=str(self.data_dir),
            GROUNDSTREAM_LOG_LEVEL="warning",
            PYTHONPATH=str(REPO_ROOT),
        )
        env.update(self.extra_env)
        return env

    def settings(self, env: Mapping[str, str] | None = None) -> Settings:
        return Settings.from_env(env or self.env)

    def cli(self, *args: str) -> str:
        """`groundstream ARGS` with the bench's environment; its stdout."""
        done = subprocess.run(
            [sys.executable, "-m", "workers.cli", *args],
            env=self.env, cwd=REPO_ROOT, capture_output=True, text=True, check=False,
        )  # fmt: skip
        if done.returncode != 0:
            raise BenchError(f"groundstream {' '.join(args)} failed:\n{done.stderr[-2000:]}")
        return done.stdout

    def start(
        self,
        stage: str,
        tag: str = "",
        timeout: float = 300.0,
        wrap: Sequence[str] = (),
        **env: str,
    ) -> None:
        """`groundstream worker STAGE` in the background; back once its stages are ready.
        `tag` names the process in the memory report (e.g. `geometry[onnx]`); `wrap` goes
        between the interpreter and `-m workers.cli` (e.g. `-m cProfile -o FILE`)."""
        full = {**self.env, **env}
        key = full.get("GROUNDSTREAM_SIGNING_KEY_FILE")
        if key and stage != "all":  # `worker all` hands each child its own key itself
            full["GROUNDSTREAM_SIGNING_KEY_FILE"] = str(Path(key).with_name(f"{stage}.key"))
        with self.log.open("ab") as log:
            proc = subprocess.Popen(
                [sys.executable, *wrap, "-m", "workers.cli", "worker", stage],
                env=full, cwd=REPO_ROOT, stdout=log, stderr=subprocess.STDOUT,
            )  # fmt: skip
        self.procs.append((tag or stage, proc))
        from workers.runtime.ladder import STAGE_NAMES

        stages = STAGE_NAMES if stage == "all" else (stage,)
        # One stage: ready once its file names this very process (another process of the
        # same stage may be ready already). `worker all` clears its children's files first.
        pids = None if stage == "all" else {stage: proc.pid}
        settings = self.settings(full)
        waiting = list(stages)
        for _ in range(int(timeout / 0.5)):
            if proc.poll() is not None:
                raise BenchError(f"worker {stage} exited ({proc.returncode}):\n{self.tail()}")
            waiting = not_ready(settings, stages, pids)
            if not waiting:
                return
            time.sleep(0.5)
        raise BenchError(f"worker {stage}: {', '.join(waiting)} not ready in {timeout:g}s")

    def record_peaks(self) -> None:
        """VmHWM of every started process and its descendants, keyed by their labels."""
        for tag, proc in self.procs:
            if proc.poll() is not None:
                continue
            for pid in descendants(proc.pid):
                peak = vm_hwm(pid)
                if peak is None:
                    continue
                # Under `worker all`, each child by its own name; else the tag names it.
                name = (
                    tag
                    if pid == proc.pid
                    else label(pid)
                    if tag == "all"
                    else f"{tag}/{label(pid)}"
                )
                self.peaks[name] = max(peak, self.peaks.get(name, 0))

    def stop(self, tag: str | None = None) -> None:
        """Stop the processes (all, or those started as `tag`), recording their peaks first."""
        self.record_peaks()
        for name, proc in list(self.procs):
            if tag is not None and name != tag:
                continue
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(60)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(30)
            self.procs.remove((name, proc))

    def signal(self, tag: str, signum: int) -> None:
        """Send `signum` to the running process started as `tag`, its peaks recorded first,
        and return at once (a bench times what follows); `stop` reaps it afterwards."""
        self.record_peaks()
        found = [proc for name, proc in self.procs if name == tag and proc.poll() is None]
        if not found:
            raise BenchError(f"no running process {tag} to signal:\n{self.tail()}")
        for proc in found:
            proc.send_signal(signum)

    def tail(self, n: int = 40) -> str:
        if not self.log.exists():
            return ""
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:])

    def close(self) -> None:
        self.stop()
        with contextlib.suppress(Exception):
            asyncio.run(delete_topics(self.bootstrap, self.prefix))
        self._tmp.cleanup()


@contextlib.contextmanager
def bench(bootstrap: str, partitions: int = 2, **env: str) -> Iterator[Bench]:
    """A broker, a fresh topic prefix with the ladder's topics, and cleanup afterwards."""
    ensure_broker(bootstrap)
    run = Bench(bootstrap, partitions, dict(env))
    try:
        run.cli("topics", "create")
        yield run
    finally:
        run.close()


def connection(bootstrap: str) -> KafkaConnection:
    """The bench's broker, with the security the environment sets (GROUNDSTREAM_KAFKA_*):
    the bench's own clients reach it as the workers it starts do."""
    return Settings.from_env(bootstrap_servers=bootstrap).kafka()


async def delete_topics(bootstrap: str, prefix: str) -> None:
    admin = clients.admin(connection(bootstrap))
    await admin.start()
    try:
        names = [t for t in await admin.list_topics() if t.startswith(prefix)]
        if names:
            await admin.delete_topics(names)
    finally:
        await admin.close()


def mib(n: int) -> str:
    return f"{n / MIB:.0f}"
