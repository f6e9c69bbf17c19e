"""Exported readers served on ONNX Runtime with `tokenizers`: no torch.

Pair classifier
    Reads each (claim, evidence) pair — the evidence is the claim's candidate windows
    joined, as for the reader trained here (`pipeline.claims.head.reader_input`) — in the
    order the checkpoint was trained on (``reader.json``'s ``order``; NLI models read the
    premise first) and gives the softmax probability of its supported label.

Token classifier
    Reads (context, answer) and gives each answer token P(unsupported); a claim
    (`pipeline.claims.units.split_claims`) gets 1 − the largest P(unsupported) of the tokens
    whose characters overlap it, so the answer's weakest claim is the one holding its most
    doubted token.

Windows, not truncation
    Nothing is cut off silently. A pair longer than ``max_tokens`` is read in overlapping
    windows: the evidence in windows that fit beside the claim (a claim is supported when
    some window supports it: the largest P(supported)), and a claim too long for half the
    input in overlapping pieces too (each piece must be supported: the smallest). A token
    classifier reads the context in overlapping windows beside each piece of the answer,
    and a token counts as supported when some window supports it (the smallest
    P(unsupported)). The rows a candidate costs grow with its words, which the work caps
    bound before any reader runs (`pipeline.guards.admission`).

Batches
    Every row of a call is sorted by length and run ``BATCH`` at a time, padded to the
    longest of its batch. The graph is fp32: ONNX Runtime gives a row the same numbers
    alone or padded in any batch (tests/unit/test_readers.py checks it on every
    architecture), so a decision never depends on the batch a candidate was read in
    (issue 33). Dynamic int8 quantisation would not (one scale per batch), and is not
    offered.

Failure posture
    A graph whose output does not have the spec's label count raises `ScoringError`.
    Scoring is deterministic.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from pipeline.claims.readers import (
    MODEL_FILE,
    TOKENIZER_FILE,
    ReaderKind,
    ReaderSpec,
    check_reader_dir,
    reader_name,
)
from pipeline.claims.units import ClaimSupport, split_claims
from pipeline.errors import ScoringError

__all__ = [
    "BATCH",
    "PairClassifier",
    "TokenClassifier",
    "claim_support_of_tokens",
    "load_reader",
]

BATCH = 16
"""Rows per ONNX Runtime call; rows are sorted by length first, so little is padding."""
OVERLAP = 4
"""Consecutive windows share 1/OVERLAP of their tokens, so no statement is only ever read
cut in two."""
CONTEXT_JOINT = "\n\n"
"""What joins a token reader's context chunks into the text it reads."""


def _threads() -> int:
    raw = os.environ.get("OMP_NUM_THREADS", "")
    return int(raw) if raw.isdigit() and int(raw) > 0 else 0


def _softmax(logits: np.ndarray) -> np.ndarray:
    z = logits.astype(np.float64)
    z = z - z.max(axis=-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=-1, keepdims=True)


class _Onnx:
    """The session and tokenizer of a reader directory, and its rows run in batches."""

    def __init__(self, directory: Path, spec: ReaderSpec, kind: ReaderKind) -> None:
        import onnxruntime as ort
        from tokenizers import Tokenizer

        if spec.kind is not kind:
            raise ScoringError(f"{directory} holds a {spec.kind.value} reader, not a {kind.value}")
        self.directory = Path(directory)
        self.spec = spec
        self.name = spec.name
        tokenizer = Tokenizer.from_file(str(self.directory / TOKENIZER_FILE))
        tokenizer.no_truncation()
        tokenizer.no_padding()
        self._tokenizer = tokenizer
        processor = tokenizer.post_processor
        self._specials = 0 if processor is None else processor.num_special_tokens_to_add(True)
        options = ort.SessionOptions()
        options.intra_op_num_threads = _threads()
        options.inter_op_num_threads = 1
        self._session = ort.InferenceSession(
            str(self.directory / MODEL_FILE), options, providers=["CPUExecutionProvider"]
        )
        self._inputs = tuple(i.name for i in self._session.get_inputs())

    @property
    def budget(self) -> int:
        """Tokens of text a row holds beside the special tokens."""
        return self.spec.max_tokens - self._specials

    def pieces(self, text: str, limit: int):
        """`text` tokenised (no special tokens) in overlapping windows of `limit` tokens."""
        encoding = self._tokenizer.encode(text, add_special_tokens=False)
        if len(encoding.ids) <= limit:
            return [encoding]
        encoding.truncate(limit, stride=limit // OVERLAP)
        return [encoding, *encoding.overflowing]

    def row(self, first, second):
        """One input row: the two pieces with the tokenizer's special tokens."""
        return self._tokenizer.post_process(first, second, add_special_tokens=True)

    def run(self, rows: Sequence) -> list[np.ndarray]:
        """Each row's class probabilities (per token for a token classifier), in order."""
        out: list[np.ndarray] = [np.zeros(0)] * len(rows)
        order = sorted(range(len(rows)), key=lambda i: (len(rows[i].ids), i))
        for start in range(0, len(order), BATCH):
            chosen = order[start : start + BATCH]
            width = max(len(rows[i].ids) for i in chosen)
            ids = np.full((len(chosen), width), self.spec.pad_id, dtype=np.int64)
            mask = np.zeros((len(chosen), width), dtype=np.int64)
            types = np.zeros((len(chosen), width), dtype=np.int64)
            for r, i in enumerate(chosen):
                n = len(rows[i].ids)
                ids[r, :n] = rows[i].ids
                mask[r, :n] = 1
                types[r, :n] = rows[i].type_ids
            feed = {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
            (logits,) = self._session.run(["logits"], {k: feed[k] for k in self._inputs})
            if logits.shape[-1] != len(self.spec.labels):
                raise ScoringError(
                    f"reader output has {logits.shape[-1]} classes, its spec "
                    f"{len(self.spec.labels)}"
                )
            probs = _softmax(logits)
            for r, i in enumerate(chosen):
                out[i] = probs[r] if probs.ndim == 2 else probs[r, : len(rows[i].ids)]
        return out


class PairClassifier(_Onnx):
    """P(supported) of (claim, evidence) pairs: a callable like the reader trained here."""

    def __init__(self, directory: Path, spec: ReaderSpec) -> None:
        super().__init__(directory, spec, ReaderKind.PAIR)

    def _rows(self, claim: str, evidence: str) -> list[list]:
        """Per piece of the claim, its rows: one per evidence window beside it."""
        encode = self._tokenizer.encode
        first_is_claim = self.spec.order[0] == "claim"

        def row(piece, window):
            return self.row(piece, window) if first_is_claim else self.row(window, piece)

        whole, told = (
            encode(claim, add_special_tokens=False),
            encode(evidence, add_special_tokens=False),
        )
        if len(whole.ids) + len(told.ids) <= self.budget:
            return [[row(whole, told)]]
        return [
            [row(piece, w) for w in self.pieces(evidence, max(self.budget - len(piece.ids), 1))]
            for piece in self.pieces(claim, max(self.budget // 2, 1))
        ]

    def probability(self, pairs: Sequence[tuple[str, str]]) -> np.ndarray:
        """P(supported) of each (claim, evidence) pair, in input order."""
        plans = [self._rows(claim, evidence) for claim, evidence in pairs]
        rows = [row for plan in plans for piece in plan for row in piece]
        probs = iter(self.run(rows))
        out = np.zeros(len(pairs), dtype=np.float64)
        for i, plan in enumerate(plans):
            pieces = [max(float(next(probs)[self.spec.target]) for _ in piece) for piece in plan]
            out[i] = min(pieces)
        return out

    def __call__(self, pairs: Sequence[tuple[str, str]]) -> np.ndarray:
        return self.probability(pairs)


def claim_support_of_tokens(
    response: str, spans: Sequence[tuple[int, int]], unsupported: Sequence[float]
) -> ClaimSupport:
    """The :class:`ClaimSupport` of `response` from its tokens' character `spans` and each
    token's P(unsupported): a claim's support is 1 − the largest P(unsupported) among the
    tokens overlapping it (0 when none does: unread is unsupported)."""
    claims = split_claims(response)
    if not claims:
        return ClaimSupport(1.0, None, None, (), ())
    scores = []
    for claim in claims:
        inside = [
            p for (a, b), p in zip(spans, unsupported, strict=True)
            if b > a and a < claim.end and b > claim.start
        ]  # fmt: skip
        scores.append(1.0 - max(inside) if inside else 0.0)
    weakest = min(range(len(claims)), key=lambda i: (scores[i], i))
    return ClaimSupport(scores[weakest], claims[weakest], None, claims, tuple(scores))


class TokenClassifier(_Onnx):
    """Reads (context, answer) and gives each claim of the answer the support of its tokens."""

    name: str

    def __init__(self, directory: Path, spec: ReaderSpec) -> None:
        super().__init__(directory, spec, ReaderKind.TOKEN)

    def _plan(self, chunks: Sequence[str], response: str) -> list[tuple[object, object]]:
        """(context window, answer piece) of every row one answer costs."""
        context = CONTEXT_JOINT.join(chunks)
        answers = self.pieces(response, max(self.budget // 2, 1))
        whole = len(self._tokenizer.encode(context, add_special_tokens=False).ids)
        if len(answers) == 1 and whole + len(answers[0].ids) <= self.budget:
            return [(self._tokenizer.encode(context, add_special_tokens=False), answers[0])]
        return [
            (window, piece)
            for piece in answers
            for window in self.pieces(context, max(self.budget - len(piece.ids), 1))
        ]

    def read_answers(self, items: Sequence[tuple[Sequence[str], str]]) -> list[ClaimSupport]:
        """Each (context chunks, answer)'s claim support, every row of the batch in one call."""
        plans = [self._plan(chunks, response) for chunks, response in items]
        answer_first = self.spec.order[0] == "answer"
        rows = [
            self.row(piece, window) if answer_first else self.row(window, piece)
            for plan in plans
            for window, piece in plan
        ]
        probs = iter(self.run(rows))
        rows_iter = iter(rows)
        out = []
        for (_, response), plan in zip(items, plans, strict=True):
            least: dict[tuple[int, int], float] = {}
            for window, piece in plan:
                row, p = next(rows_iter), next(probs)
                for at, span in _answer_tokens(row, window, piece, answer_first):
                    value = float(p[at, self.spec.target])
                    least[span] = min(value, least.get(span, value))
            spans = sorted(least)
            out.append(claim_support_of_tokens(response, spans, [least[s] for s in spans]))
        return out


def _answer_tokens(row, window, piece, answer_first: bool) -> list[tuple[int, tuple[int, int]]]:
    """(position in the row, character span in the answer) of the answer piece's tokens:
    the row's tokens that are not special, after the context window's (before it when the
    answer comes first)."""
    plain = [i for i, special in enumerate(row.special_tokens_mask) if not special]
    n_context, n_answer = len(window.ids), len(piece.ids)
    if len(plain) != n_context + n_answer:
        raise ScoringError(f"row has {len(plain)} text tokens, expected {n_context + n_answer}")
    positions = plain[:n_answer] if answer_first else plain[n_context:]
    return list(zip(positions, piece.offsets, strict=True))


class _Trained:
    """A reader trained here (`pipeline.claims.reader.ClaimReader`), named."""

    def __init__(self, directory: Path) -> None:
        from pipeline.claims.reader import ClaimReader

        self.reader = ClaimReader(directory)
        self.name = reader_name(directory)

    def __call__(self, pairs: Sequence[tuple[str, str]]):
        return self.reader.probability(pairs)

    def probability(self, pairs: Sequence[tuple[str, str]]):
        return self.reader.probability(pairs)


def load_reader(directory: str | Path):
    """The reader in `directory`, validated and loaded on ONNX Runtime: a pair reader (a
    callable from (claim, evidence) pairs to P(supported), with ``name``) or an
    :class:`AnswerReader`."""
    path = Path(directory)
    spec = check_reader_dir(path)
    if spec is None:
        return _Trained(path)
    if spec.kind is ReaderKind.PAIR:
        return PairClassifier(path, spec)
    return TokenClassifier(path, spec)
