"""`groundstream bench judge`: what the judge costs and buys, on labelled data, with a
scripted judge of a stated accuracy on a real socket (`workers.bench.judge_fake`).

In-process (no broker), on each DATA file:

* **The frontier.** Every answer is scored once as the geometry stage scores it (the
  policy's grounding model, the bundled encoder, the shipped claim head) and the judge is
  asked about every one of them once, over HTTP, as the judge stage asks it (windowed
  context, `ChatEndpoint.judge`). For each judge share the band of P(grounded) is fitted
  (`pipeline.fit.judge_share.fit_bands`, the judge's stated accuracy, `--max-accept-error`)
  on the other folds (answers sharing a context in one fold) and applied to the held-out
  fold; its row counts what the answers would get from the judge's actual replies: right
  answers that reach state, the share of state that is wrong, the share asked. "every
  answer" asks the judge about all of them.
* **Tokens per judged answer**, with the context windows of `pipeline.judge.context`
  (what the server received) and with the whole context (the same request built with the
  whole evidence, not sent), over the answers the chosen share asks about and over all.
* **Cache hits on a resubmitted run**: the same candidates a second time through the
  verdict cache's key and rule (`pipeline.judge.verdict_cache`): the calls the server gets.

With `--kafka`, on the real broker (started when none answers): two judge workers of one
group (the stage loops `groundstream worker judge` runs, in this process), the rules stage
and the terminal writer, a route budget of `--calls-per-minute` (over budget: review) and
`--kafka-n` candidates of the first file (with their geometry score, so the judge reads
the claim head's windows) produced to `judge` within `--produce-seconds`; then the judged
ones resubmitted with new ids. It reports the most calls the server saw in any 60 s (goal
<= the budget), every candidate with exactly one outcome, none in state without the
judge's yes (a geometry accept would do too; this bench starts at the judge), and the calls
the resubmission cost (goal 0: cache hits).
"""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from workers.bench.procs import BenchError
from workers.bench.report import Result

WINDOW_S = 60.0


@dataclass
class Options:
    data: tuple[Path, ...]
    accuracy: float = 0.85
    share: float = 0.5
    max_error: float = 0.05
    limit: int | None = None
    backend: str = "onnx"
    policy: Path | None = None
    folds: int = 5
    kafka: bool = False
    bootstrap: str = "127.0.0.1:9092"
    kafka_n: int = 300
    produce_seconds: float = 20.0
    calls_per_minute: int = 60
    partitions: int = 4
    resubmit: int = 50
    timeout: float = 300.0
    max_context_tokens: int | None = None
    """The judge's `[judge] max_context_tokens` (default: the policy's)."""
    kafka_only: bool = False
    """Only the Kafka part, on unscored candidates (no geometry: the judge ranks a long
    context's windows by shared words), without the minutes of scoring."""


# ------------------------------------------------------------------ pure parts --


def most_in_window(times: Iterable[float], window: float = WINDOW_S) -> int:
    """The most of `times` in any half-open interval [t, t + window): a sliding window
    over the sorted times (the busiest window starts at one of them)."""
    ordered = sorted(times)
    best, start = 0, 0
    for end, t in enumerate(ordered):
        while ordered[start] <= t - window:
            start += 1
        best = max(best, end - start + 1)
    return best


@dataclass(frozen=True, slots=True)
class Row:
    """What answers get under one judge share (or from asking about every answer)."""

    label: str
    n: int
    n_right: int
    right: int
    """Right (grounded) answers that reach state."""
    wrong: int
    """Ungrounded answers that reach state."""
    asked: int

    @property
    def right_share(self) -> float:
        return self.right / self.n_right if self.n_right else 0.0

    @property
    def wrong_share(self) -> float:
        total = self.right + self.wrong
        return self.wrong / total if total else 0.0

    @property
    def asked_share(self) -> float:
        return self.asked / self.n if self.n else 0.0


def outcome_row(
    label: str, y: np.ndarray, accepted: np.ndarray, asked: np.ndarray, yes: np.ndarray
) -> Row:
    """State = accepted unjudged, or asked and the judge said yes."""
    y, accepted, asked, yes = (np.asarray(a, dtype=bool) for a in (y, accepted, asked, yes))
    state = accepted | (asked & yes)
    return Row(
        label,
        int(y.size),
        int(y.sum()),
        int((state & y).sum()),
        int((state & ~y).sum()),
        int(asked.sum()),
    )


def frontier(
    p: np.ndarray,
    y: np.ndarray,
    yes: np.ndarray,
    groups: Sequence[str],
    shares: Sequence[float],
    *,
    accuracy: float,
    max_error: float,
    folds: int = 5,
) -> list[Row]:
    """A row per share, the band fitted out of fold for a judge of `accuracy` and applied
    to the judge's actual replies `yes`; then asking about every answer."""
    from pipeline.fit.folds import group_folds
    from pipeline.fit.judge_share import fit_bands

    p, y, yes = np.asarray(p, float), np.asarray(y, bool), np.asarray(yes, bool)
    fold = group_folds(groups, folds)
    accepted = {s: np.zeros(y.size, bool) for s in shares}
    asked = {s: np.zeros(y.size, bool) for s in shares}
    for k in range(folds):
        test = fold == k
        if not test.any():
            continue
        train = ~test if (~test).any() else test
        bands = fit_bands(p[train], y[train], shares, max_error, accuracy)
        for s, band in bands.items():
            accepted[s][test] = p[test] >= band.accept
            asked[s][test] = (p[test] >= band.reject) & (p[test] < band.accept)
    rows = [outcome_row(f"{s:.2f}", y, accepted[s], asked[s], yes) for s in shares]
    everyone = np.ones(y.size, bool)
    rows.append(outcome_row("every answer", y, ~everyone, everyone, yes))
    return rows


def render_frontier(name: str, rows: Sequence[Row], chosen: str | None = None) -> list[str]:
    """The frontier as lines: judge share → right answers to state, state wrong, asked."""
    n, n_right = rows[0].n, rows[0].n_right
    lines = [
        f"{name}: {n} answers, {n_right} right; bands fitted out of fold",
        f"  {'judge share':<14}{'right→state':>13}{'state wrong':>13}{'asked':>13}",
    ]
    for r in rows:
        label = r.label + (" *" if r.label == chosen else "")
        lines.append(
            f"  {label:<14}{r.right_share:>13.1%}{r.wrong_share:>13.1%}{r.asked_share:>13.1%}"
        )
    return lines


@dataclass
class Audit:
    """What the decision records say of a set of candidates."""

    candidates: int
    with_one_outcome: int = 0
    without_outcome: list[str] = field(default_factory=list)
    with_several: list[str] = field(default_factory=list)
    in_state: int = 0
    unearned_state: list[str] = field(default_factory=list)
    """In state with neither the judge's yes (an accept, no gate) nor a switch accept."""
    topics: Counter = field(default_factory=Counter)
    cache_hits: int = 0
    judged: list[str] = field(default_factory=list)
    """Candidates the judge gave a clear yes or no (not over budget, not from the cache)."""

    @property
    def ok(self) -> bool:
        return self.with_one_outcome == self.candidates and not self.unearned_state


def audit(records: Iterable[Mapping[str, Any]], ids: Iterable[str]) -> Audit:
    """Exactly one outcome per candidate in `ids`, and state only after the judge's yes or
    the switch's accept (geometry's word)."""
    ids = set(ids)
    outcomes: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    judged: dict[str, Mapping[str, Any]] = {}
    switched: dict[str, Mapping[str, Any]] = {}
    for r in records:
        cid = r.get("candidate_id")
        if cid not in ids:
            continue
        stage = r.get("stage")
        if stage == "outcome":
            outcomes[cid].append(r)
        elif stage == "judge":
            judged[cid] = r
        elif stage == "switch":
            switched[cid] = r
    out = Audit(len(ids))
    for cid in sorted(ids):
        got = outcomes.get(cid, [])
        if not got:
            out.without_outcome.append(cid)
            continue
        if len(got) > 1:
            out.with_several.append(cid)
            continue
        out.with_one_outcome += 1
        topic = str(got[0].get("topic"))
        out.topics[topic] += 1
        if topic == "state":
            out.in_state += 1
            j, s = judged.get(cid), switched.get(cid)
            by_judge = j is not None and j.get("action") == "accept" and j.get("gate") is None
            by_geometry = s is not None and s.get("action") == "accept"
            if not (by_judge or by_geometry):
                out.unearned_state.append(cid)
    for cid, r in judged.items():
        evidence = r.get("evidence") or {}
        if evidence.get("cache") == "hit":
            out.cache_hits += 1
        elif r.get("level") in ("yes", "no"):  # asked: a clear verdict (vetoed or not)
            out.judged.append(cid)
    out.judged.sort()
    return out


# ------------------------------------------------------------ in-process part --


QA_KEYS = frozenset({"knowledge", "question", "right_answer", "hallucinated_answer"})


def labelled_answers(path: Path, limit: int | None = None) -> list[tuple[dict[str, Any], bool]]:
    """The answers of a labelled file that has contexts, as candidates with their label:
    candidate JSON lines with `metadata.label` right / hallucinated (RAGTruth, the
    fixtures), or HaluEval QA records (two answers each, ids as `groundstream eval` names
    them). The bench reads files in place (the layers keep it from `workers.eval`)."""
    from pipeline.errors import DataFileError
    from topics.codec import loads

    try:
        lines = path.read_bytes().decode("utf-8").splitlines()
    except UnicodeDecodeError as exc:
        raise DataFileError(f"{path}: not UTF-8 text ({exc.reason})") from None
    out: list[tuple[dict[str, Any], bool]] = []
    records = 0
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        if limit is not None and records >= limit:
            break
        records += 1
        try:
            record = loads(line)
        except ValueError:
            raise DataFileError(f"{path}: line {number} is not a JSON line") from None
        if not isinstance(record, dict):
            raise DataFileError(f"{path}: line {number} is not a JSON object")
        if record.keys() >= QA_KEYS:
            group = f"halueval-qa-{records - 1}"
            for suffix, key, grounded in (
                ("right", "right_answer", True),
                ("hallucinated", "hallucinated_answer", False),
            ):
                cid = f"{group}-{suffix}"
                candidate = {
                    "id": cid,
                    "session_id": cid,
                    "question": str(record["question"]),
                    "context": record["knowledge"],
                    "response": str(record[key]),
                    "metadata": {"dataset": "halueval_qa", "group_id": group},
                }
                out.append((candidate, grounded))
            continue
        label = (record.get("metadata") or {}).get("label")
        if label not in ("right", "hallucinated") or not {"id", "response"} <= record.keys():
            raise DataFileError(
                f"{path}: line {number}: expected a candidate with metadata.label right or"
                " hallucinated, or a HaluEval QA record"
            )
        candidate = {**record, "id": str(record["id"])}
        candidate.setdefault("session_id", candidate["id"])
        out.append((candidate, label == "right"))
    return out


@dataclass
class Scored:
    """One data file's answers, scored, with what the judge reads of each."""

    name: str
    candidates: list[Any]  # topics.schema.Candidate
    grounded: np.ndarray
    p: np.ndarray
    scores: list[Any]
    evidence: list[tuple[str, ...] | None]
    read: list[Any]  # pipeline.judge.context.JudgeContext
    groups: list[str]


def score_file(path: Path, policy: Any, encoder: Any, limit: int | None) -> Scored:
    """Every answer with a context and P(grounded), scored as the geometry stage scores it."""
    from pipeline.guards.domain import task_of
    from pipeline.judge.context import judge_context
    from pipeline.policy.defaults import default_claim_reader
    from pipeline.scores.batch import score_batch
    from pipeline.scores.results import GroundingScore
    from pipeline.stages.geometry import route_of
    from pipeline.stages.inputs import evidence_context
    from topics.schema import GeometryPayload, candidate_from_dict
    from workers.clients.claims import load_head

    labelled = [(c, y) for c, y in labelled_answers(path, limit) if c.get("context")]
    candidates = [candidate_from_dict(c) for c, _ in labelled]
    routes = [route_of(c, policy, "default") for c in candidates]
    evidence = [evidence_context(c, r)[0] for c, r in zip(candidates, routes, strict=True)]
    reference = None if policy.reference is None else np.array(policy.reference)
    by_route: dict[str, list[int]] = defaultdict(list)
    for i, route in enumerate(routes):
        by_route[route.name].append(i)
    scores: list[Any] = [None] * len(candidates)
    head, reader = load_head(), default_claim_reader()
    for name, indices in by_route.items():
        got = score_batch(
            [(candidates[i].question, evidence[i] or (), candidates[i].response) for i in indices],
            encoder,
            reference,
            policy.grounding_for(name),
            [task_of(candidates[i].metadata) for i in indices],
            head,
            reader,
        )
        for i, score in zip(indices, got, strict=True):
            scores[i] = score
    keep = [i for i, s in enumerate(scores) if isinstance(s, GroundingScore)]
    if not keep:
        raise BenchError(f"{path}: no answer got a P(grounded) (does the policy have a model?)")
    read = []
    for i in keep:
        ranked = GeometryPayload.from_dict(GeometryPayload(scores[i]).to_dict()).windows or ()
        read.append(
            judge_context(
                evidence[i], candidates[i].response, ranked, policy.judge.max_context_tokens
            )
        )
    return Scored(
        path.name,
        [candidates[i] for i in keep],
        np.array([labelled[i][1] for i in keep], bool),
        np.array([scores[i].value for i in keep], float),
        [scores[i] for i in keep],
        [evidence[i] for i in keep],
        read,
        [f"{path.name}:{'␞'.join(evidence[i] or ())}" for i in keep],
    )


def whole_tokens(scored: Scored, model: str, top_logprobs: int) -> list[int]:
    """Each answer's judge prompt with the whole evidence, estimated as the stage does."""
    from pipeline.encoding.tokens import estimate_request_tokens
    from pipeline.judge.question import build_judge_messages, build_judge_request

    out = []
    for c, e in zip(scored.candidates, scored.evidence, strict=True):
        body = build_judge_request(
            model, build_judge_messages(c.question, e, c.response), top_logprobs=top_logprobs
        )
        out.append(estimate_request_tokens(body))
    return out


async def ask_all(
    endpoint: Any,
    scored: Scored,
    config: Any,
    cache: dict[str, Any] | None,
    model: str,
    concurrency: int = 16,
) -> tuple[np.ndarray, int]:
    """Ask the judge about every answer (through `cache` when given: the verdict cache's
    key and rule); its yes per answer, and the hits."""
    from pipeline.judge.question import JudgeVerdict, decide_judge
    from pipeline.judge.verdict_cache import cache_key, cacheable

    gate = asyncio.Semaphore(concurrency)
    hits = 0

    async def one(i: int) -> bool:
        nonlocal hits
        c, read = scored.candidates[i], scored.read[i]
        key = cache_key(c.question, read.chunks, c.response, model, config.top_logprobs)
        readout = None if cache is None else cache.get(key)
        if readout is not None:
            hits += 1
        else:
            async with gate:
                readout, _ = await endpoint.judge(c.question, read.chunks, c.response, config)
            if cache is not None and cacheable(readout, config):
                cache[key] = readout
        if readout is None:
            raise BenchError(f"the scripted judge gave no reply for {c.id}")
        return decide_judge(readout, config).verdict is JudgeVerdict.YES

    yes = await asyncio.gather(*(one(i) for i in range(len(scored.candidates))))
    return np.array(yes, bool), hits


def _judge_for(files: Sequence[Scored], accuracy: float) -> Any:
    from workers.bench.judge_fake import ScriptedJudge

    answers = {
        (c.question, c.response): (c.id, bool(y))
        for s in files
        for c, y in zip(s.candidates, s.grounded, strict=True)
    }
    return ScriptedJudge(answers, accuracy)


MODEL = "bench-judge"


async def in_process(opts: Options, files: Sequence[Scored], policy: Any) -> dict[str, Any]:
    from pipeline.fit.judge_share import JudgeShare
    from pipeline.policy.breaker import BreakerConfig
    from workers.clients.llm import ChatEndpoint

    shares = JudgeShare(opts.share, opts.accuracy).shares
    chosen = f"{opts.share:.2f}"
    config = policy.judge
    server = await _judge_for(files, opts.accuracy).start()
    figures: dict[str, Any] = {}
    try:
        async with ChatEndpoint(server.base_url, MODEL, BreakerConfig()) as endpoint:
            for s in files:
                before = len(server.calls)
                cache: dict[str, Any] = {}
                yes, _ = await ask_all(endpoint, s, config, cache, MODEL)
                first = server.calls[before:]
                sent = {c.candidate_id: c.prompt_tokens for c in first}
                again, hits = await ask_all(endpoint, s, config, cache, MODEL)
                second_calls = len(server.calls) - before - len(first)
                if not np.array_equal(yes, again):
                    raise BenchError(f"{s.name}: the cached verdicts differ from the first pass")
                rows = frontier(
                    s.p,
                    s.grounded,
                    yes,
                    s.groups,
                    shares,
                    accuracy=opts.accuracy,
                    max_error=opts.max_error,
                    folds=opts.folds,
                )
                for line in render_frontier(s.name, rows, chosen):
                    print(line, flush=True)
                whole = np.array(whole_tokens(s, MODEL, config.top_logprobs), float)
                windowed = np.array([sent[c.id] for c in s.candidates], float)
                from pipeline.fit.judge_share import fit_bands

                band = fit_bands(s.p, s.grounded, [opts.share], opts.max_error, opts.accuracy)
                b = band[opts.share]
                in_band = (s.p >= b.reject) & (s.p < b.accept)
                subsets = {"asked at " + chosen: in_band, "every answer": np.ones(s.p.size, bool)}
                tokens = {}
                for label, mask in subsets.items():
                    if not mask.any():
                        continue
                    ratio = float(windowed[mask].sum() / whole[mask].sum())
                    tokens[label] = ratio
                    print(
                        f"  tokens per judged answer ({label}, {int(mask.sum())}): whole context"
                        f" {whole[mask].mean():.0f}, with windows {windowed[mask].mean():.0f}"
                        f" (ratio {ratio:.3f})",
                        flush=True,
                    )
                print(
                    f"  resubmitted: {len(s.candidates)} again, {hits} cache hits,"
                    f" {second_calls} calls (first pass {len(first)} calls)",
                    flush=True,
                )
                figures[s.name] = {
                    "rows": rows,
                    "tokens": tokens,
                    "second_calls": second_calls,
                    "hits": hits,
                    "first_calls": len(first),
                }
    finally:
        await server.stop()
    return figures


# ------------------------------------------------------------------- Kafka part --


def _policy_toml(path: Path, calls_per_minute: int, max_context_tokens: int) -> Path:
    path.write_text(
        "[policy]\n"
        'version = "bench-judge-1"\n'
        "[judge]\n"
        f"max_context_tokens = {max_context_tokens}\n"
        "[routes.default]\n"
        'mode = "evaluate"\n'
        "breaker_threshold = 1000\n"
        f"judge_calls_per_minute = {calls_per_minute}\n"
        'over_budget = "review"\n'
        "judge_cache_ttl_seconds = 3600\n"
    )
    return path


def _envelopes(
    scored: Scored, indices: Sequence[int], prefix: str
) -> list[tuple[str, bytes, bytes]]:
    from dataclasses import replace

    from topics.schema import Envelope, GeometryPayload

    out = []
    for n, i in enumerate(indices):
        c = scored.candidates[i]
        session = c.session_id or c.id
        cand = replace(c, id=f"{prefix}-{n}", route="default")
        score = scored.scores[i]
        env = Envelope(
            candidate=cand,
            route="default",
            mode="evaluate",
            geometry=None if score is None else GeometryPayload(score),
        )
        out.append((cand.id, session.encode(), env.encode()))
    return out


async def _decisions(settings: Any, ids: set[str], timeout: float) -> list[dict[str, Any]]:
    """The decision records, once every id in `ids` has an outcome (or the timeout)."""
    from topics.codec import loads
    from topics.names import Topic
    from workers.runtime.review import read_all

    deadline = time.monotonic() + timeout
    while True:
        got = [loads(r.value) for r in await read_all(settings, Topic.DECISIONS, 30.0)]
        done = {r.get("candidate_id") for r in got if r.get("stage") == "outcome"} & ids
        if done == ids:
            return got
        if time.monotonic() > deadline:
            raise BenchError(f"{len(ids - done)} candidates got no outcome in {timeout:.0f} s")
        await asyncio.sleep(1.0)


async def _start_loops(settings: Any, partitions: int) -> dict[str, tuple[Any, asyncio.Task]]:
    from workers.runtime.runner import NotReady, build_loop, instance_settings, until_ready

    loops: dict[str, tuple[Any, asyncio.Task]] = {}
    for name in ("judge@j1", "judge@j2", "rules", "terminal"):
        stage, _, instance = name.partition("@")
        mine = instance_settings(settings, instance or "bench", partitions=partitions)
        loop = build_loop(stage, mine)
        loops[name] = (loop, asyncio.create_task(loop.run()))
    try:
        await until_ready(
            {n: loop for n, (loop, _) in loops.items()},
            partitions,
            tasks={n: task for n, (_, task) in loops.items()},
        )
    except NotReady as exc:
        raise BenchError(str(exc)) from None
    return loops


async def _stop_loops(loops: Mapping[str, tuple[Any, asyncio.Task]]) -> None:
    for loop, task in loops.values():
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        with contextlib.suppress(Exception):
            await loop.stage.close()


async def on_kafka(opts: Options, scored: Scored, max_context_tokens: int) -> dict[str, Any]:
    from topics.admin import create_topics
    from topics.names import Topic
    from workers.bench.kafka import produce
    from workers.bench.procs import connection, delete_topics
    from workers.runtime.settings import Settings

    n = min(opts.kafka_n, len(scored.candidates))
    prefix = f"bench-judge-{uuid.uuid4().hex[:8]}."
    server = await _judge_for([scored], opts.accuracy).start()
    loops: dict[str, tuple[Any, asyncio.Task]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-judge-") as tmp:
        settings = Settings(
            bootstrap_servers=opts.bootstrap,
            topic_prefix=prefix,
            partitions=opts.partitions,
            data_dir=str(Path(tmp) / "data"),
            policy=str(
                _policy_toml(Path(tmp) / "policy.toml", opts.calls_per_minute, max_context_tokens)
            ),
            judge_url=server.base_url,
            judge_model=MODEL,
        )
        try:
            await create_topics(connection(opts.bootstrap), prefix, opts.partitions, 1)
            loops = await _start_loops(settings, opts.partitions)
            first = _envelopes(scored, range(n), "bj")
            # The labels the fake reads come from the candidates' texts, not their ids:
            # the new ids err where the originals did (same texts, same answers).
            topic = Topic.JUDGE.full(prefix)
            started = time.monotonic()
            await produce(
                opts.bootstrap, topic, [(k, v) for _, k, v in first], rate=n / opts.produce_seconds
            )
            produced_s = time.monotonic() - started
            ids = {cid for cid, _, _ in first}
            got = await _decisions(settings, ids, opts.timeout)
            one = audit(got, ids)
            calls_first = len(server.calls)
            # The judged ones again, new ids, same sessions: the cache answers.
            judged = [int(cid.split("-")[1]) for cid in one.judged][: opts.resubmit]
            again = _envelopes(scored, judged, "bj-again")
            await produce(opts.bootstrap, topic, [(k, v) for _, k, v in again])
            again_ids = {cid for cid, _, _ in again}
            got = await _decisions(settings, ids | again_ids, opts.timeout)
            two = audit(got, again_ids)
        finally:
            await _stop_loops(loops)
            await server.stop()
            with contextlib.suppress(Exception):
                await delete_topics(opts.bootstrap, prefix)
    most = most_in_window([c.at for c in server.calls])
    print(
        f"kafka: {n} candidates produced in {produced_s:.1f} s to two judge workers"
        f" ({opts.partitions} partitions), route budget {opts.calls_per_minute} calls a minute:"
        f" {calls_first} calls, most in any 60 s {most} (goal <= {opts.calls_per_minute});"
        f" {one.with_one_outcome}/{n} with exactly one outcome {dict(one.topics)};"
        f" in state without the judge's yes or a geometry accept: {len(one.unearned_state)}",
        flush=True,
    )
    print(
        f"kafka: {len(again_ids)} judged candidates resubmitted: {two.cache_hits} cache hits,"
        f" {len(server.calls) - calls_first} calls;"
        f" {two.with_one_outcome}/{len(again_ids)} with exactly one outcome",
        flush=True,
    )
    return {
        "n": n,
        "produced_s": produced_s,
        "calls": calls_first,
        "most": most,
        "first": one,
        "again": two,
        "again_calls": len(server.calls) - calls_first,
    }


# ----------------------------------------------------------------------- run --


def run(opts: Options) -> Result:
    from pipeline.encoding.encoder import OnFirstUse
    from pipeline.policy.defaults import default_policy
    from pipeline.policy.document import load_policy

    if not opts.data:
        raise BenchError("give labelled DATA files")
    policy = default_policy() if opts.policy is None else load_policy(opts.policy)
    if opts.max_context_tokens is not None:
        from dataclasses import replace

        from pipeline.errors import PolicyError

        try:
            judge = replace(policy.judge, max_context_tokens=opts.max_context_tokens)
        except PolicyError as exc:
            raise BenchError(str(exc)) from None
        policy = replace(policy, judge=judge)
    if opts.kafka_only:
        return _kafka_only(opts, policy.judge.max_context_tokens)
    encoder = OnFirstUse(policy.encoder_model, opts.backend)  # after DATA is read
    t0 = time.perf_counter()
    files = [score_file(path, policy, encoder, opts.limit) for path in opts.data]
    scored_s = time.perf_counter() - t0
    print(
        f"scored {sum(len(f.candidates) for f in files)} answers in {scored_s:.0f} s"
        f" ({opts.backend}); judge right {opts.accuracy:.0%} of the time,"
        f" bands at most {opts.max_error:.1%} of state wrong, {opts.folds} folds,"
        f" judge.max_context_tokens {policy.judge.max_context_tokens}",
        flush=True,
    )
    if opts.kafka:
        from workers.bench.procs import ensure_broker

        ensure_broker(opts.bootstrap)
    figures = asyncio.run(in_process(opts, files, policy))
    limit = policy.judge.max_context_tokens
    kafka = asyncio.run(on_kafka(opts, files[0], limit)) if opts.kafka else None
    first = figures[files[0].name]
    chosen = f"asked at {opts.share:.2f}"
    ratio = first["tokens"].get(chosen, first["tokens"]["every answer"])
    rates: dict[str, float] = {}
    for name, f in figures.items():
        row = next(r for r in f["rows"] if r.label == f"{opts.share:.2f}")
        every = f["rows"][-1]
        rates[f"{name} right→state at {opts.share:.2f}"] = 100 * row.right_share
        rates[f"{name} state wrong at {opts.share:.2f}"] = 100 * row.wrong_share
        rates[f"{name} state wrong judging every answer"] = 100 * every.wrong_share
        rates[f"{name} resubmitted calls"] = f["second_calls"]
    resubmitted = sum(len(f.candidates) for f in files)
    also: dict[str, tuple[float, float]] = {
        "resubmitted answered by the cache": (
            sum(f["hits"] for f in figures.values()) / resubmitted if resubmitted else 0.0,
            0.99,
        )
    }
    notes: dict[str, object] = {
        "data": [str(p) for p in opts.data],
        "accuracy": opts.accuracy,
        "files": {
            name: {
                "frontier": [
                    {
                        "share": r.label,
                        "right": r.right_share,
                        "wrong": r.wrong_share,
                        "asked": r.asked_share,
                    }
                    for r in f["rows"]
                ],
                "tokens_ratio": f["tokens"],
                "first_calls": f["first_calls"],
                "resubmitted_hits": f["hits"],
                "resubmitted_calls": f["second_calls"],
            }
            for name, f in figures.items()
        },
    }
    if kafka is not None:
        rates["kafka most calls in 60 s"] = kafka["most"]
        rates["kafka resubmitted calls"] = kafka["again_calls"]
        also["kafka 60 s windows within budget"] = (
            float(kafka["most"] <= opts.calls_per_minute),
            1.0,
        )
        also["kafka exactly one outcome, none unearned in state"] = (
            float(kafka["first"].ok and kafka["again"].ok),
            1.0,
        )
        first_audit, again_audit = kafka["first"], kafka["again"]
        notes["kafka"] = {
            "n": kafka["n"],
            "produced_s": round(kafka["produced_s"], 2),
            "calls": kafka["calls"],
            "most_in_60s": kafka["most"],
            "calls_per_minute": opts.calls_per_minute,
            "with_one_outcome": first_audit.with_one_outcome,
            "outcomes": dict(first_audit.topics),
            "unearned_state": len(first_audit.unearned_state),
            "judged": len(first_audit.judged),
            "resubmitted": again_audit.candidates,
            "resubmitted_hits": again_audit.cache_hits,
            "resubmitted_calls": kafka["again_calls"],
            "resubmitted_with_one_outcome": again_audit.with_one_outcome,
        }
    return Result(
        "judge",
        ratio,
        0.60,
        "x",
        lower_is_better=True,
        rates=rates,
        notes=notes,
        also=also,
    )


def unscored(path: Path, n: int) -> Scored:
    """The first `n` answers with a context of `path`, not scored (`--kafka-only`)."""
    from topics.schema import candidate_from_dict

    labelled = [(c, y) for c, y in labelled_answers(path) if c.get("context")][:n]
    if not labelled:
        raise BenchError(f"{path}: no labelled answer with a context")
    candidates = [candidate_from_dict(c) for c, _ in labelled]
    grounded = np.array([y for _, y in labelled], bool)
    none: list[Any] = [None] * len(candidates)
    return Scored(path.name, candidates, grounded, np.zeros(0), none, none, [], [])


def _kafka_only(opts: Options, max_context_tokens: int) -> Result:
    from workers.bench.procs import ensure_broker

    ensure_broker(opts.bootstrap)
    kafka = asyncio.run(on_kafka(opts, unscored(opts.data[0], opts.kafka_n), max_context_tokens))
    first, again = kafka["first"], kafka["again"]
    return Result(
        "judge",
        float(kafka["most"]),
        float(opts.calls_per_minute),
        " calls in the busiest 60 s",
        lower_is_better=True,
        rates={
            "candidates": kafka["n"],
            "produced in s": kafka["produced_s"],
            "calls": kafka["calls"],
            "with exactly one outcome": first.with_one_outcome,
            "in state unearned": len(first.unearned_state),
            "resubmitted": again.candidates,
            "resubmitted cache hits": again.cache_hits,
            "resubmitted calls": kafka["again_calls"],
        },
        notes={"data": str(opts.data[0]), "kafka_only": True},
        also={
            "exactly one outcome, none unearned in state": (
                float(first.ok and again.ok),
                1.0,
            ),
            "resubmitted answered by the cache": (
                again.cache_hits / again.candidates if again.candidates else 1.0,
                1.0,
            ),
        },
    )
