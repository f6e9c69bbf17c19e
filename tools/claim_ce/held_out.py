"""Write the answers the claim reader never trained on: its held-out fold of RAGTruth and BEGIN.

Usage (repository root):
    python tools/claim_ce/held_out.py DATA_DIR OUT_DIR

`groundstream train claims` fine-tunes on four of five group folds (`workers.eval.train`'s
`_fold_of(group, 5) != 0`, the group being an answer's source) and keeps fold 0 for its
figures. A grounding model that reads the reader's score must be fitted and measured on
answers the reader did not see, or it learns the reader's in-sample confidence: this
writes OUT_DIR/ragtruth_held_out.jsonl and OUT_DIR/begin_held_out.jsonl (fold 0, records
unchanged) for `calibrate` and `eval`.
"""

import json
import sys
from pathlib import Path

from pipeline.fit.claims_data import begin_group, ragtruth_group
from workers.eval.train import _fold_of


def main(data: Path, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for name, group in (("ragtruth", ragtruth_group), ("begin", begin_group)):
        kept = total = 0
        with (
            (data / f"{name}_dev.jsonl").open() as src,
            (out / f"{name}_held_out.jsonl").open("w") as dst,
        ):
            for line in src:
                if not line.strip():
                    continue
                total += 1
                if _fold_of(group(json.loads(line)), 5) == 0:
                    dst.write(line)
                    kept += 1
        print(f"{name}: {kept} of {total} answers held out -> {out / f'{name}_held_out.jsonl'}")


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
