"""`bench switch --tls`, `bench latency --tls`: what TLS and SASL cost, side by side.

The same bench runs against the plaintext broker and against a SASL_SSL broker of its own
(deploy/kafka/local.sh with GROUNDSTREAM_KAFKA_SECURE=1: TLS on every connection, SCRAM
logins, the authorizer on; the bench connects as its admin user), alternating, in one run
on one machine: the figure is the median over rounds of the secured side's rate over the
plaintext side's of the same round (goal >= 0.85), after one round on each that is not
counted (the secured broker's JVM has just started). For latency the rate is 1 / p50: a
secured p50 twice the plaintext one is a figure of 0.5.
"""

from __future__ import annotations

import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

from pipeline.bounds.conclusions import SIGNERS
from topics.security.keys import generate, write_pairs
from workers.bench.procs import LOCAL_SH, REPO_ROOT, BenchError, free_port
from workers.bench.report import Result

GOAL = 0.85
ROUNDS = 3


@contextlib.contextmanager
def secured_broker() -> Iterator[tuple[str, dict[str, str]]]:
    """A SASL_SSL broker in a temporary folder on free ports: its bootstrap servers and
    the admin's GROUNDSTREAM_KAFKA_* settings (local.sh's client.env); stopped after."""
    with tempfile.TemporaryDirectory(prefix="groundstream-tls-") as tmp:
        port = free_port()
        env = {
            **os.environ,
            "GROUNDSTREAM_KAFKA_SECURE": "1",
            "GROUNDSTREAM_KAFKA_DIR": str(Path(tmp) / "kafka"),
            "GROUNDSTREAM_KAFKA_USERS": "",
            "GROUNDSTREAM_PYTHON": sys.executable,
            "KAFKA_PORT": str(port),
            "KAFKA_CONTROLLER_PORT": str(free_port()),
            "KAFKA_SSL_PORT": str(free_port()),
        }
        print(f"a SASL_SSL broker on 127.0.0.1:{port}: {LOCAL_SH.name} start", flush=True)
        done = subprocess.run([str(LOCAL_SH), "start"], env=env, cwd=REPO_ROOT, check=False)
        try:
            if done.returncode != 0:
                raise BenchError(f"`{LOCAL_SH} start` of the SASL_SSL broker failed")
            client_env = Path(env["GROUNDSTREAM_KAFKA_DIR"]) / "client.env"
            settings = dict(
                line.split("=", 1) for line in client_env.read_text().splitlines() if "=" in line
            )
            # On a secured broker every stage must sign with its own key: a fresh set, as
            # `groundstream keys generate` makes them (each worker is handed its own key).
            keys = Path(tmp) / "keys"
            write_pairs(keys, generate(SIGNERS))
            settings["GROUNDSTREAM_SIGNING_KEY_FILE"] = str(keys / f"{SIGNERS[0]}.key")
            settings["GROUNDSTREAM_TRUSTED_KEYS_DIR"] = str(keys)
            yield settings.pop("GROUNDSTREAM_BOOTSTRAP_SERVERS"), settings
        finally:
            subprocess.run([str(LOCAL_SH), "stop"], env=env, cwd=REPO_ROOT, check=False)


@contextlib.contextmanager
def connected_as(settings: dict[str, str]) -> Iterator[None]:
    """This process (and the workers the bench starts) connect with `settings`."""
    saved = {k: os.environ.get(k) for k in settings}
    os.environ.update(settings)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def side_by_side(
    name: str,
    bootstrap: str,
    one: Callable[[str], Result],
    rate: Callable[[Result], float],
    rounds: int = ROUNDS,
) -> Result:
    """`one(bootstrap)` over plaintext and over SASL_SSL, `rounds` times each, alternating;
    the figure is the median of secured / plaintext `rate` per round."""
    plain: list[float] = []
    secured: list[float] = []
    with secured_broker() as (tls_bootstrap, settings):
        # The secured broker is a JVM started a moment ago, the plaintext one has been
        # serving: one round on each, not counted, so both are measured warm.
        one(bootstrap)
        with connected_as(settings):
            one(tls_bootstrap)
        for i in range(rounds):
            plain.append(rate(one(bootstrap)))
            with connected_as(settings):
                secured.append(rate(one(tls_bootstrap)))
            print(
                f"round {i + 1}: plaintext {plain[-1]:,.2f}/s, SASL_SSL {secured[-1]:,.2f}/s,"
                f" {secured[-1] / plain[-1]:.2f} of plaintext",
                flush=True,
            )
    ratios = [s / p for s, p in zip(secured, plain, strict=True)]
    return Result(
        f"{name}-tls",
        statistics.median(ratios),
        GOAL,
        "x",
        rates={
            "plaintext/s": statistics.median(plain),
            "SASL_SSL/s": statistics.median(secured),
        },
        notes={"rounds": rounds, "ratios": [round(r, 3) for r in ratios]},
    )
