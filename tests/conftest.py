"""Every test session starts as a fresh machine's first run would.

A library's first run on a machine differs from every later one: matplotlib builds its
font cache (and says so when that is slow), the encoder is exported to ONNX once, model
hubs and runtimes write caches and ids. On a developer's machine those caches exist, so a
difference that only a first run shows hides there and appears on a newcomer's machine.
Here the per-user cache, config, data and state folders (the XDG base directories, which
matplotlib, groundstream's ONNX export, Hugging Face and torch follow) and matplotlib's own
MPLCONFIGDIR point into one empty folder made for this session, for this process and every
process it starts. They are set at import, before any test or fixture runs.

HOME itself stays: under it are what is not cheap to rebuild (the virtualenv, Maven's
repository of Kafka's jars) and the user's own settings for their tools.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path

FRESH_DIRS = {
    "XDG_CACHE_HOME": "cache",
    "XDG_CONFIG_HOME": "config",
    "XDG_DATA_HOME": "data",
    "XDG_STATE_HOME": "state",
    "MPLCONFIGDIR": "matplotlib",
}

FIRST_RUN_HOME = Path(tempfile.mkdtemp(prefix="groundstream-first-run-"))
for _variable, _name in FRESH_DIRS.items():
    (FIRST_RUN_HOME / _name).mkdir()
    os.environ[_variable] = str(FIRST_RUN_HOME / _name)
atexit.register(shutil.rmtree, FIRST_RUN_HOME, ignore_errors=True)
