"""`groundstream train claims`: fine-tune the bundled encoder as the claim reader, on a CPU.

What it does
    Two phases, each with its share of a wall-clock budget (``--minutes``):

    1. *pretrain* on the shared labelled claim sets (:mod:`pipeline.fit.claim_sets`), drawn
       round-robin so that any prefix of the run sees every set;
    2. *fine-tune* on the in-domain claims ``groundstream train`` already builds (RAGTruth
       spans, BEGIN, synthetic edits and JSON field statements, each claim against the
       same candidate windows the stage ranks), on four of five group folds — the fifth
       is held out for the figures.

    Then it exports the model to ONNX, quantises it to int8 (ONNX Runtime's dynamic
    quantisation) and measures *the exported file*: AUROC on each shared set's held-out
    split, claim and answer figures on the held-out fold, HaluEval QA as given and
    rephrased (never trained on). ``reader.json`` records the data's sha256, seed, phases,
    minutes and figures.

How it fits two cores
    Pairs are tokenised once, truncated to ``max_tokens``, and batched by length (a batch
    is padded to its own longest pair, and most NLI pairs are under 64 tokens); the word
    embeddings are frozen (a third of the parameters, and the ones a few thousand pairs
    would most overfit). A checkpoint is written every ``checkpoint_minutes`` and at each
    phase's end; ``--resume`` continues from it at the same batch, so a run cut off loses
    at most those minutes. The batch order is fixed by the seed; the learning rate decays
    linearly over each phase's budget, so how far a phase gets depends on the machine's
    speed (the steps taken are recorded).

Failure posture
    Needs torch and transformers (training only). A missing input file or an empty phase
    fails before any training with a one-line ``ValueError``.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from pipeline.claims.reader import META_FILE, MODEL_FILE, TOKENIZER_FILE, ClaimReader
from pipeline.encoding.encoder import default_model_path
from pipeline.fit.claim_sets import CLAIM_SETS, ClaimPair, load_claim_sets
from pipeline.fit.metrics import auroc
from workers.eval.datasets import file_sha256
from workers.eval.train import _pass_rate_at

__all__ = ["ReaderConfig", "in_domain_pairs", "measure_reader", "remeasure", "train_reader"]

Echo = Callable[[str], None]


@dataclass(frozen=True, slots=True)
class ReaderConfig:
    """One training run (recorded whole in ``reader.json``)."""

    out_dir: Path
    claims_dir: Path | None = None
    """The shared claim sets; None skips pretraining."""
    ragtruth: Path | None = None
    begin: Path | None = None
    halueval: Path | None = None
    """HaluEval QA for the phrasing figures (never trained on)."""
    reviewed: tuple[Path, ...] = ()
    """Reviewers' verdicts (`groundstream review export`), fine-tuned on like RAGTruth."""
    minutes: float = 80.0
    pretrain_share: float = 0.5
    """Share of the budget for pretraining; 0 fine-tunes from the bundled encoder."""
    seed: int = 0
    batch_size: int = 16
    max_tokens: int = 192
    lr: float = 5e-5
    checkpoint_minutes: float = 5.0
    eval_per_set: int = 600
    """Held-out pairs scored per shared set (a seeded sample)."""
    sets: tuple[str, ...] = ()
    """Shared sets to read; empty: all of them."""
    resume: bool = False

    def check(self) -> None:
        if self.minutes <= 0:
            raise ValueError(f"--minutes must be positive, got {self.minutes}")
        if not 0.0 <= self.pretrain_share <= 1.0:
            raise ValueError(f"--pretrain-share must be in [0, 1], got {self.pretrain_share}")
        if self.pretrain_share > 0 and self.claims_dir is None:
            raise ValueError("pretraining needs --claims DIR (or --pretrain-share 0)")
        if self.pretrain_share < 1 and (self.ragtruth is None or self.begin is None):
            raise ValueError("fine-tuning needs --ragtruth and --begin (or --pretrain-share 1)")
        for path in (self.claims_dir, self.ragtruth, self.begin, self.halueval, *self.reviewed):
            if path is not None and not path.exists():
                raise ValueError(f"input not found: {path}")
        unknown = [s for s in self.sets if s not in CLAIM_SETS]
        if unknown:
            raise ValueError(f"unknown claim set(s) {unknown}; known: {sorted(CLAIM_SETS)}")


# ------------------------------------------------------------------------- in-domain


@dataclass(frozen=True, slots=True)
class DomainClaim:
    """One claim of a labelled answer with its candidate windows' text."""

    claim: str
    evidence: str
    label: int
    """1 supported, 0 not, -1 unknown (scored, never trained on)."""
    answer: int
    """Index of its answer in the run's answer list."""


@dataclass(frozen=True, slots=True)
class DomainAnswer:
    source: str
    kind: str
    fold: int
    label: int
    group: str
    claims: tuple[DomainClaim, ...] = field(default=())


@dataclass(frozen=True, slots=True)
class InDomain:
    """The in-domain answers, and what the head's own cross-validation needs of them
    (``prepared`` follows ``answers``)."""

    answers: list[DomainAnswer]
    prepared: list
    head_config: object


def in_domain_pairs(config: ReaderConfig, echo: Echo) -> InDomain:
    """The claims ``groundstream train`` builds (RAGTruth, BEGIN, synthetic, JSON) and
    HaluEval QA in every rephrasing style, each claim with the head's candidate windows."""
    from pipeline.encoding.encoder import load_encoder
    from pipeline.fit.claims_data import halueval_examples
    from workers.eval.train import (
        CACHE_DIR,
        EmbeddingCache,
        TrainConfig,
        _fold_of,
        _prepare,
        training_examples,
    )

    head_config = TrainConfig(
        ragtruth=config.ragtruth,
        begin=config.begin,
        halueval=config.halueval,
        out_dir=config.out_dir,
        seed=config.seed,
        reviewed=config.reviewed,
    )
    examples = training_examples(head_config)
    if config.halueval is not None:
        examples += halueval_examples(config.halueval)
    cache = EmbeddingCache(CACHE_DIR / "embeddings.npz", load_encoder(None).encode_uncached)
    echo(f"in-domain: {len(examples)} answers (embeddings cached in {cache.path})")
    answers = []
    prepared = _prepare(examples, cache)
    for n, item in enumerate(prepared):
        ex = item.example
        claims = []
        for text, label, cand in zip(ex.claims, ex.claim_labels, item.candidates, strict=True):
            windows = sorted((item.windows[j] for j in cand), key=lambda w: (w.chunk, w.first))
            claims.append(DomainClaim(text, " ".join(w.text for w in windows), int(label), n))
        fold = _fold_of(ex.group, head_config.folds)
        answers.append(
            DomainAnswer(ex.source, ex.kind, fold, int(ex.label), ex.group, tuple(claims))
        )
    return InDomain(answers, prepared, head_config)


# -------------------------------------------------------------------------- batching


def _batches(lengths: np.ndarray, batch_size: int, seed: int) -> list[np.ndarray]:
    """Index batches of similar length in a seeded order: shuffle, sort within runs of 64
    batches by length, cut, shuffle the batches."""
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(lengths))
    span = batch_size * 64
    batches = []
    for start in range(0, len(order), span):
        run = order[start : start + span]
        run = run[np.argsort(lengths[run], kind="stable")]
        batches.extend(run[i : i + batch_size] for i in range(0, len(run), batch_size))
    return [batches[i] for i in rng.permutation(len(batches))]


def _interleave(pairs: Sequence[ClaimPair], seed: int) -> list[ClaimPair]:
    """Pairs of every set, drawn round-robin in a seeded order, so a run cut short has
    seen every set in proportion (big sets are not allowed to crowd out small ones: each
    round takes one pair of each set that has any left)."""
    rng = np.random.default_rng(seed)
    by_set: dict[str, list[ClaimPair]] = {}
    for p in pairs:
        by_set.setdefault(p.name, []).append(p)
    queues = {k: [v[i] for i in rng.permutation(len(v))] for k, v in sorted(by_set.items())}
    out: list[ClaimPair] = []
    depth = max((len(q) for q in queues.values()), default=0)
    for i in range(depth):
        out.extend(q[i] for q in queues.values() if i < len(q))
    return out


# -------------------------------------------------------------------------- training


class _Trainer:
    """The torch side: model, optimiser, checkpoints."""

    def __init__(self, config: ReaderConfig, echo: Echo) -> None:
        import torch
        from transformers import AutoTokenizer, BertForSequenceClassification

        torch.manual_seed(config.seed)
        torch.use_deterministic_algorithms(False)
        self.torch = torch
        self.config = config
        self.echo = echo
        base = default_model_path()
        self.base = base
        self.tokenizer = AutoTokenizer.from_pretrained(str(base), local_files_only=True)
        self.model = BertForSequenceClassification.from_pretrained(
            str(base), num_labels=1, local_files_only=True
        )
        self.model.bert.embeddings.word_embeddings.weight.requires_grad_(False)
        params = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(params, lr=config.lr, weight_decay=0.01)
        self.checkpoint = config.out_dir / "checkpoint.pt"
        self.state = {"phase": 0, "batch": 0, "elapsed": [0.0, 0.0], "steps": [0, 0]}

    def tokenize(self, claims: Sequence[str], evidence: Sequence[str]) -> list[list[int]]:
        enc = self.tokenizer(
            list(claims),
            list(evidence),
            truncation="longest_first",
            max_length=self.config.max_tokens,
        )
        return [enc["input_ids"], enc["token_type_ids"]]

    def _pad(self, ids: list, types: list, chosen: np.ndarray):
        torch = self.torch
        width = max(len(ids[i]) for i in chosen)
        x = torch.zeros((len(chosen), width), dtype=torch.long)
        t = torch.zeros_like(x)
        m = torch.zeros_like(x)
        for row, i in enumerate(chosen):
            n = len(ids[i])
            x[row, :n] = torch.tensor(ids[i])
            t[row, :n] = torch.tensor(types[i])
            m[row, :n] = 1
        return x, m, t

    def save(self) -> None:
        torch = self.torch
        self.config.out_dir.mkdir(parents=True, exist_ok=True)
        tmp = self.checkpoint.with_suffix(".tmp")
        torch.save(
            {
                "model": self.model.state_dict(),
                "optimizer": self.optimizer.state_dict(),
                "state": self.state,
                "config": _jsonable(asdict(self.config)),
            },
            tmp,
        )
        tmp.replace(self.checkpoint)

    def load(self) -> None:
        saved = self.torch.load(self.checkpoint, weights_only=False)
        if saved["config"]["seed"] != self.config.seed:
            raise ValueError(f"{self.checkpoint} was written with another --seed")
        self.model.load_state_dict(saved["model"])
        self.optimizer.load_state_dict(saved["optimizer"])
        self.state = saved["state"]
        self.echo(
            f"resumed at phase {self.state['phase'] + 1}, batch {self.state['batch']} "
            f"({sum(self.state['elapsed']) / 60:.1f} min done)"
        )

    def run_phase(
        self,
        phase: int,
        budget_s: float,
        tokens: list[list[int]],
        labels: np.ndarray,
        weights: np.ndarray,
        seed: int,
    ) -> None:
        """Train on the pairs until the phase's time budget is spent (over several epochs
        if there is time). Resumes mid-phase from ``self.state``."""
        torch = self.torch
        ids, types = tokens
        lengths = np.array([len(x) for x in ids])
        y = torch.tensor(labels, dtype=torch.float32)
        w = torch.tensor(weights, dtype=torch.float32)
        self.model.train()
        last_save = time.monotonic()
        epoch_batches = _batches(lengths, self.config.batch_size, seed)
        epochs_seen = self.state["batch"] // max(len(epoch_batches), 1)
        batches = epoch_batches
        if epochs_seen:
            batches = _batches(lengths, self.config.batch_size, seed + epochs_seen)
        while self.state["elapsed"][phase] < budget_s:
            at = self.state["batch"] % len(batches)
            chosen = batches[at]
            left = 1.0 - self.state["elapsed"][phase] / budget_s
            warm = min(1.0, (self.state["steps"][phase] + 1) / 50)
            for group in self.optimizer.param_groups:
                group["lr"] = self.config.lr * warm * max(left, 0.02)
            started = time.monotonic()
            x, m, t = self._pad(ids, types, chosen)
            logits = self.model(input_ids=x, attention_mask=m, token_type_ids=t).logits[:, 0]
            idx = torch.as_tensor(chosen)
            loss = torch.nn.functional.binary_cross_entropy_with_logits(
                logits, y[idx], weight=w[idx]
            )
            self.optimizer.zero_grad()
            loss.backward()
            self.optimizer.step()
            self.state["elapsed"][phase] += time.monotonic() - started
            self.state["steps"][phase] += 1
            self.state["batch"] += 1
            if self.state["batch"] % len(batches) == 0:
                epoch = self.state["batch"] // len(batches)
                batches = _batches(lengths, self.config.batch_size, seed + epoch)
            if self.state["steps"][phase] % 200 == 0:
                done = self.state["elapsed"][phase] / 60
                self.echo(
                    f"  phase {phase + 1}: {self.state['steps'][phase]} steps, "
                    f"{done:.1f} of {budget_s / 60:.1f} min, loss {loss.item():.3f}"
                )
            if time.monotonic() - last_save >= self.config.checkpoint_minutes * 60:
                self.save()
                last_save = time.monotonic()
        self.state["phase"] = phase + 1
        self.state["batch"] = 0
        self.save()

    def logits(self, claims: Sequence[str], evidence: Sequence[str]) -> np.ndarray:
        torch = self.torch
        ids, types = self.tokenize(claims, evidence)
        lengths = np.array([len(x) for x in ids])
        out = np.zeros(len(ids), dtype=np.float64)
        self.model.eval()
        with torch.no_grad():
            order = np.argsort(-lengths, kind="stable")
            for s in range(0, len(order), 64):
                chosen = order[s : s + 64]
                x, m, t = self._pad(ids, types, chosen)
                out[chosen] = (
                    self.model(input_ids=x, attention_mask=m, token_type_ids=t).logits[:, 0].numpy()
                )
        self.model.train()
        return out

    def export(self, out_dir: Path) -> Path:
        """``reader.onnx`` (int8) and ``tokenizer.json`` in ``out_dir``; the fp32 export is
        written beside it and removed."""
        torch = self.torch
        from pipeline.encoding.quantize import quantize_dynamic_int8

        model = self.model.eval()

        class _Logits(torch.nn.Module):
            def __init__(self, inner) -> None:
                super().__init__()
                self.inner = inner

            def forward(self, ids, mask, types):
                return self.inner(input_ids=ids, attention_mask=mask, token_type_ids=types).logits

        names = ["input_ids", "attention_mask", "token_type_ids"]
        fp32 = out_dir / "reader.fp32.onnx"
        ids = torch.ones(2, 8, dtype=torch.long)
        with torch.no_grad():
            torch.onnx.export(
                _Logits(model),
                (ids, torch.ones_like(ids), torch.zeros_like(ids)),
                str(fp32),
                input_names=names,
                output_names=["logits"],
                dynamic_axes={n: {0: "batch", 1: "sequence"} for n in names}
                | {"logits": {0: "batch"}},
                opset_version=17,
                dynamo=False,
            )
        target = out_dir / MODEL_FILE
        quantize_dynamic_int8(fp32, target, per_channel=False, op_types=None)
        fp32.unlink()
        shutil.copyfile(self.base / TOKENIZER_FILE, out_dir / TOKENIZER_FILE)
        return target


def _jsonable(value):
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return value


def _balanced_weights(labels: np.ndarray, groups: np.ndarray) -> np.ndarray:
    """Within each group (a set, or an in-domain source) both labels weigh the same, and
    every group weighs the same in total."""
    w = np.ones(len(labels), dtype=np.float32)
    names = np.unique(groups)
    for g in names:
        for label in (0, 1):
            cell = (groups == g) & (labels == label)
            if cell.any():
                w[cell] = len(labels) / (2 * len(names) * cell.sum())
    return w


# ------------------------------------------------------------------------- figures


def shared_figures(pairs: Sequence[ClaimPair], score: Callable, per_set: int, seed: int) -> dict:
    """AUROC on each set's held-out pairs (a seeded sample of at most ``per_set``)."""
    rng = np.random.default_rng(seed)
    out = {}
    for name in sorted({p.name for p in pairs}):
        held = [p for p in pairs if p.name == name and p.held_out]
        if per_set and len(held) > per_set:
            held = [held[i] for i in sorted(rng.choice(len(held), per_set, replace=False))]
        if not held:
            continue
        s = score([p.claim for p in held], [p.evidence for p in held])
        out[name] = {"auroc": auroc(s, np.array([p.label for p in held])), "n": len(held)}
    return out


def domain_figures(answers: Sequence[DomainAnswer], score: Callable) -> dict:
    """On the held-out fold: claim AUROC per source, and per answer kind the AUROC of the
    weakest claim and the share of right answers a cut passes at 5% error; HaluEval per
    rephrasing style."""
    chosen = [a for a in answers if (a.source == "halueval" or a.fold == 0) and a.claims]
    claims = [c for a in chosen for c in a.claims]
    scores = score([c.claim for c in claims], [c.evidence for c in claims])
    weakest: dict[int, float] = {}
    for c, s in zip(claims, scores, strict=True):
        weakest[c.answer] = min(weakest.get(c.answer, np.inf), float(s))
    out: dict[str, dict] = {}
    for source in sorted({a.source for a in chosen} - {"halueval"}):
        mask = [
            i for i, c in enumerate(claims) if answers[c.answer].source == source and c.label >= 0
        ]
        if mask:
            labels = np.array([claims[i].label for i in mask])
            out[f"{source}.claims"] = {"auroc": auroc(scores[mask], labels), "n": len(mask)}
    for (source, kind), group in _by_kind(chosen).items():
        s = np.array([weakest[a.claims[0].answer] for a in group])
        y = np.array([a.label for a in group])
        out[f"{source}.{kind}.answers"] = {
            "auroc": auroc(s, y),
            "pass_at_5pct": _pass_rate_at(s, y, 0.05)[0],
            "n": len(group),
        }
    return out


def _by_kind(answers: Sequence[DomainAnswer]) -> dict[tuple[str, str], list[DomainAnswer]]:
    out: dict[tuple[str, str], list[DomainAnswer]] = {}
    for a in answers:
        if a.source in {"ragtruth", "begin", "halueval"}:
            out.setdefault((a.source, a.kind), []).append(a)
    return dict(sorted(out.items()))


def _logit(p: np.ndarray) -> np.ndarray:
    p = np.clip(np.asarray(p, dtype=np.float64), 1e-4, 1 - 1e-4)
    return np.log(p / (1 - p))


def _stacked(x: np.ndarray, y: np.ndarray, groups: Sequence[str]) -> np.ndarray:
    """Out-of-fold scores of a logistic model over ``x``, five folds by group (the fit's
    own split, `pipeline.fit.folds`: it runs within the reader's held-out fold)."""
    from pipeline.fit.folds import group_folds
    from pipeline.fit.grounding_model import fit_logistic

    folds = group_folds(groups, 5)
    out = np.zeros(len(y))
    for k in range(5):
        train, test = folds != k, folds == k
        if not test.any() or len(np.unique(y[train])) < 2:
            continue
        coef, intercept = fit_logistic(x[train], y[train])
        out[test] = x[test] @ coef + intercept
    return out


def compare_with_head(domain: InDomain, score: Callable, echo: Echo) -> dict:
    """On the reader's held-out fold: the frozen head's weakest claim (its own group-wise
    cross-validation, so no answer is scored by a head that saw it), the reader's weakest
    claim, and a logistic stack of both (cross-validated by group within the fold), per
    answer kind — AUROC and the share of right answers a cut passes at the error bound
    (5% for RAGTruth and HaluEval, 10% for BEGIN). HaluEval QA: the shipped head (never
    trained on it) against the reader, per rephrasing style."""
    from workers.clients.claims import load_head
    from workers.eval.train import _cross_validate, _score

    inside = [i for i, a in enumerate(domain.answers) if a.source != "halueval"]
    hal = [i for i, a in enumerate(domain.answers) if a.source == "halueval"]
    head_score = np.zeros(len(domain.answers))
    _, oof = _cross_validate([domain.prepared[i] for i in inside], domain.head_config)
    head_score[inside] = [h.score for h in oof]
    head_score[hal] = [h.score for h in _score([domain.prepared[i] for i in hal], load_head())]
    chosen = [
        i
        for i, a in enumerate(domain.answers)
        if a.claims
        and (a.source == "halueval" or (a.fold == 0 and a.source in {"ragtruth", "begin"}))
    ]
    claims = [c for i in chosen for c in domain.answers[i].claims]
    scores = score([c.claim for c in claims], [c.evidence for c in claims])
    per_answer: dict[int, list[float]] = {}
    for c, s in zip(claims, scores, strict=True):
        per_answer.setdefault(c.answer, []).append(float(s))
    kinds: dict[tuple[str, str], list[int]] = {}
    for i in chosen:
        kinds.setdefault((domain.answers[i].source, domain.answers[i].kind), []).append(i)
    table: dict[str, dict] = {}
    for (source, kind), rows in sorted(kinds.items()):
        bound = 0.10 if source == "begin" else 0.05
        y = np.array([domain.answers[i].label for i in rows])
        head = _logit(head_score[rows])
        reader = np.array([min(per_answer[i]) for i in rows])
        sides = {"head": head, "reader": reader}
        if source != "halueval" and 0 < y.sum() < len(y):
            x = np.column_stack([head, reader, [np.mean(per_answer[i]) for i in rows]])
            sides["stack"] = _stacked(x, y, [domain.answers[i].group for i in rows])
        row: dict = {"n": len(rows), "wrong": float(1 - y.mean()), "bound": bound}
        for name, side in sides.items():
            row[name] = {"auroc": auroc(side, y), "pass": _pass_rate_at(side, y, bound)[0]}
        table[f"{source}.{kind}"] = row
        echo(
            f"  {source}.{kind:14s} n={len(rows):4d} "
            + "  ".join(
                f"{k}: auc {v['auroc']:.3f} pass@{bound:g} {v['pass']:.3f}"
                for k, v in row.items()
                if isinstance(v, dict)
            )
        )
    return table


def shared_head_figures(pairs: Sequence[ClaimPair], per_set: int, seed: int) -> dict:
    """The frozen head's AUROC on the same held-out pairs :func:`shared_figures` scores."""
    from workers.clients.claims import load_scorer

    scorer = load_scorer()
    return shared_figures(
        pairs, lambda c, e: scorer.score_pairs(list(zip(c, e, strict=True))), per_set, seed
    )


# ----------------------------------------------------------------------------- run


def _hashes(config: ReaderConfig, names: Sequence[str]) -> dict[str, str]:
    files = [config.ragtruth, config.begin, config.halueval, *config.reviewed]
    if config.claims_dir is not None:
        files += [config.claims_dir / CLAIM_SETS[n].file for n in names]
        if "tabfact" in names:
            files.append(config.claims_dir / "tabfact_tables.jsonl.gz")
    return {p.name: file_sha256(p) for p in files if p is not None}


def _inputs(config: ReaderConfig, echo: Echo) -> tuple[list[ClaimPair], InDomain | None]:
    names = list(config.sets or CLAIM_SETS)
    shared: list[ClaimPair] = []
    if config.claims_dir is not None:
        shared = load_claim_sets(config.claims_dir, names)
        echo(f"shared sets: {len(shared)} pairs ({sum(not p.held_out for p in shared)} to train)")
    domain = None
    if config.ragtruth is not None and config.begin is not None:
        domain = in_domain_pairs(config, echo)
    return shared, domain


def measure_reader(
    config: ReaderConfig, shared: Sequence[ClaimPair], domain: InDomain | None, echo: Echo
) -> dict:
    """The exported reader's figures (the int8 file, as a worker loads it), beside the
    frozen head's on the same held-out data."""
    reader = ClaimReader(config.out_dir)

    def score(claims: Sequence[str], evidence: Sequence[str]) -> np.ndarray:
        return reader.logits(list(zip(claims, evidence, strict=True)))

    figures: dict[str, dict] = {}
    if shared:
        figures["shared_held_out"] = shared_figures(shared, score, config.eval_per_set, config.seed)
        echo("shared sets (held-out), reader: " + _line(figures["shared_held_out"]))
        figures["shared_held_out_head"] = shared_head_figures(
            shared, config.eval_per_set, config.seed
        )
        echo("shared sets (held-out), head:   " + _line(figures["shared_held_out_head"]))
    if domain is not None:
        figures["in_domain_held_out"] = domain_figures(domain.answers, score)
        echo("in-domain (held-out fold): " + _line(figures["in_domain_held_out"]))
        echo("answers, head vs reader vs both (held-out fold):")
        figures["answers_vs_head"] = compare_with_head(domain, score, echo)
    return figures


def remeasure(config: ReaderConfig, echo: Echo = print) -> dict:
    """Measure an already trained reader in ``config.out_dir`` again (``--measure-only``),
    keeping its training record and the figures taken during training."""
    metadata = json.loads((config.out_dir / META_FILE).read_text())
    shared, domain = _inputs(config, echo)
    metadata["figures"] = {
        **metadata.get("figures", {}),
        **measure_reader(config, shared, domain, echo),
    }
    _write_meta(config.out_dir, metadata)
    return metadata


def train_reader(config: ReaderConfig, command: str, echo: Echo = print) -> dict:
    """Train, export, measure; returns the metadata written to ``reader.json``."""
    config.check()
    started = time.monotonic()
    names = list(config.sets or CLAIM_SETS)
    shared, domain = _inputs(config, echo)
    answers = domain.answers if domain is not None else []
    trainer = _Trainer(config, echo)
    config.out_dir.mkdir(parents=True, exist_ok=True)
    if config.resume and trainer.checkpoint.is_file():
        trainer.load()
    budget = config.minutes * 60
    phases = [
        ("pretrain", budget * config.pretrain_share),
        ("finetune", budget * (1 - config.pretrain_share)),
    ]
    figures: dict[str, dict] = {}
    for phase, (name, seconds) in enumerate(phases):
        if seconds <= 0 or phase < trainer.state["phase"]:
            continue
        if name == "pretrain":
            train = _interleave([p for p in shared if not p.held_out], config.seed)
            claims, evidence = [p.claim for p in train], [p.evidence for p in train]
            labels = np.array([p.label for p in train])
            groups = np.array([p.name for p in train])
        else:
            train_claims = [
                (c, a.source)
                for a in answers
                if a.source != "halueval" and a.fold != 0
                for c in a.claims
                if c.label >= 0
            ]
            claims = [c.claim for c, _ in train_claims]
            evidence = [c.evidence for c, _ in train_claims]
            labels = np.array([c.label for c, _ in train_claims])
            groups = np.array([s for _, s in train_claims])
        if not len(labels):
            raise ValueError(f"phase {name} has no training pairs")
        echo(f"phase {phase + 1} ({name}): {len(labels)} pairs, {seconds / 60:.1f} min")
        tokens = trainer.tokenize(claims, evidence)
        weights = _balanced_weights(labels, groups)
        trainer.run_phase(phase, seconds, tokens, labels, weights, config.seed + 1000 * phase)
        if name == "pretrain" and config.pretrain_share < 1 and answers:
            figures["after_pretrain"] = domain_figures(answers, trainer.logits)
            echo("after pretraining: " + _line(figures["after_pretrain"]))
    echo("exporting to ONNX (int8)")
    trainer.export(config.out_dir)
    metadata = {
        "model": "all-MiniLM-L6-v2 fine-tuned as a (claim, evidence) pair classifier",
        "command": command,
        "config": _jsonable(asdict(config)),
        "max_tokens": config.max_tokens,
        "data_sha256": _hashes(config, names),
        "steps": {"pretrain": trainer.state["steps"][0], "finetune": trainer.state["steps"][1]},
        "minutes": {
            "pretrain": round(trainer.state["elapsed"][0] / 60, 1),
            "finetune": round(trainer.state["elapsed"][1] / 60, 1),
        },
        "onnx_sha256": file_sha256(config.out_dir / MODEL_FILE),
        "onnx_bytes": (config.out_dir / MODEL_FILE).stat().st_size,
    }
    _write_meta(config.out_dir, metadata)
    metadata["figures"] = {**figures, **measure_reader(config, shared, domain, echo)}
    metadata["total_seconds"] = round(time.monotonic() - started, 1)
    _write_meta(config.out_dir, metadata)
    return metadata


def _line(figures: dict) -> str:
    return ", ".join(f"{k} {v['auroc']:.3f}" for k, v in figures.items())


def _write_meta(out_dir: Path, metadata: dict) -> None:
    text = json.dumps(_finite(metadata), indent=2, sort_keys=True, allow_nan=False)
    (out_dir / META_FILE).write_text(text + "\n")


def _finite(value):
    if isinstance(value, float) and not np.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value
