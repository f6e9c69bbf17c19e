"""Readiness of stage workers: one line on stderr and one small file per stage.

A stage is ready once its consumer has joined its group and holds its assignment (with
its state restored, for a stateful stage): from then on a produced candidate gets decided.
Before that, `produce` then `consume decisions` shows nothing and looks like a failure.
The line tells the person at the terminal; the file, under the data dir, tells
`worker all` (which prints one "all stages ready" line once every child's file names that
child) and `groundstream wait-ready` (which a script runs before it produces).

Any run loop calls `announce_ready` at that moment and `clear_ready` when it stops;
nothing here knows Kafka. A file is trusted only while the process it names
is alive, so a worker killed with -9 leaves no false "ready" behind.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO

from pipeline.files import replaced_whole
from topics.codec import dumps, loads
from workers.runtime.settings import Settings

READY_DIR = "ready"


@dataclass(frozen=True, slots=True)
class Readiness:
    """What a ready stage says about itself."""

    stage: str
    group: str
    partitions: tuple[int, ...]
    pid: int
    at: float

    def line(self) -> str:
        held = ",".join(map(str, self.partitions)) or "none"
        return f"groundstream: stage {self.stage} ready (group {self.group}, partitions {held})"


def ready_file(settings: Settings, stage: str) -> Path:
    """One file per stage and topic prefix, so ladders sharing a data dir stay apart."""
    return settings.data_path(READY_DIR, f"{settings.topic_prefix}{stage}.json")


def announce_ready(
    settings: Settings,
    stage: str,
    group: str,
    partitions: Iterable[int],
    *,
    err: IO[str] | None = None,
    clock: Callable[[], float] = time.time,
) -> Readiness:
    """Say the stage is consuming: the stderr line, then the file (written atomically)."""
    ready = Readiness(stage, group, tuple(sorted(set(partitions))), os.getpid(), clock())
    path = ready_file(settings, stage)
    with replaced_whole(path) as tmp:
        tmp.write_bytes(dumps({**asdict(ready), "partitions": list(ready.partitions)}))
    print(ready.line(), file=err or sys.stderr, flush=True)
    return ready


def clear_ready(settings: Settings, stage: str, *, pid: int | None = None) -> None:
    """Forget the stage's readiness: any (a stale one, at start-up) or, with `pid`, only
    that process's (a stopping worker must not erase its successor's)."""
    path = ready_file(settings, stage)
    if pid is not None:
        ready = read_ready(settings, stage)
        if ready is None or ready.pid != pid:
            return
    path.unlink(missing_ok=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, someone else's
        return True
    return True


def read_ready(settings: Settings, stage: str) -> Readiness | None:
    """The stage's readiness if its file is readable and names a live process."""
    try:
        data = loads(ready_file(settings, stage).read_bytes())
        ready = Readiness(
            stage=str(data["stage"]),
            group=str(data["group"]),
            partitions=tuple(int(p) for p in data["partitions"]),
            pid=int(data["pid"]),
            at=float(data["at"]),
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return ready if _alive(ready.pid) else None


def not_ready(
    settings: Settings, stages: Iterable[str], pids: Mapping[str, int] | None = None
) -> list[str]:
    """Stages without a live readiness file (or, with `pids`, not one from that process)."""
    waiting = []
    for stage in stages:
        ready = read_ready(settings, stage)
        if ready is None or (pids is not None and ready.pid != pids.get(stage)):
            waiting.append(stage)
    return waiting


def wait_ready(
    settings: Settings,
    stages: Iterable[str],
    timeout: float,
    *,
    poll: float = 0.2,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> list[str]:
    """Wait until every stage is ready or `timeout` passes; the stages still not ready."""
    stages = list(stages)
    give_up = clock() + timeout
    while True:
        waiting = not_ready(settings, stages)
        if not waiting or clock() >= give_up:
            return waiting
        sleep(poll)
