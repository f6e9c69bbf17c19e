"""A judge that knows the labels: the fake OpenAI server scripted from a labelled file.

It answers each judge request with yes (p 0.97) when the candidate's label says right
and no (p 0.03) when it says hallucinated, except on the share ``1 - accuracy`` of
candidates where it is wrong on purpose. Which ones is fixed by a hash of the candidate
id, so a run is reproducible and two accuracies err on nested sets. The candidate is
found by its question and response, read back from the request's fenced data block
(the judge never sees an id). The labels are read from the data file when the server
starts; nothing of the data is copied into the repository.

    python -m tests.fakes.scripted_judge ../shared/data/ragtruth_dev.jsonl --accuracy 0.85 \
        --port 8765

prints its base URL, then serves until interrupted; on exit it prints how many requests
it answered. Point the ladder at it with ``GROUNDSTREAM_JUDGE_URL`` (and any
``GROUNDSTREAM_JUDGE_MODEL``), or ``groundstream eval DATA --judge-url URL``.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiohttp import web

from tests.fakes.openai_server import Behaviour, FakeOpenAIServer, Status, Verdict
from workers.bench.judge_fake import judge_is_right, labelled_answer
from workers.eval.datasets import load_labelled

__all__ = ["LabelledJudge", "judge_is_right", "labelled_judge"]

YES, NO = 0.97, 0.03
"""P(yes) of the scripted verdicts: a clear yes and a clear no under the default bar."""


@dataclass
class LabelledJudge(Behaviour):
    """Answers by label; `answers` maps (question, response) to (candidate id, right)."""

    answers: Mapping[tuple[str, str], tuple[str, bool]]
    accuracy: float = 1.0

    async def respond(self, server: FakeOpenAIServer, body: dict[str, Any]) -> web.StreamResponse:
        found = self._lookup(body)
        if found is None:
            return await Status(500, "no labelled candidate for this request").respond(server, body)
        candidate_id, right = found
        says_yes = right if judge_is_right(candidate_id, self.accuracy) else not right
        return await Verdict(p_yes=YES if says_yes else NO).respond(server, body)

    def _lookup(self, body: dict[str, Any]) -> tuple[str, bool] | None:
        return labelled_answer(self.answers, body)


def labelled_judge(data: Path, accuracy: float = 1.0) -> LabelledJudge:
    """The judge for a labelled data file (any format `load_labelled` reads)."""
    answers = {
        (str(i.candidate.get("question", "")), str(i.candidate["response"])): (i.id, i.grounded)
        for i in load_labelled(data)
    }
    return LabelledJudge(answers, accuracy)


async def _serve(judge: LabelledJudge, port: int) -> None:
    server = await FakeOpenAIServer(default=judge, port=port).start()
    print(server.base_url, flush=True)
    done = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, done.set)
    await done.wait()
    print(f"answered {len(server.requests)} requests", flush=True)
    await server.stop()


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data", type=Path, help="labelled data file")
    parser.add_argument("--accuracy", type=float, default=1.0, help="share answered right")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args(argv)
    if not 0.0 <= args.accuracy <= 1.0:
        parser.error("--accuracy must be in [0, 1]")
    asyncio.run(_serve(labelled_judge(args.data, args.accuracy), args.port))


if __name__ == "__main__":
    main()
