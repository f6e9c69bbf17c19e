"""`encoder`: the sentence encoder's one-off export to ONNX (fp32, or int8 as well), and
the int8 graph measured against fp32 on labelled data."""

from __future__ import annotations

from pathlib import Path

import click

from pipeline.encoding.onnx_encoder import INT8_RECIPES
from workers.cli.base import load_policy, load_settings, policy_option


@click.group()
def encoder() -> None:
    """The sentence encoder (GROUNDSTREAM_ENCODER_BACKEND: torch, onnx or onnx-int8)."""


@encoder.command("export")
@click.option("--model", type=click.Path(exists=True, file_okay=False), help="Model directory.")
@click.option(
    "--quantize",
    type=click.Choice(["none", "int8"]),
    default="none",
    show_default=True,
    help="int8: also write the int8 graph the onnx-int8 backend loads.",
)
def encoder_export(model: str | None, quantize: str) -> None:
    """Export the encoder to ONNX once (needs torch and onnx), into ~/.cache/groundstream."""
    from pipeline.encoding.encoder import default_model_path
    from pipeline.encoding.onnx_encoder import export_onnx

    precision = "int8" if quantize == "int8" else "fp32"
    click.echo(export_onnx(Path(model) if model else default_model_path(), precision=precision))


@encoder.command("compare")
@click.argument("data", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False))
@click.option("--limit", type=click.IntRange(min=1), help="Records per file (default: all).")
@click.option(
    "--calibrate",
    type=click.Path(exists=True, dir_okay=False),
    help="Measure a static (QDQ) int8 graph calibrated on this file's texts (not DATA's).",
)
@click.option(
    "--recipe",
    type=click.Choice(INT8_RECIPES),
    default="dynamic",
    show_default=True,
    help="The int8 graph: dynamic (the onnx-int8 backend's) or weights (weight-only, 8-bit).",
)
@policy_option
def encoder_compare(
    data: tuple[str, ...],
    limit: int | None,
    calibrate: str | None,
    recipe: str,
    policy: str | None,
) -> None:
    """The int8 encoder against fp32 on labelled DATA: SGI, AUROC, the switch's decisions,
    raw rate. The last line is the verdict against the quality bar."""
    from workers.eval.quantized import CompareError, compare

    settings = load_settings(policy)
    try:
        result = compare(
            [Path(p) for p in data],
            settings,
            load_policy(settings),
            limit=limit,
            calibration=Path(calibrate) if calibrate else None,
            recipe=recipe,
            say=lambda line: click.echo(line, err=True),
        )
    except CompareError as exc:
        raise click.ClickException(str(exc)) from None
    for line in result.report():
        click.echo(line)
