"""A judge (or sampler) URL without a model: found at /models when the endpoint serves one,
else refused in one line naming them and the setting."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from workers.clients import discovery
from workers.clients.discovery import EndpointRefused, resolve_model
from workers.runtime import ladder
from workers.runtime.settings import Settings


@pytest.fixture(autouse=True)
def _forget() -> Iterator[None]:
    discovery._FOUND.clear()
    yield
    discovery._FOUND.clear()


@contextmanager
def models(ids: list[str] | None, status: int = 200) -> Iterator[str]:
    """A server whose GET /v1/models lists `ids` (None: a body that is no model list)."""
    seen: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            seen.append(self.path)
            body = {"object": "list", "data": [{"id": i} for i in ids]} if ids is not None else []
            raw = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()
        assert all(p == "/v1/models" for p in seen)


def test_a_set_model_is_never_looked_up() -> None:
    assert resolve_model("judge", "http://127.0.0.1:1/v1", "m") == "m"
    assert resolve_model("judge", "", "") == ""  # no URL: not configured, as before


def test_the_one_model_is_found_and_named_once(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, "groundstream.endpoints")
    with models(["smollm2"]) as url:
        assert resolve_model("judge", url, "") == "smollm2"
        assert resolve_model("judge", url, "") == "smollm2"
    named = [r.getMessage() for r in caplog.records]
    assert len(named) == 1 and "judge model smollm2" in named[0]
    assert "GROUNDSTREAM_JUDGE_MODEL" in named[0]


@pytest.mark.parametrize(
    ("ids", "status", "says"),
    [
        (["a", "b"], 200, "serves 2 models (a, b): set GROUNDSTREAM_JUDGE_MODEL"),
        ([], 200, "serves no model: set GROUNDSTREAM_JUDGE_MODEL"),
        (None, 200, "GROUNDSTREAM_JUDGE_MODEL is not set and"),
        (["a"], 404, "could not be read"),
    ],
)
def test_several_none_or_unreadable_is_one_line(ids, status, says) -> None:
    with models(ids, status) as url, pytest.raises(EndpointRefused) as refused:
        resolve_model("judge", url, "")
    line = str(refused.value)
    assert "\n" not in line and says in line and f"GROUNDSTREAM_JUDGE_URL {url}" in line


def test_unreachable_is_one_line() -> None:
    with pytest.raises(EndpointRefused, match="GROUNDSTREAM_SAMPLER_MODEL is not set"):
        resolve_model("sampler", "http://127.0.0.1:1/v1", "")


def test_the_ladder_finds_both_models() -> None:
    with models(["only"]) as url:
        s = Settings.from_env({}, judge_url=url, sampler_url=url)
        assert ladder.judge(s).model == "only" and ladder.sampler(s).model == "only"
        stage = ladder.row("judge").build(s)
        assert stage.pool.configured  # no record says "no judge endpoint configured"


def test_a_worker_that_sends_answers_to_no_judge_says_so_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from workers.runtime.runner import build_loop

    caplog.set_level(logging.WARNING, "groundstream.runner")
    for stage in ("consistency", "judge", "rules"):
        build_loop(stage, Settings.from_env({}))
    said = [r.getMessage() for r in caplog.records if "no judge configured" in r.getMessage()]
    assert [line.split(":")[0] for line in said] == ["consistency", "judge"]
    assert all("GROUNDSTREAM_JUDGE_URL" in line for line in said)


def test_eval_with_a_judge_url_and_no_model_asks_the_endpoint() -> None:
    """`eval --judge-url` without --judge-model looks the model up as the workers do; it
    used to send a made-up model name ("judge")."""
    from click.testing import CliRunner

    from workers.cli import main

    labelled = Path(__file__).resolve().parents[1] / "fixtures" / "labelled.jsonl"
    with models(["a", "b"]) as url:
        result = CliRunner().invoke(main, ["eval", str(labelled), "--judge-url", url])
    assert result.exit_code != 0
    assert "serves 2 models (a, b): set GROUNDSTREAM_JUDGE_MODEL" in result.output
    assert "Traceback" not in result.output
