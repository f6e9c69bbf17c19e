"""Benchmark inputs: synthetic candidates with unique texts (seeded), or RAGTruth's dev split.

Every synthetic text appears once per run unless a bench shares it on purpose (`cache`), so
the stage's embedding cache helps exactly where a bench means it to. The facts, question
and answer of a candidate agree, so the accept path sees accepts too; `grounded_candidates`
are built to be accepted: each answer restates the one fact of its context that the
question asks for, as an assistant would, and names nothing the context does not.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from pipeline.encoding.chunks import context_chunks
from topics.codec import loads

SEED = 20240611
RAGTRUTH_DEV = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "ragtruth_dev.jsonl"
"""Read where it lies (a sibling checkout's shared data), never copied into the repository."""


def _words(text: str) -> tuple[str, ...]:
    return tuple(text.split())


_SYLLABLES = _words(
    "ka lo mi ren tor vel sa dun bri go ha zel qui mar ost pel ric an ve tho lin dra mus kor "
    "bel tan fi gor nel sur"
)

_NOUNS = _words(
    "bridge harbour archive treaty engine orchard library canal festival lighthouse "
    "observatory mill railway theatre garden fortress monastery market glacier vineyard "
    "museum reservoir cathedral tunnel quarry foundry clinic academy ferry aqueduct telescope "
    "manuscript compass furnace granary tapestry chronicle lantern ledger"
)

_ADJECTIVES = _words(
    "northern ancient wooden coastal forgotten restored narrow crowded quiet famous hidden "
    "western copper granite sunken painted circular seasonal royal modest flooded vast "
    "eastern tiny"
)

_VERBS = _words(
    "built repaired designed funded mapped restored surveyed opened closed expanded described "
    "measured painted sold inherited defended catalogued translated photographed rebuilt"
)

_OCCUPATIONS = _words(
    "engineer merchant astronomer painter surveyor historian sailor architect botanist "
    "printer weaver physician cartographer brewer mason"
)

_PLACES = (
    "the river valley",
    "the old quarter",
    "the southern coast",
    "the mountain pass",
    "the capital",
    "the island colony",
    "the border town",
    "the lake district",
    "the desert oasis",
    "the port city",
    "the upper plateau",
    "the fishing village",
)


def _name(rng: random.Random) -> str:
    return "".join(rng.choice(_SYLLABLES) for _ in range(rng.randint(2, 3))).capitalize()


def _candidate(rng: random.Random) -> tuple[str, str, str]:
    """One (question, context, response): 2-3 context sentences, the facts shared."""
    who, other = _name(rng), _name(rng)
    year = rng.randint(1500, 2020)
    count = rng.randint(2, 900)
    noun, noun2 = rng.sample(_NOUNS, 2)
    adj, adj2 = rng.sample(_ADJECTIVES, 2)
    verb, verb2 = rng.sample(_VERBS, 2)
    place, place2 = rng.sample(_PLACES, 2)
    job = rng.choice(_OCCUPATIONS)
    question = rng.choice(
        (
            f"Which {noun} did {who} {verb.removesuffix('ed')} in {place} around {year}?",
            f"What did the {job} {who} do with the {adj} {noun} in {year}?",
            f"When was the {adj} {noun} near {place} {verb} by {who}?",
            f"Who {verb} the {noun} of {place}, and how many workers helped?",
        )
    )
    sentences = [
        f"{who} was a {adj2} {job} from {place2} who moved to {place} as a young adult.",
        f"In {year}, {who} {verb} the {adj} {noun} with the help of {count} workers.",
        f"Years later, {other} {verb2} the nearby {noun2}, which still stands today.",
        f"Records from {year + rng.randint(1, 40)} mention the {noun} {rng.randint(2, 60)} times.",
    ]
    context = " ".join(sentences[: rng.choice((2, 3, 3))])
    response = rng.choice(
        (
            f"{who} {verb} the {adj} {noun} in {place} in {year}, with {count} workers.",
            f"According to the records, the {noun} was {verb} by {who} in {year}.",
            f"It was {other}, not {who}, who {verb2} the {noun2} near {place}.",
            f"The {job} {who} {verb} the {noun} around {year} using {count} helpers.",
        )
    )
    return question, context, response


def _grounded(rng: random.Random) -> tuple[str, str, str]:
    """One (question, context, response) whose answer restates the fact asked about: who
    did it or when. (A count asked about is not: the shipped policy sends most such answers
    to the judge.)"""
    who, other, town = _name(rng), _name(rng), _name(rng)
    year, count = rng.randint(1500, 2020), rng.randint(2, 900)
    noun, noun2 = rng.sample(_NOUNS, 2)
    adj = rng.choice(_ADJECTIVES)
    verb, verb2 = rng.sample(_VERBS, 2)
    job, place = rng.choice(_OCCUPATIONS), rng.choice(_PLACES)
    thing = f"the {adj} {noun} of {town}"
    context = (
        f"{thing.capitalize()} was {verb} by the {job} {who} in {year}. "
        f"The work took {count} people, and the {noun} still stands in {place}. "
        f"Later, {other} {verb2} the {noun2} next to it."
    )
    if rng.random() < 0.5:
        return (
            f"Who {verb} {thing}?",
            context,
            f"{thing.capitalize()} was {verb} by the {job} {who}.",
        )
    return f"When was {thing} {verb}?", context, f"{thing.capitalize()} was {verb} in {year}."


class TextSource:
    """Seeded (question, context, response) triples whose texts never repeat in one source;
    `grounded`: triples built to be accepted (`_grounded`)."""

    def __init__(self, tag: str, seed: int = SEED, *, grounded: bool = False) -> None:
        self.rng = random.Random(f"{seed}:{tag}")
        self.seen: set[str] = set()
        self.make = _grounded if grounded else _candidate

    def triple(self) -> tuple[str, str, str]:
        while True:
            texts = self.make(self.rng)
            if len(set(texts)) == 3 and not set(texts) & self.seen:
                self.seen.update(texts)
                return texts


def candidate(tag: str, i: int, question: str, context: Any, response: str, **extra: Any) -> dict:
    """A candidate record; `session` groups turns (default: one session per candidate)."""
    return {
        "id": f"{tag}-{i}",
        "session_id": extra.pop("session", f"{tag}-s{i}"),
        "question": question,
        "context": context,
        "response": response,
        **extra,
    }


def retag(rows: Sequence[dict], n: int, tag: str) -> list[dict]:
    """`n` copies of `rows` in turn under fresh ids and sessions: a candidate id is decided
    once per ladder, so a text sent again must come under a new id."""
    return [
        {**rows[i % len(rows)], "id": f"{tag}-{i}", "session_id": f"{tag}-s{i}"} for i in range(n)
    ]


def unique_candidates(n: int, tag: str, seed: int = SEED) -> list[dict]:
    """`n` candidates, every question, context and response text unique."""
    source = TextSource(tag, seed)
    return [candidate(tag, i, *source.triple()) for i in range(n)]


def grounded_candidates(n: int, tag: str, seed: int = SEED) -> list[dict]:
    """`n` candidates built to reach `state` (`_grounded`), every text unique; the first `k`
    of a longer run are the same `k` candidates."""
    source = TextSource(tag, seed, grounded=True)
    return [candidate(tag, i, *source.triple()) for i in range(n)]


def long_context(source: TextSource, chunks: int = 3, per_chunk: int = 2) -> tuple[list, list]:
    """A RAG-sized context (`chunks` chunks of `per_chunk` fact paragraphs) and the
    (question, response) pairs its paragraphs answer."""
    triples = [source.triple() for _ in range(chunks * per_chunk)]
    context = [
        " ".join(t[1] for t in triples[k : k + per_chunk])
        for k in range(0, len(triples), per_chunk)
    ]
    return context, [(q, r) for q, _, r in triples]


def shared_context_candidates(n: int, per_context: int, tag: str, seed: int = SEED) -> list[dict]:
    """`n` candidates, `per_context` of them (different questions and answers) on each
    long context: with `per_context=1`, every context is unique."""
    source = TextSource(tag, seed)
    out: list[dict] = []
    while len(out) < n:
        context, pairs = long_context(source, per_chunk=max(2, -(-per_context // 3)))
        for question, response in pairs[:per_context]:
            if len(out) < n:
                out.append(candidate(tag, len(out), question, context, response))
    return out


def ragtruth(limit: int | None = None, path: Path = RAGTRUTH_DEV) -> Iterator[dict]:
    """RAGTruth dev records as candidates (labels dropped), when the shared file exists."""
    with path.open("rb") as f:
        for n, line in enumerate(f):
            if limit is not None and n >= limit:
                return
            record = loads(line)
            yield {k: v for k, v in record.items() if k != "metadata"}


def texts_per_stage_batch(encoder: Any, candidates: list[dict], batch_size: int) -> list[list]:
    """The texts the geometry stage embeds, one list per stage batch, deduplicated as the
    stage does: the question, the windows of the answer's core (what SGI reads), the
    context's windows, and, when the shipped policy reads claim support, the answer's claims
    and the context's statements (what the claim head reads). The raw-encoder side of
    `bench geometry` and `bench latency`."""
    from pipeline.claims.units import answer_core, context_statements, split_claims
    from pipeline.policy.defaults import default_policy
    from pipeline.scores.grounding import reads_claims

    model = default_policy().grounding
    claims = model is not None and reads_claims(model)
    batches = []
    for start in range(0, len(candidates), batch_size):
        texts: dict[str, None] = {}
        for c in candidates[start : start + batch_size]:
            texts[c["question"]] = None
            texts.update(dict.fromkeys(encoder.windows(answer_core(c["response"], c["question"]))))
            chunks = context_chunks(c["context"]) or ()
            for chunk in chunks:
                texts.update(dict.fromkeys(encoder.windows(chunk)))
            if claims:
                texts.update(dict.fromkeys(claim.text for claim in split_claims(c["response"])))
                texts.update(dict.fromkeys(s for st in context_statements(chunks) for s in st))
        batches.append(list(texts))
    return batches
