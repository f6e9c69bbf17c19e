"""`groundstream worker ...` with light instrumentation, for `geometry_throughput --instrument`.

Runs the real CLI (`workers.cli.main`) after wrapping a few functions with timers; the
stage code itself is unchanged. Configured by environment variables:

* ``GS_BENCH_TRACE``: a JSONL file; one line per stage batch (size, wall-clock start and
  end, and the seconds spent in each part of the batch).
* ``GS_BENCH_FAUST``: a JSON object of extra ``faust.App`` settings, e.g.
  ``{"stream_buffer_maxsize": 16384, "broker_max_poll_records": 512}``.
* ``GS_BENCH_CPROFILE``: a directory; while ``<dir>/on`` exists the event-loop thread and
  the scoring thread are profiled, and ``loop.prof`` / ``score.prof`` are written there
  once the file is gone again.
"""

from __future__ import annotations

import asyncio
import contextlib
import cProfile
import json
import os
import sys
import time
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import faust

from pipeline import encoder as encoder_module
from workers import telemetry as telemetry_module
from workers.stages import geometry

TRACE = os.environ.get("GS_BENCH_TRACE", "")
FAUST_OVERRIDES: dict[str, Any] = json.loads(os.environ.get("GS_BENCH_FAUST") or "{}")
CPROFILE_DIR = (
    Path(os.environ["GS_BENCH_CPROFILE"]) if os.environ.get("GS_BENCH_CPROFILE") else None
)

_FIELDS = (
    "process", "parse", "to_thread", "score", "encode", "encode_uncached", "windows", "conclude",
)  # fmt: skip
_current: dict[str, Any] = {}
_trace_file = open(TRACE, "a", buffering=1) if TRACE else None  # noqa: SIM115 - lives for the process
_loop_prof = cProfile.Profile()
_score_prof = cProfile.Profile()
_profiling = False


def _add(field: str, seconds: float) -> None:
    if _current:
        _current[field] = _current.get(field, 0.0) + seconds


def _timed(field: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            _add(field, time.perf_counter() - started)

    wrapper.__wrapped__ = fn  # type: ignore[attr-defined]
    return wrapper


# -- faust settings ---------------------------------------------------------------------

_App = faust.App


def _app(*args: Any, **kwargs: Any) -> faust.App:
    kwargs.update(FAUST_OVERRIDES)
    return _App(*args, **kwargs)


faust.App = _app  # type: ignore[misc]

# -- the batch: StageTelemetry.batch wraps process + count + send_all -------------------

_batch = telemetry_module.StageTelemetry.batch


@contextlib.contextmanager
def _traced_batch(self: telemetry_module.StageTelemetry, size: int) -> Iterator[None]:
    _toggle_profile()
    _current.clear()
    _current.update({"n": size, "t0": time.time(), **dict.fromkeys(_FIELDS, 0.0), "texts": 0})
    started = time.perf_counter()
    try:
        with _batch(self, size):
            yield
    finally:
        _current["wall"] = time.perf_counter() - started
        _current["t1"] = time.time()
        if _trace_file is not None:
            _trace_file.write(json.dumps(_current) + "\n")
        _current.clear()


telemetry_module.StageTelemetry.batch = _traced_batch  # type: ignore[method-assign]

# -- the geometry stage -----------------------------------------------------------------

_process = geometry.GeometryStage.process


async def _timed_process(self: geometry.GeometryStage, batch: Any, ctx: Any) -> Any:
    started = time.perf_counter()
    try:
        return await _process(self, batch, ctx)
    finally:
        _add("process", time.perf_counter() - started)


geometry.GeometryStage.process = _timed_process  # type: ignore[method-assign]
geometry.parse_candidate = _timed("parse", geometry.parse_candidate)
geometry.conclude = _timed("conclude", geometry.conclude)

_score = geometry.score_candidates


def _timed_score(*args: Any, **kwargs: Any) -> Any:
    profiling = _profiling
    if profiling:
        _score_prof.enable()
    torch = sys.modules.get("torch")
    if _current and torch is not None:
        _current["torch_threads"] = torch.get_num_threads()  # of the scoring thread
    started = time.perf_counter()
    try:
        return _score(*args, **kwargs)
    finally:
        _add("score", time.perf_counter() - started)
        if profiling:
            _score_prof.disable()


geometry.score_candidates = _timed_score


async def _timed_to_thread(fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
    started = time.perf_counter()
    try:
        return await asyncio.to_thread(fn, *args, **kwargs)
    finally:
        _add("to_thread", time.perf_counter() - started)


class _AsyncioProxy(types.ModuleType):
    """`asyncio` for the geometry module, with a timed `to_thread`."""

    to_thread = staticmethod(_timed_to_thread)

    def __getattr__(self, name: str) -> Any:
        return getattr(asyncio, name)


geometry.asyncio = _AsyncioProxy("asyncio")  # type: ignore[attr-defined]

# -- the encoder ------------------------------------------------------------------------

_Encoder = encoder_module.SentenceEncoder
_Encoder.encode = _timed("encode", _Encoder.encode)  # type: ignore[method-assign]
_Encoder.windows = _timed("windows", _Encoder.windows)  # type: ignore[method-assign]
_encode_uncached = _Encoder.encode_uncached


def _counted_uncached(self: encoder_module.SentenceEncoder, texts: Any) -> Any:
    _add("texts", len(texts))
    started = time.perf_counter()
    try:
        return _encode_uncached(self, texts)
    finally:
        _add("encode_uncached", time.perf_counter() - started)


_Encoder.encode_uncached = _counted_uncached  # type: ignore[method-assign]

# -- cProfile while <dir>/on exists -----------------------------------------------------


def _toggle_profile() -> None:
    """Called on the event loop: start profiling when the switch file appears."""
    global _profiling
    if CPROFILE_DIR is None or _profiling or not (CPROFILE_DIR / "on").exists():
        return
    _profiling = True
    _loop_prof.enable()
    asyncio.get_running_loop().call_later(0.1, _poll_profile_off)


def _poll_profile_off() -> None:
    global _profiling
    assert CPROFILE_DIR is not None
    if (CPROFILE_DIR / "on").exists():
        asyncio.get_running_loop().call_later(0.1, _poll_profile_off)
        return
    _loop_prof.disable()
    _profiling = False
    _loop_prof.dump_stats(str(CPROFILE_DIR / "loop.prof"))
    _score_prof.dump_stats(str(CPROFILE_DIR / "score.prof"))


if __name__ == "__main__":
    from workers.cli import main

    main()
