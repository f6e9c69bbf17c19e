"""Compare the claim head with the cross-encoder's out-of-fold scores, answer by answer.

Usage (repository root, full install):
    python tools/claim_ce/compare.py DATA_DIR PAIRS_DIR OOF.npy

Prints, per RAGTruth task and for BEGIN, the AUROC and the share of right answers a cut
passes at the error bound (8%; BEGIN 10%) for: the claim head's weakest claim
(`groundstream train`'s own cross-validation), the cross-encoder's weakest and mean claim,
and a logistic stack of the three, itself cross-validated on the same folds.
"""

import gzip
import json
import sys
from pathlib import Path

import numpy as np

from pipeline.encoding.encoder import load_encoder
from pipeline.fit.metrics import auroc
from workers.eval.train import (
    CACHE_DIR,
    EmbeddingCache,
    TrainConfig,
    _cross_validate,
    _fold_of,
    _pass_rate_at,
    _prepare,
    training_examples,
)

D, PAIRS = Path(sys.argv[1]), Path(sys.argv[2])
cfg = TrainConfig(
    ragtruth=D / "ragtruth_dev.jsonl",
    begin=D / "begin_dev.jsonl",
    halueval=None,
    out_dir=Path("/tmp/x"),
)
ex = training_examples(cfg)
cache = EmbeddingCache(CACHE_DIR / "embeddings.npz", load_encoder(None).encode_uncached)
items = _prepare(ex, cache)
figs, done = _cross_validate(items, cfg)
with gzip.open(PAIRS / "pairs.jsonl.gz", "rt") as handle:
    recs = [json.loads(line) for line in handle]
oof = np.load(sys.argv[3])
at = 0
ce_min, ce_mean = [], []
for r in recs:
    n = len(r["claims"])
    s = oof[at : at + n]
    at += n
    if r["src"] != "halueval":
        ce_min.append(s.min() if n else 0)
        ce_mean.append(s.mean() if n else 0)
ce_min, ce_mean = np.array(ce_min), np.array(ce_mean)
head = np.array([d.score for d in done])
y = np.array([d.example.label for d in done])
src = np.array([d.example.source for d in done])
kind = np.array([d.example.kind for d in done])
grp = np.array([d.example.group for d in done])


def lg(p):
    p = np.clip(p, 1e-4, 1 - 1e-4)
    return np.log(p / (1 - p))


fold = np.array([_fold_of(g, 5) for g in grp])
X = np.c_[lg(head), ce_min, ce_mean]


def cvstack(mask, cols):
    out = np.zeros(mask.sum())
    Xm, ym, fm = X[mask][:, cols], y[mask], fold[mask]
    for k in range(5):
        tr, te = fm != k, fm == k
        w = np.zeros(Xm.shape[1] + 1)
        A = np.c_[Xm[tr], np.ones(tr.sum())]
        t = ym[tr]
        for _ in range(300):  # logistic by gradient descent
            p = 1 / (1 + np.exp(-A @ w))
            w -= 0.05 * A.T @ (p - t) / len(t)
        out[te] = np.c_[Xm[te], np.ones(te.sum())] @ w
    return out


for name, mask, err in [
    ("ragtruth", src == "ragtruth", 0.08),
    ("QA", (src == "ragtruth") & (kind == "QA"), 0.08),
    ("Summary", (src == "ragtruth") & (kind == "Summary"), 0.08),
    ("Data2txt", (src == "ragtruth") & (kind == "Data2txt"), 0.08),
    ("begin", src == "begin", 0.10),
]:
    row = [name, f"n={mask.sum()} wrong={1 - y[mask].mean():.2f}"]
    for lab, s in [
        ("head", head[mask]),
        ("ce_min", ce_min[mask]),
        ("ce_mean", ce_mean[mask]),
        ("stack", cvstack(mask, [0, 1, 2])),
    ]:
        row.append(
            f"{lab}: auc {auroc(s, y[mask]):.3f} pass@{err} {_pass_rate_at(s, y[mask], err)[0]:.3f}"
        )
    print(" | ".join(row))
