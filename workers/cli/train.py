"""`train` and `train claims`: fit the claim-support head or the claim reader."""

from __future__ import annotations

import sys
from pathlib import Path

import click

_FILE = click.Path(exists=True, dir_okay=False, path_type=Path)


@click.group(invoke_without_command=True)
@click.option("--ragtruth", type=_FILE, help="RAGTruth span-labelled answers.")
@click.option("--begin", type=_FILE, help="BEGIN dialogue replies.")
@click.option(
    "--halueval", type=_FILE, help="HaluEval QA file for the phrasing check (never trained on)."
)
@click.option(
    "--reviewed",
    multiple=True,
    type=_FILE,
    help="Reviewers' verdicts (`groundstream review export`) as extra examples. Repeatable.",
)
@click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="The directory head.npz and head.json are written to.",
)
@click.option("--seed", type=int, default=0, show_default=True, help="The fit's random seed.")
@click.pass_context
def train(
    ctx: click.Context,
    ragtruth: Path | None,
    begin: Path | None,
    halueval: Path | None,
    reviewed: tuple[Path, ...],
    out_dir: Path | None,
    seed: int,
) -> None:
    """Train the claim-support head (`train --ragtruth … --begin … --out DIR`), or the
    claim reader (`train claims …`); print held-out figures; write the artefact."""
    if ctx.invoked_subcommand is not None:
        return
    missing = [
        o
        for o, v in (("--ragtruth", ragtruth), ("--begin", begin), ("--out", out_dir))
        if v is None
    ]
    if missing:
        raise click.UsageError(f"train needs {', '.join(missing)}")
    from workers.eval.train import TrainConfig
    from workers.eval.train import train as fit

    command = "groundstream train " + " ".join(sys.argv[2:])
    assert ragtruth is not None and begin is not None and out_dir is not None
    config = TrainConfig(ragtruth, begin, halueval, out_dir, seed=seed, reviewed=reviewed)
    fit(config, command, echo=click.echo)
    click.echo(f"wrote {out_dir / 'head.npz'} and {out_dir / 'head.json'}")


@train.command("claims")
@click.option(
    "--claims",
    "claims_dir",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="The shared labelled claim sets (pretraining).",
)
@click.option("--ragtruth", type=_FILE, help="RAGTruth span-labelled answers (fine-tuning).")
@click.option("--begin", type=_FILE, help="BEGIN dialogue replies (fine-tuning).")
@click.option(
    "--halueval", type=_FILE, help="HaluEval QA for the phrasing figures (never trained on)."
)
@click.option(
    "--reviewed",
    multiple=True,
    type=_FILE,
    help="Reviewers' verdicts (`groundstream review export`) to fine-tune on. Repeatable.",
)
@click.option(
    "--out",
    "out_dir",
    required=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="The reader's directory: reader.onnx, reader.json and the checkpoint.",
)
@click.option("--minutes", type=float, default=80.0, show_default=True, help="Training budget.")
@click.option(
    "--pretrain-share",
    type=float,
    default=0.5,
    show_default=True,
    help="Share of the budget for the shared sets; 0 fine-tunes only, 1 pretrains only.",
)
@click.option("--set", "sets", multiple=True, help="Pretrain on this shared set only. Repeatable.")
@click.option("--seed", type=int, default=0, show_default=True, help="The run's random seed.")
@click.option("--lr", type=float, default=5e-5, show_default=True, help="The learning rate.")
@click.option(
    "--max-tokens", type=int, default=192, show_default=True, help="Tokens a pair is cut to."
)
@click.option(
    "--checkpoint-minutes",
    type=float,
    default=5.0,
    show_default=True,
    help="Minutes between checkpoints (--resume continues from the last).",
)
@click.option(
    "--eval-per-set",
    type=int,
    default=600,
    show_default=True,
    help="Held-out pairs scored per shared set (a seeded sample).",
)
@click.option("--resume", is_flag=True, help="Continue from OUT/checkpoint.pt.")
@click.option(
    "--measure-only", is_flag=True, help="Measure the reader already in OUT again; no training."
)
def train_claims(
    claims_dir,
    ragtruth,
    begin,
    halueval,
    reviewed,
    out_dir,
    minutes,
    pretrain_share,
    sets,
    seed,
    lr,
    max_tokens,
    checkpoint_minutes,
    eval_per_set,
    resume,
    measure_only,
) -> None:
    """Fine-tune the bundled encoder as the claim reader (CPU: bucketed, checkpointed)."""
    from workers.eval.reader_train import ReaderConfig, remeasure, train_reader

    config = ReaderConfig(
        out_dir=out_dir,
        claims_dir=claims_dir,
        ragtruth=ragtruth,
        begin=begin,
        halueval=halueval,
        reviewed=tuple(reviewed),
        minutes=minutes,
        pretrain_share=pretrain_share,
        seed=seed,
        lr=lr,
        max_tokens=max_tokens,
        checkpoint_minutes=checkpoint_minutes,
        eval_per_set=eval_per_set,
        sets=tuple(sets),
        resume=resume,
    )
    try:
        config.check()
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    if measure_only:
        remeasure(config, echo=click.echo)
        click.echo(f"wrote {out_dir / 'reader.json'}")
        return
    command = "groundstream train claims " + " ".join(sys.argv[3:])
    train_reader(config, command, echo=click.echo)
    click.echo(f"wrote {out_dir / 'reader.onnx'} and {out_dir / 'reader.json'}")
