"""`keys generate`: an Ed25519 key pair per stage, as files or as Kubernetes manifests."""

from __future__ import annotations

from pathlib import Path

import click

from pipeline.bounds.conclusions import SIGNERS


@click.group()
def keys() -> None:
    """Per-stage signing keys (docs/explanation/security.md)."""


@keys.command("generate")
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    required=True,
    help="Folder to write to: <stage>.key (mode 0600) and <stage>.pub, or the manifests"
    " file keys.yaml with --k8s.",
)
@click.option(
    "--stage",
    "stages",
    multiple=True,
    type=click.Choice(SIGNERS),
    help="A stage to make a pair for (repeatable); default: every one that signs"
    f" ({', '.join(SIGNERS)}).",
)
@click.option(
    "--k8s",
    is_flag=True,
    help="Kubernetes manifests instead: a Secret groundstream-signing-<stage> (its private"
    " key as signing.key) per stage, and the ConfigMap groundstream-trusted-keys (every"
    " <stage>.pub).",
)
@click.option("--namespace", default=None, help="With --k8s: the manifests' namespace.")
def generate(out: Path, stages: tuple[str, ...], k8s: bool, namespace: str | None) -> None:
    """Make a fresh key pair for each stage. Each stage's process gets its own .key
    (GROUNDSTREAM_SIGNING_KEY_FILE); the terminal writer, review and `audit verify` get
    the folder of .pub files (GROUNDSTREAM_TRUSTED_KEYS_DIR). For a rollover, make the
    new pair elsewhere and add its .pub to the trusted folder as <stage>.<any>.pub."""
    from topics.security.keys import generate as make
    from topics.security.keys import k8s_manifests, write_pairs

    pairs = make(dict.fromkeys(stages or SIGNERS))
    if k8s:
        out.mkdir(parents=True, exist_ok=True)
        target = out / "keys.yaml"
        if target.exists():
            raise click.ClickException(f"{target} exists: not overwritten")
        target.touch(mode=0o600)
        target.write_text(k8s_manifests(pairs, namespace))
        click.echo(f"wrote {target}: {len(pairs)} Secrets and a ConfigMap")
        return
    for path in write_pairs(out, pairs):
        click.echo(f"wrote {path}")
