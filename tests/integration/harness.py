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


# ---------------------------------------------------- secured / several nodes --


def free_port_block(count: int, *, low: int = 20000, high: int = 32000) -> int:
    """A base port B with B..B+count-1 all free on 127.0.0.1 (below the ephemeral range)."""
    import random
    import socket

    for _ in range(200):
        base = random.randrange(low, high - count)
        socks = []
        try:
            for port in range(base, base + count):
                s = socket.socket()
                socks.append(s)
                s.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise BrokerStartError(f"no block of {count} free ports in {low}..{high}")


class LocalCluster:
    """What a test needs of a cluster local.sh started in its own run dir."""

    def __init__(self, run_dir: Path, env: dict[str, str], nodes: int, secure: bool) -> None:
        self.run_dir, self.env, self.nodes, self.secure = run_dir, env, nodes, secure
        self.port = int(env["KAFKA_PORT"])
        self.bootstrap = ",".join(f"127.0.0.1:{self.port + i}" for i in range(nodes))
        # the listener that requires a client certificate (secure mode only)
        self.ssl_bootstrap = (
            ",".join(f"127.0.0.1:{int(env['KAFKA_SSL_PORT']) + i}" for i in range(nodes))
            if secure
            else ""
        )
        self.ca_file = run_dir / "tls" / "ca.pem"
        self.client_cert = run_dir / "tls" / "client.pem"
        self.client_key = run_dir / "tls" / "client.key"
        self.start_seconds = 0.0  # how long the first `local.sh start` took

    def client_env(self) -> dict[str, str]:
        """RUN_DIR/client.env: the GROUNDSTREAM_* settings of the admin user."""
        lines = (self.run_dir / "client.env").read_text().splitlines()
        return dict(line.split("=", 1) for line in lines if "=" in line)

    def password(self, user: str) -> str:
        return (self.run_dir / "users" / f"{user}.password").read_text().strip()

    def client_kwargs(
        self, user: str = "admin", *, mechanism: str = "SCRAM-SHA-512", password: str | None = None
    ) -> dict[str, object]:
        """aiokafka keyword arguments: SASL_SSL as `user`, or {} on a plaintext cluster."""
        if not self.secure:
            return {}
        from aiokafka.helpers import create_ssl_context

        return {
            "security_protocol": "SASL_SSL",
            "sasl_mechanism": mechanism,
            "sasl_plain_username": user,
            "sasl_plain_password": self.password(user) if password is None else password,
            "ssl_context": create_ssl_context(cafile=str(self.ca_file)),
        }

    def mtls_kwargs(self) -> dict[str, object]:
        """aiokafka keyword arguments for the SSL listener, as the CA-signed `client` cert."""
        from aiokafka.helpers import create_ssl_context

        ctx = create_ssl_context(
            cafile=str(self.ca_file), certfile=str(self.client_cert), keyfile=str(self.client_key)
        )
        return {"security_protocol": "SSL", "ssl_context": ctx}

    async def grant(
        self, principal: str, resource: str, name: str, *ops: str, pattern: str = "LITERAL"
    ) -> None:
        """Allow `principal` (e.g. "User:judge") OPS on a resource, as admin, through the
        very request `groundstream acls --apply` sends."""
        from workers.runtime import acls
        from workers.runtime.settings import Settings

        await acls.apply(
            Settings.from_env(self.client_env()),
            [
                acls.AclBinding(
                    acls.ResourceType[resource],
                    acls.PatternType[pattern],
                    name,
                    acls.Operation[op],
                    principal,
                )
                for op in ops
            ],
        )

    # -- nodes --

    def sh(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        done = local_sh(*args, env=self.env, timeout=timeout)
        if done.returncode != 0:
            raise BrokerStartError(
                f"local.sh {' '.join(args)} (rc={done.returncode}):\n{done.stdout}\n{done.stderr}"
            )
        return done

    def pids(self) -> dict[int, int]:
        """{node id: pid} of the running nodes."""
        out = self.sh("pids", timeout=30).stdout.split()
        return {int(n): int(p) for n, p in zip(out[::2], out[1::2], strict=True)}

    def kill(self, node: int) -> int:
        """kill -9 one node (as a crash would); returns its pid.  start() brings it back."""
        return int(self.sh("kill", str(node), timeout=30).stdout.split()[-1])

    def start(self) -> None:
        self.sh("start")

    def stop(self) -> None:
        self.sh("stop", timeout=120)


@contextlib.contextmanager
def _cluster(
    run_dir: Path, *, nodes: int, secure: bool, port: int | None, users: str | None
) -> Iterator[LocalCluster]:
    for tool in ("java", "mvn") + (("openssl",) if secure else ()):
        if shutil.which(tool) is None:
            raise BrokerStartError(f"no `{tool}` to start a local Kafka cluster")
    width = nodes * (3 if secure else 2)
    base = port if port is not None else free_port_block(width)
    env = {
        "GROUNDSTREAM_KAFKA_DIR": str(run_dir),
        "GROUNDSTREAM_KAFKA_NODES": str(nodes),
        "GROUNDSTREAM_KAFKA_SECURE": "1" if secure else "0",
        "KAFKA_PORT": str(base),
        "KAFKA_CONTROLLER_PORT": str(base + nodes),
        "KAFKA_SSL_PORT": str(base + 2 * nodes),
    }
    if users is not None:
        env["GROUNDSTREAM_KAFKA_USERS"] = users
    cluster = LocalCluster(run_dir, env, nodes, secure)
    started = time.monotonic()
    try:
        cluster.start()
        cluster.start_seconds = time.monotonic() - started
        yield cluster
    finally:
        try:
            cluster.stop()
        except BrokerStartError as exc:
            print(f"warning: {exc}", file=sys.stderr)


@contextlib.contextmanager
def secure_broker(
    run_dir: Path, *, port: int | None = None, users: str | None = None, nodes: int = 1
) -> Iterator[LocalCluster]:
    """A SASL_SSL + ACL broker of its own (local.sh, GROUNDSTREAM_KAFKA_SECURE=1) in run_dir.

    Ports: client `port` (a free block when None), controller port+nodes, mTLS port+2*nodes.
    `users`: GROUNDSTREAM_KAFKA_USERS (space-separated; admin is always there).
    Stopped on exit.
    """
    with _cluster(run_dir, nodes=nodes, secure=True, port=port, users=users) as cluster:
        yield cluster


@contextlib.contextmanager
def three_node_cluster(
    run_dir: Path, *, port: int | None = None, secure: bool = False
) -> Iterator[LocalCluster]:
    """Three KRaft nodes of its own (local.sh, GROUNDSTREAM_KAFKA_NODES=3) in run_dir.

    Client ports port..port+2 (a free block when None), controllers port+3..port+5.
    Replication factor 3, min.insync.replicas 2.  `.kill(node)` / `.pids()` / `.start()`
    for fault tests.  Stopped on exit.
    """
    with _cluster(run_dir, nodes=3, secure=secure, port=port, users=None) as cluster:
        yield cluster


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


def groundstream(
    env: dict[str, str], *args: str, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """`groundstream ARGS` from this checkout, whatever its exit status (`cli` raises)."""
    return subprocess.run(
        [sys.executable, "-m", "workers.cli", *args],
        env=env, cwd=REPO_ROOT, capture_output=True, text=True, timeout=timeout,
        stdin=subprocess.DEVNULL,
    )  # fmt: skip


def cli(env: dict[str, str], *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """Run `groundstream ARGS` from this checkout; raise with its output on failure."""
    done = groundstream(env, *args, timeout=timeout)
    if done.returncode != 0:
        raise AssertionError(f"groundstream {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}")
    return done


class Workers:
    """`groundstream worker STAGE` (or `groundstream COMMAND...`, e.g. `audit record`) in
    the background, ready once every app says so."""

    def __init__(
        self,
        env: dict[str, str],
        stage: str,
        log: Path,
        *,
        apps: int = 1,
        command: tuple[str, ...] = (),
    ) -> None:
        self.env, self.stage, self.log_path, self.apps = env, stage, log, apps
        self.command = command or ("worker", stage)
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 180.0) -> Workers:
        self._log = self.log_path.open("ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "workers.cli", *self.command],
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
