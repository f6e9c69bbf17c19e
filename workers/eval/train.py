"""`groundstream train`: fit the claim-support head, cross-validate it by group, ship it.

What it does
    Reads the labelled files (RAGTruth span labels, BEGIN), adds synthetic FactCC-style and
    JSON field examples drawn from their contexts, embeds every claim and context statement
    with the bundled sentence encoder (cached on disk by content hash, so a rerun embeds
    nothing twice), and trains the small pair head of :mod:`pipeline.claims.head` with a
    fixed seed. It prints group-wise cross-validated figures (every context is scored by a
    model that never saw it), the answer-level figures per task, and HaluEval QA as given and
    rephrased the way an assistant writes (never trained on), then writes the head
    (``head.npz``) and its metadata (``head.json``: data hashes, seed, figures, command).

Why a head over frozen embeddings
    Measured on this machine before choosing (two shared cores): fine-tuning the bundled
    MiniLM as a cross-encoder took 70 s per 200 training pairs and scoring ran at about 20
    pairs a second, so a single epoch over the examples would take hours and evaluation
    tens of minutes. The frozen encoder embeds each statement once and the head trains in
    seconds.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pipeline.claims.head import ClaimHead, prepare_pairs
from pipeline.claims.units import summarise
from pipeline.fit.claims_data import (
    REPHRASE_STYLES,
    ClaimExample,
    begin_examples,
    halueval_examples,
    json_examples,
    ragtruth_examples,
    reviewed_examples,
    synthetic_examples,
)
from pipeline.fit.metrics import auroc
from workers.eval.datasets import file_sha256

__all__ = ["EmbeddingCache", "TrainConfig", "train"]

CACHE_DIR = Path.home() / ".cache" / "groundstream" / "claims"


class EmbeddingCache:
    """Sentence embeddings keyed by the text's blake2b hash, kept in one ``.npz`` file."""

    def __init__(self, path: Path, encode_uncached) -> None:
        self.path = path
        self._encode = encode_uncached
        self._rows: dict[bytes, np.ndarray] = {}
        if path.exists():
            with np.load(path) as saved:
                for key, row in zip(saved["keys"], saved["vectors"], strict=True):
                    # numpy's fixed-width bytes drop trailing NULs; a digest may end in one
                    self._rows[bytes(key).ljust(16, b"\0")] = row
        self._dirty = False

    @staticmethod
    def key(text: str) -> bytes:
        return hashlib.blake2b(text.encode("utf-8"), digest_size=16).digest()

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        keys = [self.key(t) for t in texts]
        missing = {k: t for k, t in zip(keys, texts, strict=True) if k not in self._rows}
        if missing:
            fresh = self._encode(list(missing.values()))
            for k, row in zip(missing, fresh, strict=True):
                self._rows[k] = np.asarray(row, dtype=np.float32)
            self._dirty = True
        return np.stack([self._rows[k] for k in keys]) if keys else np.zeros((0, 384), np.float32)

    def save(self) -> None:
        if not self._dirty:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        keys = np.array(list(self._rows), dtype="S16")
        tmp = self.path.with_suffix(".tmp.npz")
        np.savez(tmp, keys=keys, vectors=np.stack(list(self._rows.values())))
        tmp.replace(self.path)
        self._dirty = False


@dataclass(frozen=True, slots=True)
class TrainConfig:
    """What one training run reads and how it fits (recorded in the artefact's metadata)."""

    ragtruth: Path
    begin: Path
    halueval: Path | None
    out_dir: Path
    seed: int = 0
    reviewed: tuple[Path, ...] = ()
    """Reviewed answers (`groundstream review export`) added to the training examples."""
    folds: int = 5
    hidden: int = 0
    epochs: int = 20
    l2: float = 1e-4
    ragtruth_weight: float = 3.0
    max_accept_error: float = 0.08


@dataclass(frozen=True, slots=True)
class _Prepared:
    """One example with its candidate windows and pair features, ready for the head."""

    example: ClaimExample
    windows: tuple
    candidates: tuple[tuple[int, ...], ...]
    features: np.ndarray


def _prepare(examples: Sequence[ClaimExample], cache: EmbeddingCache) -> list[_Prepared]:
    out = []
    for ex in examples:
        windows, cands, features = prepare_pairs(list(ex.claims), ex.context, cache.encode)
        out.append(_Prepared(ex, windows, cands, features))
    cache.save()
    return out


def _fold_of(group: str, folds: int) -> int:
    """A source's fold by a hash of its name, not `pipeline.fit.folds`' GroupKFold: fold 0 is
    the claim reader's held-out set (tools/claim_ce/held_out.py), so a source's fold must
    not move when sources are added, and a re-deal would put answers the shipped head and
    reader were trained on into it."""
    return int(hashlib.sha256(group.encode()).hexdigest()[:8], 16) % folds


def _training_pairs(
    items: Sequence[_Prepared], ragtruth_weight: float = 1.0
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(features, labels, weights): a supported claim's best candidate is a positive; every
    candidate of an unsupported claim is a negative. Within each source the two labels
    weigh the same, so RAGTruth's mostly-supported claims do not teach "always yes"; the
    real RAG answers then weigh ``ragtruth_weight`` times a source's share."""
    xs, ys, srcs = [], [], []
    for item in items:
        at = 0
        for label, cand in zip(item.example.claim_labels, item.candidates, strict=True):
            rows = item.features[at : at + len(cand)]
            at += len(cand)
            if label < 0 or not len(rows):
                continue
            chosen = rows[:1] if label == 1 else rows
            xs.append(chosen)
            ys.extend([label] * len(chosen))
            srcs.extend([item.example.source] * len(chosen))
    x, y, src = np.concatenate(xs), np.array(ys, dtype=np.float32), np.array(srcs)
    w = np.ones(len(y), dtype=np.float32)
    for s in np.unique(src):
        for label in (0.0, 1.0):
            cell = (src == s) & (y == label)
            if cell.any():
                w[cell] = len(y) / (2 * len(np.unique(src)) * cell.sum())
    w[src == "ragtruth"] *= ragtruth_weight
    return x, y, w


def _fit_head(x: np.ndarray, y: np.ndarray, w: np.ndarray, config: TrainConfig) -> ClaimHead:
    """A one-hidden-layer head (logistic when ``hidden`` is 0) trained with Adam on weighted
    log loss, seeded."""
    import torch

    # One thread: on a small shared machine, torch's default pool oversubscribes the cores
    # and a fit that takes seconds takes minutes.
    torch.set_num_threads(1)
    torch.manual_seed(config.seed)
    mean = x.mean(0)
    scale = x.std(0) + 1e-6
    xt = torch.from_numpy((x - mean) / scale)
    yt, wt = torch.from_numpy(y), torch.from_numpy(w)
    if config.hidden:
        net = torch.nn.Sequential(
            torch.nn.Linear(x.shape[1], config.hidden),
            torch.nn.ReLU(),
            torch.nn.Linear(config.hidden, 1),
        )
    else:  # a logistic head
        net = torch.nn.Sequential(torch.nn.Linear(x.shape[1], 1))
    opt = torch.optim.Adam(net.parameters(), lr=1e-3, weight_decay=config.l2)
    gen = torch.Generator().manual_seed(config.seed)
    for _ in range(config.epochs):
        order = torch.randperm(len(yt), generator=gen)
        for start in range(0, len(yt), 256):
            idx = order[start : start + 256]
            logits = net(xt[idx]).squeeze(-1)
            loss = torch.nn.functional.binary_cross_entropy_with_logits(
                logits, yt[idx], weight=wt[idx]
            )
            opt.zero_grad()
            loss.backward()
            opt.step()
    layers = tuple(
        (m.weight.detach().numpy().T.copy(), m.bias.detach().numpy().copy())
        for m in net
        if isinstance(m, torch.nn.Linear)
    )
    return ClaimHead(mean.astype(np.float32), scale.astype(np.float32), layers)


@dataclass(frozen=True, slots=True)
class _Scored:
    """One example's per-claim scores (best candidate) and answer score (weakest claim)."""

    example: ClaimExample
    claim_scores: tuple[float, ...]
    score: float


def _score(items: Sequence[_Prepared], head: ClaimHead) -> list[_Scored]:
    out = []
    for item in items:
        probs = head.probability(item.features) if len(item.features) else np.zeros(0)
        rows, at = [], 0
        for cand in item.candidates:
            rows.append(tuple(float(p) for p in probs[at : at + len(cand)]))
            at += len(cand)
        claims = tuple(range(len(item.candidates)))  # positions stand in for Claim values
        support = summarise(claims, item.windows, item.candidates, rows)  # type: ignore[arg-type]
        out.append(_Scored(item.example, support.claim_scores, support.score))
    return out


def _pass_rate_at(scores: np.ndarray, labels: np.ndarray, max_error: float) -> tuple[float, float]:
    """The largest share of right answers a single cut lets through while at most
    ``max_error`` of what it lets through is wrong; (share, cut). Chosen on the scores
    themselves, so it is an upper bound of what a fitted cut achieves on new data."""
    order = np.argsort(-scores, kind="stable")
    wrong = np.cumsum(labels[order] == 0)
    taken = np.arange(1, len(order) + 1)
    ok = wrong / taken <= max_error
    if not ok.any() or not labels.any():
        return 0.0, float("inf")
    last = int(np.nonzero(ok)[0].max())
    return float((labels[order][: last + 1] == 1).sum() / labels.sum()), float(scores[order][last])


def _answer_figures(scored: Sequence[_Scored], max_error: float) -> dict[str, float]:
    s = np.array([x.score for x in scored])
    y = np.array([x.example.label for x in scored])
    rate, cut = _pass_rate_at(s, y, max_error)
    return {
        "n": float(len(y)),
        "auroc": auroc(s, y) if 0 < y.sum() < len(y) else float("nan"),
        f"pass_rate_at_{max_error:g}": rate,
        "cut": cut,
    }


def _claim_auroc(scored: Sequence[_Scored]) -> float:
    s, y = [], []
    for x in scored:
        for label, score in zip(x.example.claim_labels, x.claim_scores, strict=True):
            if label >= 0:
                s.append(score)
                y.append(label)
    return auroc(np.array(s), np.array(y)) if 0 < sum(y) < len(y) else float("nan")


def _cross_validate(
    items: Sequence[_Prepared], config: TrainConfig
) -> tuple[dict[str, dict[str, float]], list[_Scored]]:
    """Out-of-fold scores: each group (context) scored by a head that never saw it."""
    fold = np.array([_fold_of(item.example.group, config.folds) for item in items])
    scored: list[_Scored | None] = [None] * len(items)
    for k in range(config.folds):
        train = [item for item, f in zip(items, fold, strict=True) if f != k]
        head = _fit_head(*_training_pairs(train, config.ragtruth_weight), config)
        test = [i for i, f in enumerate(fold) if f == k]
        for i, s in zip(test, _score([items[i] for i in test], head), strict=True):
            scored[i] = s
    done = [s for s in scored if s is not None]
    figures: dict[str, dict[str, float]] = {}
    rag = [s for s in done if s.example.source == "ragtruth"]
    figures["ragtruth.claims"] = {"auroc": _claim_auroc(rag)}
    figures["ragtruth.answers"] = _answer_figures(rag, config.max_accept_error)
    for task in sorted({s.example.kind for s in rag}):
        part = [s for s in rag if s.example.kind == task]
        figures[f"ragtruth.answers.{task}"] = _answer_figures(part, config.max_accept_error)
    begin = [s for s in done if s.example.source == "begin"]
    figures["begin.answers"] = _answer_figures(begin, 0.10)
    for source in ("synthetic", "json"):
        part = [s for s in done if s.example.source == source]
        figures[f"{source}.claims"] = {"auroc": _claim_auroc(part)}
    return figures, done


def _phrasing_figures(scored: Sequence[_Scored]) -> dict[str, dict[str, float]]:
    """HaluEval QA per rephrasing style, and whether a right answer written as a sentence
    scores lower than the same answer as given (it must not)."""
    figures: dict[str, dict[str, float]] = {}
    given = {
        x.example.group: x.score for x in scored if x.example.kind == "given" and x.example.label
    }
    for style in REPHRASE_STYLES:
        part = [x for x in scored if x.example.kind == style]
        row = _answer_figures(part, 0.025)
        right = [x for x in part if x.example.label == 1 and x.example.group in given]
        drops = np.array([given[x.example.group] - x.score for x in right])
        row["right_mean_score"] = float(np.mean([x.score for x in right]))
        row["right_scored_lower_than_given"] = float((drops > 0.05).mean()) if len(drops) else 0.0
        figures[f"halueval.{style}"] = row
    mixed = [x for x in scored if x.example.kind != "given"]
    figures["halueval.all_rephrased"] = _answer_figures(mixed, 0.025)
    return figures


def _finite(value):
    """``value`` with infinities and NaNs as None: strict JSON has no such numbers (an
    infinite cut means no cut meets the bound)."""
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, float) and not np.isfinite(value):
        return None
    return value


def _save(head: ClaimHead, out_dir: Path, metadata: dict) -> None:
    """``head.npz`` (float16 weights: the figures are recomputed from the saved head) and
    ``head.json`` beside it."""
    out_dir.mkdir(parents=True, exist_ok=True)
    arrays = {"mean": head.mean, "scale": head.scale}
    for i, (w, b) in enumerate(head.layers):
        arrays[f"w{i}"] = w.astype(np.float16)
        arrays[f"b{i}"] = b.astype(np.float16)
    np.savez_compressed(out_dir / "head.npz", **arrays)
    text = json.dumps(_finite(metadata), indent=2, sort_keys=True, allow_nan=False)
    (out_dir / "head.json").write_text(text + "\n")


def training_examples(config: TrainConfig) -> list[ClaimExample]:
    """Every example a run trains on: RAGTruth, BEGIN, synthetic pairs from their prose,
    JSON field statements from the data-to-text contexts, and the reviewed answers."""
    rag = ragtruth_examples(config.ragtruth)
    begin = begin_examples(config.begin)
    data2txt = [e for e in rag if e.kind == "Data2txt"]
    return [
        *rag,
        *begin,
        *synthetic_examples([*rag, *begin], seed=config.seed),
        *json_examples(data2txt, seed=config.seed),
        *(e for path in config.reviewed for e in reviewed_examples(path)),
    ]


def train(config: TrainConfig, command: str, echo=print) -> dict:
    """Build the examples, cross-validate, fit on everything, evaluate the phrasing check on
    HaluEval QA, and write the artefact. Returns the metadata written."""
    from pipeline.encoding.encoder import load_encoder
    from workers.clients.claims import load_head

    started = time.monotonic()
    examples = training_examples(config)
    encoder = load_encoder(None)
    cache = EmbeddingCache(CACHE_DIR / "embeddings.npz", encoder.encode_uncached)
    echo(f"preparing {len(examples)} examples (embeddings cached in {cache.path})")
    items = _prepare(examples, cache)
    figures, _ = _cross_validate(items, config)
    head = _fit_head(*_training_pairs(items, config.ragtruth_weight), config)
    hashes = {p.name: file_sha256(p) for p in (config.ragtruth, config.begin, *config.reviewed)}
    sources = sorted({e.source for e in examples})
    metadata: dict = {
        "model": "claim-support head over frozen all-MiniLM-L6-v2 embeddings",
        "command": command,
        "seed": config.seed,
        "folds": config.folds,
        "hidden": config.hidden,
        "epochs": config.epochs,
        "l2": config.l2,
        "ragtruth_weight": config.ragtruth_weight,
        "data_sha256": hashes,
        "n_examples": {s: sum(e.source == s for e in examples) for s in sources},
        "cv": figures,
    }
    _save(head, config.out_dir, metadata)
    shipped = load_head(config.out_dir)  # the float16 head, as a worker loads it
    if config.halueval is not None:
        hashes[config.halueval.name] = file_sha256(config.halueval)
        held = _prepare(halueval_examples(config.halueval), cache)
        metadata["halueval_never_trained_on"] = _phrasing_figures(_score(held, shipped))
    metadata["train_seconds"] = round(time.monotonic() - started, 1)
    _save(head, config.out_dir, metadata)
    for name, row in {**figures, **metadata.get("halueval_never_trained_on", {})}.items():
        echo(f"{name:34s} " + "  ".join(f"{k}={v:.3f}" for k, v in row.items()))
    return metadata
