"""A domain the fit never saw, before and after the guards, and after learning it from a few
hundred reviewed answers: the figures of docs/quality.md's "Domains it never saw".

    python tools/new_domain.py --hold-out summedits --cache /tmp/new_domain
    python tools/new_domain.py --hold-out wice --hold-out faithdial --adapt 0

Steps, each measured with the default encoder and claim head, as `calibrate` measures:

1. The calibration data (`../shared/data/halueval_qa_dev.jsonl`, `ragtruth_dev.jsonl`, what the
   shipped policy is fitted on) and each held-out claim set (`../shared/data/claims/NAME`:
   its (premise, hypothesis, label) as (context, answer, grounded) under one generic
   question, `QUESTION`; `--n` pairs drawn by a hash of the pair) are measured once into
   `--cache` (features, familiarity vectors, whether the language guard flags them).
2. *Fitted domains, cross-validated*: the grounding model, its cuts and the familiarity test
   are refitted on four folds of the calibration data (folds by a hash of the context, as
   `calibrate`), and the fifth is decided without and with the guards: right answers
   accepted (right to state, before the rules stage) and the share of accepts that are
   wrong (state wrong). BEGIN (`--begin`) is decided by the model fitted on every row, as
   it was never fitted on.
3. *Held-out domain, before*: the held-out set decided by the model fitted on all the
   calibration data, without and with the guards.
4. *After adaptation*: `--adapt` pairs of the held-out set (whole sources, by hash) join the
   calibration data as a file of their own ("reviewed answers"), the model, cuts and
   familiarity test are refitted on the union (the new domain joins the familiarity set),
   and the rest of the held-out set is decided; and so by a model fitted on the reviewed
   pairs alone (a route of their own, as `calibrate --from-decisions --route` fits one),
   and as `--from-decisions` writes that model: accepting nothing where its
   cross-validation breaks the bound beyond doubt (`pipeline.fit.grounding_model.bound_broken`).

No LLM: "state" here is what the switch accepts. Deterministic.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from pipeline.fit.claim_sets import CLAIM_SETS, SUPPORTED_LABELS, UNSUPPORTED_LABELS
from pipeline.fit.folds import group_folds
from pipeline.fit.grounding_model import (
    accepted_by,
    bound_broken,
    fit_grounding,
    long_rows,
    probabilities,
)
from pipeline.guards.familiarity import FAMILIAR_SHARE
from pipeline.guards.language import check_languages, encoder_languages

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
CALIBRATION = ("halueval_qa_dev.jsonl", "ragtruth_dev.jsonl")
QUESTION = "What does the source say?"
"""The one question every claim pair is asked under: claim sets have none."""
FOLDS = 5


def _hash(text: str) -> int:
    return int(hashlib.sha256(text.encode()).hexdigest()[:8], 16)


def claim_examples(name: str, n: int) -> list:
    """`n` labelled pairs of claim set `name` (by a hash of the pair) as examples."""
    from workers.eval.calibration import Example

    rows = []
    with gzip.open(DATA / "claims" / CLAIM_SETS[name].file, "rt", encoding="utf-8") as handle:
        for line in handle:
            record = json.loads(line)
            label = record["label"]
            if label not in SUPPORTED_LABELS and label not in UNSUPPORTED_LABELS:
                continue
            premise, claim = record.get("premise") or "", record.get("hypothesis") or ""
            if premise.strip() and claim.strip():
                grounded = label in SUPPORTED_LABELS
                rows.append(
                    (_hash(premise + claim), Example(name, QUESTION, (premise,), claim, grounded))
                )
    rows.sort(key=lambda r: r[0])
    return [e for _, e in rows[:n]]


def measure(examples: Sequence, path: Path) -> dict[str, np.ndarray]:
    """Features, familiarity vectors, labels, sources and the language guard's flag of each
    example, cached at `path`."""
    if path.exists():
        return dict(np.load(path))
    from pipeline.encoding.encoder import default_encoder
    from pipeline.policy.defaults import default_claim_head, default_claim_reader
    from pipeline.scores.batch import familiarity_vectors, measure_batch
    from pipeline.scores.grounding import FEATURES, grounding_features

    encoder, head, reader = default_encoder(), default_claim_head(), default_claim_reader()
    languages = encoder_languages(None)
    x, vectors = [], []
    for start in range(0, len(examples), 32):
        batch = examples[start : start + 32]
        measured = measure_batch(
            [(e.question, e.context, e.response) for e in batch], encoder, head, reader
        )
        for e, m in zip(batch, measured, strict=True):
            row = grounding_features(e.question, e.context, m.core, m.sgi, m.claim, m.reader)
            x.append([row[name] for name in FEATURES])
        vectors += familiarity_vectors(
            [(e.context, m.core) for e, m in zip(batch, measured, strict=True)], encoder
        )
        print(f"{path.stem}: {start + len(batch)}/{len(examples)}", file=sys.stderr, flush=True)
    out = {
        "x": np.array(x),
        "vec": np.array(vectors),
        "y": np.array([e.grounded for e in examples]),
        "group": np.array([e.group for e in examples]),
        "key": np.array(["\n".join(e.context) for e in examples]),
        "foreign": np.array(
            [bool(check_languages(e.response, e.context, languages).reason) for e in examples]
        ),
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez(path, **out)
    return out


def concat(*parts: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}


def subset(data: dict[str, np.ndarray], mask: np.ndarray) -> dict[str, np.ndarray]:
    return {k: v[mask] for k, v in data.items()}


def fit(data: dict[str, np.ndarray], share: float, max_accept_error: float):
    from pipeline.scores.grounding import FEATURES

    rows = [dict(zip(FEATURES, r, strict=True)) for r in data["x"]]
    return fit_grounding(
        rows,
        list(data["y"]),
        list(data["group"]),
        contexts=list(data["key"]),
        folds=FOLDS,
        max_accept_error=max_accept_error,
        vectors=data["vec"],
        familiar_share=share,
    )


def decide(fitted, data: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """(accepted without the guards, accepted with them) for each row."""
    p = probabilities(fitted.model, data["x"])
    cuts = ((fitted.accept, fitted.review, False), (fitted.accept_long, fitted.review_long, False))
    accepted = accepted_by(p, long_rows(data["x"]), cuts)
    test = fitted.model.familiarity
    familiar = test.distances(data["vec"]) <= test.cut
    return accepted, accepted & familiar & ~data["foreign"].astype(bool)


def figures(accepted: np.ndarray, y: np.ndarray) -> str:
    y = y.astype(bool)
    rate = accepted[y].mean() if y.any() else 0.0
    wrong = (~y[accepted]).mean() if accepted.any() else 0.0
    return (
        f"{rate:6.1%} right to state, {wrong:6.1%} of state wrong ({int(accepted.sum())} accepted)"
    )


def report(title: str, accepted: np.ndarray, guarded: np.ndarray, y: np.ndarray) -> None:
    print(f"{title} (n {len(y)}, {int(y.sum())} right)")
    print(f"  without the guards: {figures(accepted, y)}")
    print(f"  with the guards:    {figures(guarded, y)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--hold-out", action="append", required=True, choices=sorted(CLAIM_SETS))
    parser.add_argument("--n", type=int, default=600, help="pairs drawn of each held-out set")
    parser.add_argument("--adapt", type=int, default=300, help="pairs learnt from (0: none)")
    parser.add_argument("--share", type=float, default=FAMILIAR_SHARE)
    parser.add_argument("--max-accept-error", type=float, default=0.05)
    parser.add_argument("--begin", action="store_true", help="also decide begin_dev.jsonl")
    parser.add_argument("--cache", type=Path, default=Path("/tmp/new_domain"))
    args = parser.parse_args()
    from workers.eval.calibration import examples_from

    calibration = concat(
        *(
            measure(examples_from(DATA / f, None), args.cache / f"{Path(f).stem}.npz")
            for f in CALIBRATION
        )
    )
    # 2. fitted domains, cross-validated: every fold refits the model, cuts and test
    fold = group_folds(calibration["key"], FOLDS)
    plain = np.zeros(len(fold), dtype=bool)
    guarded = np.zeros(len(fold), dtype=bool)
    for k in range(FOLDS):
        fitted = fit(subset(calibration, fold != k), args.share, args.max_accept_error)
        plain[fold == k], guarded[fold == k] = decide(fitted, subset(calibration, fold == k))
    print(f"familiar share {args.share:.0%}; fitted domains, {FOLDS}-fold cross-validated:")
    for group in np.unique(calibration["group"]):
        mask = calibration["group"] == group
        report(f"{group}", plain[mask], guarded[mask], calibration["y"][mask])
    whole = fit(calibration, args.share, args.max_accept_error)
    test = whole.model.familiarity
    share = (
        f"{test.familiar:.1%} of the calibration data familiar out of fold,"
        f" {test.in_sample:.1%} under the fitted test"
    )
    print(f"familiarity cut {test.cut:.4f}: {share}")
    if args.begin:
        begin = measure(examples_from(DATA / "begin_dev.jsonl", None), args.cache / "begin_dev.npz")
        report("begin_dev.jsonl (never fitted on)", *decide(whole, begin), begin["y"])
    for name in args.hold_out:
        held = measure(claim_examples(name, args.n), args.cache / f"claims_{name}_{args.n}.npz")
        report(f"{name}: held out of every fit", *decide(whole, held), held["y"])
        if not args.adapt:
            continue
        # whole sources to the reviewed part, by hash, until `adapt` pairs are in it
        order = sorted(set(held["key"]), key=_hash)
        sizes = {k: int((held["key"] == k).sum()) for k in order}
        learnt, total = set(), 0
        for k in order:
            if total >= args.adapt:
                break
            learnt.add(k)
            total += sizes[k]
        mask = np.array([k in learnt for k in held["key"]])
        reviewed = subset(held, mask)
        reviewed["group"] = np.array([f"{name}_reviewed"] * int(mask.sum()))
        adapted = fit(concat(calibration, reviewed), args.share, args.max_accept_error)
        rest = subset(held, ~mask)
        before = decide(whole, rest)
        after = decide(adapted, rest)
        learnt_right, others = int(reviewed["y"].sum()), int((~mask).sum())
        print(f"  learnt from {int(mask.sum())} reviewed pairs ({learnt_right} right);", end="")
        print(f" the other {others}:")
        print(f"    before, with the guards: {figures(before[1], rest['y'])}")
        print(f"    after, without the guards: {figures(after[0], rest['y'])}")
        print(f"    after, with the guards:    {figures(after[1], rest['y'])}")
        alone = fit(reviewed, args.share, args.max_accept_error)
        own = decide(alone, rest)
        print(f"    a route of its own, on the reviewed pairs alone: {figures(own[1], rest['y'])}")
        # what `calibrate --from-decisions` writes: nothing accepted where the refit's
        # cross-validation breaks the bound beyond doubt
        broken = bound_broken(alone.model.metrics, f"{name}_reviewed", args.max_accept_error)
        if broken:
            kept = decide(alone.accepting_nothing(), rest)
            print(f"      as --from-decisions writes it: {figures(kept[1], rest['y'])} ({broken})")


if __name__ == "__main__":
    main()
