"""`encoder`: the sentence encoder's one-off export to ONNX."""

from __future__ import annotations

from pathlib import Path

import click


@click.group()
def encoder() -> None:
    """The sentence encoder (GROUNDSTREAM_ENCODER_BACKEND: torch or onnx)."""


@encoder.command("export")
@click.option("--model", type=click.Path(exists=True, file_okay=False), help="Model directory.")
def encoder_export(model: str | None) -> None:
    """Export the encoder to ONNX once (needs torch and onnx), into ~/.cache/groundstream."""
    from pipeline.encoder import default_model_path
    from pipeline.onnx_encoder import export_onnx

    click.echo(export_onnx(Path(model) if model else default_model_path()))
