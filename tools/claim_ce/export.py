"""Write the claim-support pairs (claim, its candidate windows, label) a cross-encoder trains on.

Usage (from the repository root, full install):
    python tools/claim_ce/export.py DATA_DIR OUT_DIR

DATA_DIR holds ragtruth_dev.jsonl, begin_dev.jsonl and halueval_qa_dev.jsonl (../shared/data);
OUT_DIR/pairs.jsonl.gz gets one line per answer: its source, task, group, fold (the same
group hash as `groundstream train`'s cross-validation), answer label and claims, each claim
with the text of its candidate windows (the claim head's, in context order) and its label.
The examples are `groundstream train`'s own (`training_examples`), plus HaluEval QA in every
rephrasing style for the phrasing check (never trained on).
"""

import gzip
import json
import sys
from pathlib import Path

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


def main(data: Path, out_dir: Path) -> None:
    config = TrainConfig(
        ragtruth=data / "ragtruth_dev.jsonl",
        begin=data / "begin_dev.jsonl",
        halueval=data / "halueval_qa_dev.jsonl",
        out_dir=out_dir,
    )
    examples = training_examples(config) + halueval_examples(config.halueval)
    cache = EmbeddingCache(CACHE_DIR / "embeddings.npz", load_encoder(None).encode_uncached)
    items = _prepare(examples, cache)
    out_dir.mkdir(parents=True, exist_ok=True)
    pairs = 0
    with gzip.open(out_dir / "pairs.jsonl.gz", "wt") as out:
        for i, item in enumerate(items):
            ex = item.example
            claims = []
            for text, label, cand in zip(ex.claims, ex.claim_labels, item.candidates, strict=True):
                windows = sorted((item.windows[j] for j in cand), key=lambda w: (w.chunk, w.first))
                claims.append({"t": text, "e": " ".join(w.text for w in windows), "y": label})
            pairs += len(claims)
            row = {
                "i": i,
                "src": ex.source,
                "kind": ex.kind,
                "group": ex.group,
                "fold": _fold_of(ex.group, 5),
                "label": ex.label,
                "claims": claims,
            }
            out.write(json.dumps(row) + "\n")
    print(f"wrote {len(items)} answers, {pairs} claims to {out_dir / 'pairs.jsonl.gz'}")


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
