"""Files written whole or not at all: a reader (a worker starting, a readiness probe)
never opens one half written."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def replaced_whole(target: Path) -> Iterator[Path]:
    """A temporary path beside `target` (its folder made) for the block to write; renamed
    onto `target` once the block ends without an error. The rename is atomic on one
    filesystem, and the name is this process's own, so writers starting together never
    write into one another's file."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f"{target.name}.{os.getpid()}.tmp")
    yield tmp
    tmp.replace(target)
