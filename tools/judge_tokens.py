"""Tokens per judged answer with and without the judge's windowing (issue 31 item 5).

    PYTHONPATH=. python tools/judge_tokens.py ../shared/data/ragtruth_dev.jsonl \
        [--limit N] [--max-context-tokens 512 384 256] [--backend onnx]

Scores every answer as the geometry stage does (the default policy, the bundled encoder,
the shipped claim head), carries the claim head's window ranking through the envelope's
wire form, and builds the judge's request twice: with the whole evidence, and with the
context `pipeline.judge.context.judge_context` chooses. Prints, per task and overall, the
mean prompt tokens of each and their ratio (sum windowed / sum whole), for every answer
and for the answers a ladder with a judge configured sends to it ("judged": deferred by
the switch, or escalated through consistency, which has no samples here). Tokens are counted two
ways: the 4-characters-a-token estimate the judge stage records when a server reports no
usage, and a real subword tokenizer (the bundled encoder's WordPiece) as a cross-check.
No endpoint is called.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer

from pipeline.encoding.encoder import BACKENDS, default_model_path, load_encoder
from pipeline.encoding.tokens import estimate_request_tokens
from pipeline.guards.domain import task_of
from pipeline.judge.context import ContextSelection, judge_context
from pipeline.judge.question import build_judge_messages, build_judge_request
from pipeline.policy.defaults import default_claim_reader, default_policy
from pipeline.policy.deferral import defer_to_judge, reader_score
from pipeline.rungs.grounding_switch import SwitchAction
from pipeline.scores.batch import score_batch
from pipeline.stages.geometry import route_of
from pipeline.stages.inputs import evidence_context
from topics.schema import GeometryPayload, candidate_from_dict
from workers.clients.claims import load_head
from workers.eval.datasets import load_labelled


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data", type=Path)
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--max-context-tokens", type=int, nargs="+", default=None)
    parser.add_argument("--backend", choices=BACKENDS, default="torch")
    args = parser.parse_args()
    policy = default_policy()
    limits = args.max_context_tokens or [policy.judge.max_context_tokens]
    encoder = load_encoder(policy.encoder_model, args.backend)
    wordpiece = Tokenizer.from_file(str(default_model_path() / "tokenizer.json"))
    wordpiece.no_truncation()
    reference = None if policy.reference is None else np.array(policy.reference)
    labelled = load_labelled(args.data, limit=args.limit)
    candidates = [candidate_from_dict(item.candidate) for item in labelled]
    candidates = [c for c in candidates if c.context_chunks]
    routes = [route_of(c, policy, "default") for c in candidates]
    evidence = [evidence_context(c, r)[0] for c, r in zip(candidates, routes, strict=True)]
    by_route: dict[str, list[int]] = defaultdict(list)
    for i, route in enumerate(routes):
        by_route[route.name].append(i)
    scores: list = [None] * len(candidates)
    for name, indices in by_route.items():
        scored = score_batch(
            [(candidates[i].question, evidence[i], candidates[i].response) for i in indices],
            encoder,
            reference,
            policy.grounding_for(name),
            [task_of(candidates[i].metadata) for i in indices],
            load_head(),
            default_claim_reader(),
        )
        for i, score in zip(indices, scored, strict=True):
            scores[i] = score

    def prompt(question: str, context, response: str) -> tuple[int, int]:
        body = build_judge_request("judge", build_judge_messages(question, context, response))
        wire = "\n".join(str(m["content"]) for m in body["messages"])  # type: ignore[index]
        return estimate_request_tokens(body), len(wordpiece.encode(wire).ids)

    wholes = [prompt(c.question, e, c.response) for c, e in zip(candidates, evidence, strict=True)]
    judged: list[bool] = []
    for route, score in zip(routes, scores, strict=True):
        # With a judge configured: what the switch defers to it, and what it escalates
        # (consistency holds no samples here, so it defers those to the judge too).
        decision = policy.switch(route).decide(score)
        grounding = policy.grounding_for(route.name)
        deferred = defer_to_judge(decision, route, True, reader_score(score, grounding))
        judged.append(deferred is not None or decision.action is SwitchAction.ESCALATE)
    for limit in limits:
        rows: dict[str, list[Row]] = defaultdict(list)
        selections: dict[str, int] = defaultdict(int)
        for i, c in enumerate(candidates):
            # The wire form, as the judge worker reads it back off the envelope.
            ranked = GeometryPayload.from_dict(GeometryPayload(scores[i]).to_dict()).windows or ()
            read = judge_context(evidence[i], c.response, ranked, limit)
            selections[read.selection.value] += 1
            windowed = read.selection is not ContextSelection.WHOLE
            best = {claim[0] for claim in ranked if claim}
            row = Row(
                *wholes[i],
                *prompt(c.question, read.chunks, c.response),
                windowed,
                judged[i],
                windowed and best <= set(read.windows),
            )
            rows[str(task_of(c.metadata) or "other")].append(row)
            rows["all"].append(row)
        print(f"\n{args.data.name}  judge.max_context_tokens = {limit}  {dict(selections)}")
        print(
            f"{'task':<10}{'subset':<8}{'n':>6}{'windowed':>10}{'all best':>10}"
            f"{'whole est':>11}{'cut est':>9}{'ratio':>7}{'whole wp':>10}{'cut wp':>8}{'ratio':>7}"
        )
        for task, got in sorted(rows.items(), key=lambda kv: (kv[0] == "all", kv[0])):
            for subset, picked in (("all", got), ("judged", [r for r in got if r.judged])):
                if picked:
                    print(_line(task, subset, picked))
    print(json.dumps({"candidates": len(candidates), "judged": sum(judged)}))


@dataclass(frozen=True)
class Row:
    """One answer's judge prompt, whole and as sent: estimated and WordPiece tokens."""

    whole_est: int
    whole_wp: int
    cut_est: int
    cut_wp: int
    windowed: bool
    judged: bool
    all_best: bool
    """Windowed, and every claim's best window (by the claim head) is in the prompt."""


def _line(task: str, subset: str, picked: list[Row]) -> str:
    """One table row: counts, mean tokens whole and cut, and sum(cut) / sum(whole)."""
    n = len(picked)
    windowed = sum(r.windowed for r in picked)
    kept = sum(r.all_best for r in picked) / windowed if windowed else float("nan")
    whole_est, cut_est = (sum(r.whole_est for r in picked), sum(r.cut_est for r in picked))
    whole_wp, cut_wp = (sum(r.whole_wp for r in picked), sum(r.cut_wp for r in picked))
    return (
        f"{task:<10}{subset:<8}{n:>6}{windowed / n:>10.0%}{kept:>10.0%}"
        f"{whole_est / n:>11.0f}{cut_est / n:>9.0f}{cut_est / whole_est:>7.3f}"
        f"{whole_wp / n:>10.0f}{cut_wp / n:>8.0f}{cut_wp / whole_wp:>7.3f}"
    )


if __name__ == "__main__":
    main()
