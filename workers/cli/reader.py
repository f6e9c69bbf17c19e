"""`reader`: bring a published reader — a Hugging Face checkpoint exported once to the
ONNX reader directory that GROUNDSTREAM_READER and `--reader` serve
(docs/how-to/bring-a-reader.md)."""

from __future__ import annotations

from pathlib import Path

import click


@click.group()
def reader() -> None:
    """Published readers (NLI pair classifiers, token-level detectors) for the reader slot."""


@reader.command("export")
@click.argument("hf_dir", type=click.Path(path_type=Path))
@click.option(
    "--out",
    "out_dir",
    required=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="The reader directory to write (model.onnx, tokenizer.json, reader.json).",
)
@click.option(
    "--max-tokens",
    type=click.IntRange(min=16),
    default=None,
    help="Read at most this many tokens a row (default: the checkpoint's limit); longer"
    " inputs are read in overlapping windows.",
)
@click.option(
    "--label",
    default=None,
    help="The label read, by its exact name, where id2label does not say: the supported"
    " one of a pair classifier, the unsupported one of a token classifier.",
)
@click.option(
    "--claim-first",
    is_flag=True,
    help="A pair classifier trained on (claim, evidence) rather than (evidence, claim).",
)
def reader_export(
    hf_dir: Path, out_dir: Path, max_tokens: int | None, label: str | None, claim_first: bool
) -> None:
    """Export the local Hugging Face checkpoint HF_DIR (config.json, weights, tokenizer) as
    a reader directory: an fp32 ONNX graph checked against torch, its tokenizer, and
    reader.json (kind, label read, maximum length, sha256 of every file). Needs torch and
    transformers; serving it needs neither."""
    from pipeline.claims.readers import ReaderKind
    from workers.eval.reader_export import export_reader, read_checkpoint

    found = read_checkpoint(hf_dir, label=label, max_tokens=max_tokens)  # one line, no torch
    if claim_first and found.kind is not ReaderKind.PAIR:
        raise click.UsageError("--claim-first is for pair classifiers")
    order = ("claim", "evidence") if claim_first else None
    exported = export_reader(hf_dir, out_dir, label=label, max_tokens=max_tokens, order=order)
    click.echo(exported.summary())
